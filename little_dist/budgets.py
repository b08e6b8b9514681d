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
from collections.abc import Mapping
from typing import Any

from little_dist import occurrences
from little_dist.errors import InvalidInputError
from little_dist.event_types.engine import BUDGET_EVENT_TYPE
from little_dist.events import EventInput

__all__ = ["borrows_from", "budget_event", "budget_usd"]


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


def budget_event(budget: float | None, from_parent: str | None = None) -> EventInput:
    """The event recording a run's ceiling (idempotent: one per run); ``from_parent``: the
    budgeted parent a sub-run borrows from (recorded before the sub-run is planned, so its
    planner's calls borrow too: :mod:`little_dist.harness.budget_tree`)."""
    payload: dict[str, Any] = {}
    if budget is not None:
        payload["budgetUsd"] = budget
    if from_parent is not None:
        payload["fromParentRunId"] = from_parent
    return EventInput(type=BUDGET_EVENT_TYPE, payload=payload, occurrence_id=occurrences.BUDGET)


def borrows_from(parent: Mapping[str, Any] | None) -> str | None:
    """The parent run a sub-run with the parent link ``parent`` (its ``RunStarted``
    fields) borrows from, if its parent is budgeted."""
    if not parent or parent.get("budgetFromParent") is not True:
        return None
    parent_run_id = parent.get("parentRunId")
    return parent_run_id if isinstance(parent_run_id, str) else None
