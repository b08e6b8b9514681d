"""A step's expression context, its resolved input, and the parallel fan-in (pure).

The public face of :mod:`little_dist.scheduling.context`: what the runtime calls to build the
``{{ }}`` scope of a step path and the input a harness receives, and what ``decide`` uses for
decisions, parallel ``items``/``itemKey`` and the fan-in array.

- :func:`expression_context` — ``input``, ``item`` (inside a branch), ``step``, ``workflow``,
  ``steps`` (``output`` per completed step; ``output`` + ``visits`` for loop steps, which
  ``lastOutput``/``allVisits`` read);
- :func:`resolve_step_input` — upstream's ``resolveStepInput``;
- :func:`resolve_step_config` — the step's ``with`` block resolved (an ``ai.generate`` step's
  rendered ``prompt``);
- :func:`fan_in_output` — upstream's ``parallelFanInOutput`` over :class:`BranchResult`.
"""

from __future__ import annotations

from little_dist.scheduling.context import (
    BranchResolutionError,
    BranchResult,
    OutputLoader,
    StepPathError,
    expression_context,
    fan_in_output,
    resolve_step_config,
    resolve_step_input,
)

__all__ = [
    "BranchResolutionError",
    "BranchResult",
    "OutputLoader",
    "StepPathError",
    "expression_context",
    "fan_in_output",
    "resolve_step_config",
    "resolve_step_input",
]
