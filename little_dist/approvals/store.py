"""Approvals in a world: find one, decide it, list the pending ones, apply deadlines, and
wait for a decision in process.

Everything here is an append to, or a read of, the run's log; nothing else holds state. A
decision is ``little.approval.decided`` with occurrence ``approval-decided:{id}``: two people
deciding at once (or a person and a deadline) record one decision, the first, and the
other is told it was decided already (:class:`ApprovalDecidedError`). The append signals
the fleet's scheduler as any append does, which finds the waiting step due and schedules
its next attempt on any worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Final

from little_dist.approvals.records import (
    APPROVAL_EVENT_TYPES,
    Approval,
    ApprovalNotFoundError,
    Via,
    approvals_of,
    decision_event,
    run_id_of,
    timeout_decision,
)
from little_dist.errors import ConflictError, RunEndedError
from little_dist.events import RUN_END_EVENT_TYPES
from little_dist.world.base import World

__all__ = [
    "ApprovalDecidedError",
    "apply_due_timeouts",
    "decide_approval",
    "find_approval",
    "list_approvals",
    "wait_for_decision",
]

#: How often an in-process wait looks at the log for a decision (seconds).
POLL_S: Final = 0.2


class ApprovalDecidedError(ConflictError):
    """The approval was decided already (or its run has ended): nothing was recorded."""


def _run_approvals(world: World, run_id: str) -> list[Approval]:
    events = world.list_events_partly(run_id, after=0, decode=APPROVAL_EVENT_TYPES)
    return approvals_of(run_id, events)


def find_approval(world: World, approval_id: str) -> Approval:
    """The approval ``approval_id`` as its run's log tells it now."""
    run_id = run_id_of(approval_id)
    if world.last_sequence(run_id) == 0:
        raise ApprovalNotFoundError(approval_id, f"no run {run_id}")
    for approval in _run_approvals(world, run_id):
        if approval.approval_id == approval_id:
            return approval
    raise ApprovalNotFoundError(approval_id, f"run {run_id} asked for no such approval")


def decide_approval(
    world: World,
    approval_id: str,
    *,
    allow: bool,
    by: str,
    via: Via,
    reason: str | None = None,
    token_id: str | None = None,
) -> Approval:
    """Record a person's decision (``token_id``: the HTTP token it came with); the approval
    as decided. :class:`ApprovalNotFoundError`
    for an unknown id, :class:`ApprovalDecidedError` when it was decided before (by
    someone else, or its deadline) or its run has ended."""
    approval = find_approval(world, approval_id)
    if not approval.pending:
        raise ApprovalDecidedError(_already(approval))
    wanted = decision_event(approval, allow=allow, by=by, via=via, reason=reason, token_id=token_id)
    try:
        recorded = world.append(approval.run_id, wanted)
    except RunEndedError:
        raise ApprovalDecidedError(
            f"approval {approval_id} can no longer be decided: run {approval.run_id} has ended"
        ) from None
    now = find_approval(world, approval_id)
    if recorded.payload != wanted.payload:
        raise ApprovalDecidedError(_already(now))
    return now


def _already(approval: Approval) -> str:
    word = "approved" if approval.decision == "allow" else "rejected"
    by = f" by {approval.decided_by}" if approval.decided_by else ""
    return f"approval {approval.approval_id} was already {word}{by}"


def list_approvals(
    world: World, *, run_ids: Iterable[str] | None = None, pending_only: bool = True
) -> list[Approval]:
    """The approvals of the runs still going (``run_ids``: of those runs only), oldest
    request first; ``pending_only``: those nobody decided yet. Each run costs its first and
    last events, and a run still going a read of its approval events."""
    found: list[Approval] = []
    for run_id in world.list_run_ids() if run_ids is None else run_ids:
        bounds = world.first_and_last_events(run_id)
        if bounds is None or bounds[1].type in RUN_END_EVENT_TYPES:
            continue
        found.extend(
            approval
            for approval in _run_approvals(world, run_id)
            if approval.pending or not pending_only
        )
    return sorted(found, key=lambda approval: (approval.requested_at, approval.approval_id))


def apply_due_timeouts(world: World, approvals: Iterable[Approval], now_ms: int) -> int:
    """Record the ``onTimeout`` decision of each pending approval past its deadline (the
    first decision recorded stands); how many were due. A run that ended meanwhile takes
    none (its waiting step ended with it)."""
    due = 0
    for approval in approvals:
        if approval.due(now_ms):
            due += 1
            try:
                world.append(approval.run_id, timeout_decision(approval))
            except RunEndedError:
                continue
    return due


def wait_for_decision(
    world: World,
    approval: Approval,
    *,
    cancelled: Callable[[], bool],
    clock: Callable[[], float] = time.time,
    poll_s: float = POLL_S,
) -> Approval | None:
    """In process, where nothing suspends: wait for ``approval``'s decision (from ``little
    approvals``, the HTTP API, another thread), recording its ``onTimeout`` once its
    deadline passes. ``None`` when ``cancelled()`` turned true first."""
    while True:
        now = find_approval(world, approval.approval_id)
        if not now.pending:
            return now
        if cancelled():
            return None
        if now.due(int(clock() * 1000)) and _append_quietly(world, now.run_id, now):
            continue
        time.sleep(poll_s)


def _append_quietly(world: World, run_id: str, approval: Approval) -> bool:
    try:
        world.append(run_id, timeout_decision(approval))
    except RunEndedError:
        return False  # the run ended meanwhile: the caller is told to stop
    return True
