"""Sub-runs: runs started by another run's step, and workflows as tools.

A sub-run (child) is a run like any other — its own WorkflowVersion (planned or reused by
the planner, or its fixed ``plan=``), its own event log, its own report — started by a tool
call of a step of another run (the parent). The pieces:

* :mod:`.links` (pure): the events that link the two logs — ``little.subrun.started`` /
  ``little.subrun.ended`` in the parent's, ``parentRunId`` (upstream's field) and
  ``parentToolCallId`` in the child's ``RunStarted`` — and the child's run id, derived from
  the call's memo key so that every attempt of the parent's step that makes the same call
  names the same child;
* :mod:`.engine`: :func:`await_sub_run`, start-or-find the child, wait for its end,
  record it;
* :mod:`.workflow_tool`: :func:`as_tool` (upstream's ``asHarnessWorkflow``), a defined
  workflow as a typed tool whose every call is a sub-run;
* :mod:`.rollup`: the parent's children and their tokens and dollars, for ``little report``;
* :mod:`.orchestrator`: :func:`run_orchestration` and upstream's ``plan_workflow`` /
  ``run_workflow`` / ``start_workflow`` tools, every run a sub-run.

Exactly once. The child's id is a function of (parent run, step path, model turn, call
index, tool name, arguments digest). A parent whose step is retried (its worker died while
the child ran) replays its model turns from the memo, makes the same call, derives the same
id and finds the child: ``run_workflow`` with an existing run id resumes it, or returns its
recorded end, never starts a second one. Once the call's result is recorded
(``harness.tool_call.succeeded``), a resumed parent takes it from the memo and does not
look at the child at all.

Waiting is written down, not held. Everything the parent knows about a child is in its own
log: ``little.subrun.started`` (before the child exists) says "this call waits for that
run", ``little.subrun.ended`` then the call's result say how it ended. In process (the
local runner, this slice) the calling thread drives the child to its end in between, as
upstream's in-process ``runWorkflow`` does. Nothing in the records depends on that thread.

How the fleet will suspend and resume on this design (not built yet):

1. *Suspend.* On a fleet worker the tool call does step 1 of :func:`await_sub_run`
   (``little.subrun.started``, durable), submits the child (``Client.submit`` with the
   derived run id and the parent link: idempotent, ``RunStarted`` is put-if-absent), then
   raises a ``SubRunPending`` signal instead of waiting. The attempt catches it and commits,
   fenced, an engine event ``little.step.suspended`` (``stepPath``, ``attempt``,
   ``waitingFor: [childRunId...]``) in place of ``StepCompleted`` / ``StepFailed``, and
   releases its lease: the worker slot is free, no thread waits. Parallel calls of one
   model turn start all their children before the attempt suspends once for all of them.
2. *Notice.* A child's ``RunCompleted`` / ``RunFailed`` append signals the scheduler like
   any run end; the scheduler reads the child's ``parentRunId`` from its ``RunStarted``
   and appends ``little.subrun.ended`` (occurrence ``subrun-end:{child}``: whoever records
   it first wins, a second scheduler records nothing) to the parent's log, which signals
   the parent.
3. *Resume.* The pure fold treats a suspended step whose every ``waitingFor`` child has a
   ``little.subrun.ended`` as ready, and ``decide`` schedules its next attempt as for a
   retry, without counting it against ``maxAttempts``; any worker may take it. The new
   attempt replays its model turns from the memo, reaches the same tool call, derives the
   same child id, finds the child ended (its log; ``little.subrun.ended`` says so without
   a read) and returns the result at once, which is recorded as the call's result.
4. *Crashes.* A worker killed before the suspension commits leaves a running attempt the
   sweeper fails; its retry finds ``little.subrun.started`` and the child (same id) and
   does not start it twice. A scheduler killed between a child's end and
   ``little.subrun.ended`` leaves the child's end-signal pending in its consumer group; the
   next scheduler claims it and records the end. Nothing is lost because every fact is an
   idempotent append, and no fact lives only in a thread.
5. *Cancel.* Cancelling a parent appends ``CancelRequested`` to every child named by a
   ``little.subrun.started`` without an end (the children's own cancellation does the rest).
"""

from __future__ import annotations

from little_dist.subruns.engine import SubRunOutcome, await_sub_run, child_run_id_for
from little_dist.subruns.links import (
    SUB_RUN_ENDED,
    SUB_RUN_STARTED,
    ParentLink,
    SubRunStart,
    call_key,
    child_run_id,
    parent_link_of,
    sub_run_ends,
    sub_run_starts,
)
from little_dist.subruns.orchestrator import (
    DEFAULT_MAX_CONCURRENT_SUB_RUNS,
    OrchestrationError,
    orchestrator_tools,
    output_summary,
    run_orchestration,
    workflow_snapshots,
)
from little_dist.subruns.rollup import (
    SubRunRollup,
    SubRunRow,
    render_sub_runs,
    sub_run_rollup,
    sub_runs_to_json,
)
from little_dist.subruns.workflow_tool import (
    MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS,
    SubRunFailedError,
    WorkflowTool,
    as_tool,
    summarize_workflow_output,
)

__all__ = [
    "DEFAULT_MAX_CONCURRENT_SUB_RUNS",
    "MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS",
    "SUB_RUN_ENDED",
    "SUB_RUN_STARTED",
    "OrchestrationError",
    "ParentLink",
    "SubRunFailedError",
    "SubRunOutcome",
    "SubRunRollup",
    "SubRunRow",
    "SubRunStart",
    "WorkflowTool",
    "as_tool",
    "await_sub_run",
    "call_key",
    "child_run_id",
    "child_run_id_for",
    "orchestrator_tools",
    "output_summary",
    "parent_link_of",
    "render_sub_runs",
    "run_orchestration",
    "sub_run_ends",
    "sub_run_rollup",
    "sub_run_starts",
    "sub_runs_to_json",
    "summarize_workflow_output",
    "workflow_snapshots",
]
