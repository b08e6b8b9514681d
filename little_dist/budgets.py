"""Dollar budgets: a run's ceiling checked, and recorded in its log.

A run's budget is the engine event ``little.run.budget`` (``{budgetUsd}``, occurrence
``budget``), appended before the run's first step: wherever the run is driven (in process,
resumed, on a fleet's workers), the ceiling is read from its log, and so is what it spent
(the priced model calls) and what it holds (the worst-case cost of budgeted calls sent and
not yet ended): see :class:`~little_dist.run_state.RunState` ``budget_usd``, ``spent_usd``,
``reserved_usd``. The harness's model call seam reserves against it
(:mod:`little_dist.harness.budget_hold`).
"""

from __future__ import annotations

import math
from typing import Any

from little_dist import occurrences
from little_dist.errors import InvalidInputError
from little_dist.event_types.engine import BUDGET_EVENT_TYPE
from little_dist.events import EventInput

__all__ = ["budget_event", "budget_usd"]


def budget_usd(value: Any, where: str) -> float | None:
    """``value`` checked as a dollar budget: a positive finite number (``None``: no budget)."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InvalidInputError(
            f"{where}: budget_usd must be a positive number of dollars, got {value!r}"
        )
    return float(value)


def budget_event(budget: float) -> EventInput:
    """The event recording a run's ceiling (idempotent: one per run)."""
    return EventInput(
        type=BUDGET_EVENT_TYPE, payload={"budgetUsd": budget}, occurrence_id=occurrences.BUDGET
    )
