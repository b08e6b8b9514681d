"""The engine's own event types in a run's log (beside upstream's catalogue), under ``little.``.

Upstream's types are in :mod:`~little_dist.event_types.catalogue`; these are the engine's
extensions, named here so that whoever records one and whoever reads it spell it alike. The
fold tolerates them (:mod:`little_dist.run_state` counts what it does not read), and the
typed reader reads them as :class:`~little_dist.event_types.EngineEvent`. Their occurrence
ids are in :mod:`little_dist.occurrences`. Pure: names only (importing this module does not
load the typed catalogue).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "APPROVAL_DECIDED",
    "APPROVAL_REQUESTED",
    "BUDGET_DRAWN_EVENT_TYPE",
    "BUDGET_EVENT_TYPE",
    "BUDGET_LENT_EVENT_TYPE",
    "BUDGET_RESERVED_EVENT_TYPE",
    "CALLBACK_ABANDONED",
    "CALLBACK_ATTEMPTED",
    "CALLBACK_DELIVERED",
    "CALLBACK_EVENT_TYPE",
    "CALLBACK_EVENT_TYPES",
    "CANCEL_EVENT_TYPE",
    "CAPABILITY_DRIFT_EVENT",
    "LIMITS_EVENT_TYPE",
    "MEMORY_CONFLICT_EVENT",
    "MODEL_MEMOIZED",
    "PLAN_FAILED_EVENT_TYPE",
    "STEP_SUSPENDED",
    "SUBMITTED_EVENT_TYPE",
    "SUBMITTED_PARENT_FIELD",
    "SUB_RUN_ENDED",
    "SUB_RUN_STARTED",
    "SUPERVISOR_HOLD_EVENT_TYPE",
    "TOOL_MEMOIZED",
]

# little.run.*: a run's life on the fleet.

#: Engine event asking a run to stop (``Client.cancel``, ``little cancel``); occurrence
#: ``cancel``. ``decide`` then fails the run with causeCode ``cancelled``.
CANCEL_EVENT_TYPE: Final = "little.run.cancel_requested"
#: Engine event recording a run's limits (upstream's run-level ``timeout`` and
#: ``maxAttempts``, a submission's deadline): ``{deadlineAt?, causeCode?, timeoutMs?,
#: maxAttempts?}``, occurrence ``limits``; see :mod:`little_dist.run_limits`.
LIMITS_EVENT_TYPE: Final = "little.run.limits"
#: Engine event recording a submission that still has to be planned (``little.plan``):
#: ``{workflowId, input}``, occurrence ``submit``. Appended before ``RunStarted``.
SUBMITTED_EVENT_TYPE: Final = "little.run.submitted"
#: The field of ``little.run.submitted`` holding a sub-run's parent link (``parentRunId``,
#: ... see :mod:`little_dist.subruns.links`): the planner copies it into ``RunStarted``.
SUBMITTED_PARENT_FIELD: Final = "parent"
#: Engine event recording a ``little.plan`` that failed in a way that may pass (a provider's
#: rate limit, an unexpected error): ``{attempt, error}``, occurrence ``plan-failed:{n}``.
PLAN_FAILED_EVENT_TYPE: Final = "little.run.plan_failed"

# little.callback.*: the signed POST a run's submitter asked for when it ends
# (see little_dist.fleet.callbacks).

#: Recorded with the run's start: ``{url}``, occurrence ``callback``; where the scheduler
#: POSTs the run's end.
CALLBACK_EVENT_TYPE: Final = "little.run.callback"
#: After the end, one per delivery attempt: ``{attempt, webhookId, at, statusCode?,
#: error?, retryInMs?}``, occurrence ``callback-attempt:{n}``.
CALLBACK_ATTEMPTED: Final = "little.callback.attempted"
#: After the end, the outcome (one of the two, occurrence ``callback-outcome``): the receiver
#: answered 2xx (``{attempts, webhookId, statusCode}``) ...
CALLBACK_DELIVERED: Final = "little.callback.delivered"
#: ... or every attempt failed within the retry window (``{attempts, webhookId, error}``).
CALLBACK_ABANDONED: Final = "little.callback.abandoned"
#: What a callback writes onto a run after its end (among
#: :data:`~little_dist.events.AFTER_END_EVENT_TYPES`).
CALLBACK_EVENT_TYPES: Final = (CALLBACK_ATTEMPTED, CALLBACK_DELIVERED, CALLBACK_ABANDONED)

#: Engine event setting a run's dollar ceiling: ``{budgetUsd}``, occurrence ``budget``;
#: appended before the run's first step (see :mod:`little_dist.budgets`).
BUDGET_EVENT_TYPE: Final = "little.run.budget"
#: Engine event holding a model call's worst-case cost against the run's budget:
#: ``{callId, stepPath, reservedUsd}``, occurrence ``budget-hold:{callId}``, appended in one
#: batch with the call's ``harness.model.called``; the call's end event releases it. (Its own
#: small event, so that a fold need not read the calls' requests.)
BUDGET_RESERVED_EVENT_TYPE: Final = "little.budget.reserved"
#: In a child's log (a run that borrows from its budgeted parent): ``{usd, drawId}``, what
#: it borrowed, occurrence ``budget-draw:{drawId}`` (see :mod:`little_dist.budget_tree`).
BUDGET_DRAWN_EVENT_TYPE: Final = "little.budget.drawn"
#: In the parent's log, appended first: ``{childRunId, usd, drawId}``, occurrence
#: ``budget-lend:{drawId}``, only if the parent's log is still what was folded.
BUDGET_LENT_EVENT_TYPE: Final = "little.budget.lent"
#: In an outer-loop cycle's run, after its end: the worst case of the supervisor's call about
#: the cycle, held against the loop's budget before the call is sent: ``{outerLoopId,
#: cycleNumber, reservedUsd}``, occurrence ``outer-loop:supervisor-hold:{n}``; the cycle's
#: ``OuterLoopCycleCompleted`` (its ``supervisorCall``) replaces it (see
#: :mod:`little_dist.outer_loop.budget`). One of the events a run takes after its end.
SUPERVISOR_HOLD_EVENT_TYPE: Final = "little.budget.supervisor_reserved"

# little.subrun.* and little.step.suspended: sub-runs (payloads in little_dist.subruns).

#: In the parent's log: a tool call's child run, named before the child exists.
SUB_RUN_STARTED: Final = "little.subrun.started"
#: In the parent's log: how that child ended.
SUB_RUN_ENDED: Final = "little.subrun.ended"
#: An attempt that ended waiting for children (``waitingFor``), in place of its end.
STEP_SUSPENDED: Final = "little.step.suspended"

# little.approval.*: a person's decision on a tool call an ``ask`` rule holds (payloads in
# little_dist.approvals.records).

#: A tool call waits for a person (no approver function): ``approvalId``, the call, the
#: rule, ``deadlineAt``/``onTimeout`` when the rule bounds the wait; occurrence
#: ``approval:{approvalId}``. The attempt then suspends waiting for ``approvalId``.
APPROVAL_REQUESTED: Final = "little.approval.requested"
#: The decision: ``approvalId``, ``decision`` (``allow``/``deny``), ``decidedBy``, ``reason``,
#: ``via`` (``cli``, ``http``, ``api``, ``timeout``); occurrence
#: ``approval-decided:{approvalId}``, so the first decision recorded stands.
APPROVAL_DECIDED: Final = "little.approval.decided"

# little.harness.*, little.memory.*: what an attempt's harness records beside upstream's.

#: A resumed session's capabilities changed: what changed, recorded before the step fails.
CAPABILITY_DRIFT_EVENT: Final = "little.harness.capability_drift"
#: A model call / tool call answered from the memo of an earlier attempt.
MODEL_MEMOIZED: Final = "little.harness.model.memoized"
TOOL_MEMOIZED: Final = "little.harness.tool_call.memoized"
#: An attempt's memory write that lost to another writer of the same store.
MEMORY_CONFLICT_EVENT: Final = "little.memory.conflict"
