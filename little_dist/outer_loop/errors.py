"""The error an outer loop stops with (:class:`OuterLoopError`)."""

from __future__ import annotations

from typing import Any, Final

from little_dist.authoring.errors import RunFailedError
from little_dist.authoring.results import RunResult

__all__ = ["OuterLoopError"]

_UNCOMPILED: Final = "uncompiled"


class OuterLoopError(RunFailedError):
    """An outer loop that cannot go on (upstream's ``RunFailedError`` of a loop).

    ``cause_code``: ``outer_loop_exhausted`` (``max_outer_cycles`` cycles and no ``done``;
    ``result`` is the last cycle's run, ``last_cycle_output`` its output) or
    ``runtime_config_error`` (the message names which: ``outer_loop_max_cycles_mismatch``,
    ``outer_loop_goal_mismatch``, ``outer_loop_manifest_corrupt``,
    ``outer_loop_requested_without_supervise_adapter``), ``budget_exceeded`` (the loop's
    budget cannot start a cycle or hold its supervisor's call) or ``daily_budget_exceeded``
    (a daily key ceiling cannot hold the supervisor's call; see
    :mod:`little_dist.outer_loop.budget`).
    """

    def __init__(
        self,
        message: str,
        *,
        outer_loop_id: str,
        cause_code: str,
        run_id: str = _UNCOMPILED,
        workflow_version_id: str = _UNCOMPILED,
        result: RunResult | None = None,
        last_cycle_output: Any = None,
    ) -> None:
        super().__init__(
            message,
            run_id=run_id,
            workflow_version_id=workflow_version_id,
            cause_code=cause_code,
            error={"name": "RunFailedError", "message": message, "causeCode": cause_code},
            result=result,
        )
        self.outer_loop_id = outer_loop_id
        self.last_cycle_output = last_cycle_output
