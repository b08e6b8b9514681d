"""The approvals of one run that a deadline may decide: :class:`ApprovalDeadlines`.

A fleet process's view of a run (:class:`~little_dist.fleet.run_tracker.RunTracker`) feeds
it the run's approval events as it folds them; every look at the run then asks
:meth:`ApprovalDeadlines.apply` to record the rule's ``onTimeout`` of those past their
deadline (the scheduler's sweeps look at every active run every few seconds, so a deadline
applies within a sweep of it, with or without a worker).
"""

from __future__ import annotations

from typing import Any

from little_dist.approvals.records import Approval, approvals_of
from little_dist.approvals.store import apply_due_timeouts
from little_dist.event_types.engine import APPROVAL_DECIDED, APPROVAL_REQUESTED
from little_dist.world.base import World

__all__ = ["APPROVAL_TYPES", "ApprovalDeadlines"]

#: The event types :meth:`ApprovalDeadlines.note` reads.
APPROVAL_TYPES = frozenset({APPROVAL_REQUESTED, APPROVAL_DECIDED})


class ApprovalDeadlines:
    """Pending approvals with a deadline, by id (owned by one tracker; not thread-safe)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._pending: dict[str, Approval] = {}
        self._decided: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._pending)

    def note(self, event: Any, payload: dict[str, Any]) -> None:
        """Take in one approval event (or its undecoded form, with ``payload`` parsed)."""
        approval_id = payload.get("approvalId")
        if not isinstance(approval_id, str):
            return
        if event.type == APPROVAL_DECIDED:
            self._pending.pop(approval_id, None)
            self._decided.add(approval_id)
        elif payload.get("deadlineAt") is not None and approval_id not in self._decided:
            for approval in approvals_of(self.run_id, [event]):
                self._pending[approval_id] = approval

    def apply(self, world: World, now_ms: int) -> bool:
        """Record the default decision of each approval past its deadline; whether one was."""
        return bool(self._pending) and apply_due_timeouts(world, self._pending.values(), now_ms) > 0
