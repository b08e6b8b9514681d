"""Approvals: a person decides a tool call an ``ask`` rule holds, when no approver function
answers it (always so on a fleet worker; in process when ``run_workflow`` got no
``on_ask``).

How it goes (``tests/test_approvals.py`` in process, ``tests/test_approvals_fleet.py`` on the
fleet, ``tests/test_approvals_http.py`` over HTTP):

1. *Ask.* The tool call's permission gate (:mod:`little_dist.harness.approval_gate`) derives
   the call's approval id (:func:`~.records.approval_id_for`: the same in every attempt that
   makes the same call) and records ``little.approval.requested`` in the run's log, with
   the call, the rule and, when the rule has a ``timeout``, ``deadlineAt`` and ``onTimeout``.
2. *Suspend.* On a fleet worker the call then raises
   :class:`~little_dist.harness.errors.SubRunPending` for the approval id, as a sub-run wait
   does: the attempt commits ``little.step.suspended`` (``waitingFor: [approvalId]``) and
   gives its slot back; no thread waits. In process the calling thread waits, looking at the
   log (:func:`~.store.wait_for_decision`): a decision may come from another process.
3. *Decide.* ``little approvals approve|reject``, ``POST /v1/approvals/{id}`` or
   :func:`~.store.decide_approval` records ``little.approval.decided`` (who, why, how;
   when is its ``recordedAt``), the first decision alone. A rule's deadline records its
   ``onTimeout`` the same way: on the fleet every look at the run does it once the
   deadline has passed (the scheduler's sweeps look at every active run every few
   seconds), in process the waiting thread does.
4. *Resume.* The fold treats the decision as the end of what the suspended step waited
   for, and ``decide`` schedules its next attempt (free of the step's retry budget) on any
   worker. That attempt replays its model turns from the memo, reaches the same call, finds
   the decision in its step's events, and records ``harness.permission.decided`` (reason
   ``approved``, ``rejected`` or ``timed_out``, with the ``approvalId``): an approved call
   runs, a rejected one fails as a rule's deny does (``ToolPermissionDeniedError``,
   causeCode ``permission_denied``, not retriable).

Modules: :mod:`.records` (pure: ids, payloads, the fold of the two events) and
:mod:`.store` (reads and appends in a world).
"""

from __future__ import annotations

from little_dist.approvals.records import (
    APPROVAL_EVENT_TYPES,
    Approval,
    ApprovalNotFoundError,
    approval_id_for,
    approvals_of,
    run_id_of,
)
from little_dist.approvals.store import (
    ApprovalDecidedError,
    apply_due_timeouts,
    decide_approval,
    find_approval,
    list_approvals,
    wait_for_decision,
)

__all__ = [
    "APPROVAL_EVENT_TYPES",
    "Approval",
    "ApprovalDecidedError",
    "ApprovalNotFoundError",
    "apply_due_timeouts",
    "approval_id_for",
    "approvals_of",
    "decide_approval",
    "find_approval",
    "list_approvals",
    "run_id_of",
    "wait_for_decision",
]
