"""The pure scheduling brain: ``decide(ctx, state) -> Decision``.

No IO, no clock, no uuid: the same state gives the same decision, with the same occurrence
ids, in every process. See ``/work/notes/runtime-design.md`` for the contract.
"""

from __future__ import annotations

from little_dist.scheduling.decide import decide
from little_dist.scheduling.types import (
    DEFAULT_MAX_CRASH_RETRIES,
    Claims,
    Decision,
    DispatchKind,
    DispatchRole,
    RunContext,
    StepDispatch,
)

__all__ = [
    "DEFAULT_MAX_CRASH_RETRIES",
    "Claims",
    "Decision",
    "DispatchKind",
    "DispatchRole",
    "RunContext",
    "StepDispatch",
    "decide",
]
