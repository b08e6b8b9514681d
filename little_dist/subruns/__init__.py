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
* :mod:`little_dist.runtime.inherited` (pure; kept with the runtime, which applies it):
  what a child inherits from its parent — the parent's denies, an orchestration's pipeline
  memory store read-only — recorded in its ``RunStarted`` and applied by whoever runs its
  attempts;
* :mod:`.rollup`: the parent's children and their tokens and dollars, for ``little report``;
* :mod:`.orchestrator`: :func:`run_orchestration` and upstream's ``plan_workflow`` /
  ``run_workflow`` / ``start_workflow`` tools, every run a sub-run.

Exactly once. The child's id is a function of (parent run, step path, model turn, call
index, tool name, arguments digest). A parent whose step is retried (its worker died while
the child ran) replays its model turns from the memo, makes the same call, derives the same
id and finds the child: driving a child with an existing run id resumes it, or returns its
recorded end, never starts a second one. Once the call's result is recorded
(``harness.tool_call.succeeded``), a resumed parent takes it from the memo and does not
look at the child at all.

Waiting is written down, not held. Everything the parent knows about a child is in its own
log: ``little.subrun.started`` (before the child exists) says "this call waits for that
run", ``little.subrun.ended`` then the call's result say how it ended. In process (the
local runner) the calling thread drives the child to its end in between, as upstream's
in-process ``runWorkflow`` does. Nothing in the records depends on that thread.

How the fleet suspends and resumes on this design (a fleet worker gives its attempts a
:class:`~little_dist.subruns.engine.SubRunHost`, :mod:`little_dist.fleet.sub_runs`; the
call is :func:`~little_dist.subruns.engine.start_elsewhere`; tests in
``tests/test_subruns_fleet.py``, ``tests/test_subrun_notices.py`` and
``tests/test_subrun_links_fold.py``):

1. *Suspend.* On a fleet worker the tool call records ``little.subrun.started`` and raises a
   :class:`~little_dist.harness.errors.SubRunPending` signal instead of waiting; the model
   loop lets the turn's other calls do the same (parallel calls of one model turn). Their
   records are written, then their children submitted (``submit_runs`` with the derived
   run ids and the parent links, 25 at a time as the turn goes on, the rest as the attempt
   ends: idempotent, ``RunStarted`` is put-if-absent; without the S3 look a given run id
   otherwise costs, since a child whose start the attempt's memo did not hold was never
   submitted before and cannot be archived: see
   :meth:`~little_dist.fleet.sub_runs.FleetSubRuns.start_many`), and the attempt commits,
   fenced, an engine event ``little.step.suspended`` (``stepPath``, ``attempt``,
   ``waitingFor: [childRunId...]``, occurrence ``end:{path}:{n}``) in place of
   ``StepCompleted`` / ``StepFailed``, releasing its lease: the worker slot is free, no
   thread waits.
2. *Notice.* A child's ``RunCompleted`` / ``RunFailed`` append signals the scheduler like
   any run end; the scheduler reads the child's ``parentRunId`` from its ``RunStarted``
   (the fold keeps it) and records ``little.subrun.ended`` (occurrence
   ``subrun-end:{child}``: whoever records it first wins, a second scheduler records
   nothing; with the parent's ``stepPath`` and the child's output or its ref) in the
   parent's log. The ends of the children in one batch of signals go to their parent in
   one append (:class:`~little_dist.fleet.sub_runs.ParentNotices`), which signals the
   parent once: a parent of 1,000 children is looked at once per batch, not per child,
   and its fold of the ends is linear (:mod:`little_dist.run_state._subruns`). The
   children's signals are acknowledged, and the children finished, only once their
   parent's log holds their ends.
3. *Resume.* The pure fold treats a suspended step whose every ``waitingFor`` child has a
   ``little.subrun.ended`` as ready, and ``decide`` schedules its next attempt as for a
   retry, without counting it against ``maxAttempts``; any worker may take it. The new
   attempt replays its model turns from the memo, reaches the same tool call, derives the
   same child id, finds the child ended (``little.subrun.ended`` in its step's events says
   so without a read of the child) and returns the result at once, which is recorded as
   the call's result.
4. *Crashes.* A worker killed before the suspension commits leaves a running attempt the
   sweeper fails; its retry finds ``little.subrun.started``, submits the child again
   (idempotent: a no-op when it exists, its start when the killed attempt died before its
   submit; with the S3 look) and reads its log for an end. A scheduler killed between a
   child's end and ``little.subrun.ended`` (or between the appends of one batch's
   notices) leaves the child's end-signal pending in its consumer group; the next
   scheduler claims it and records the end (a notice already recorded is not recorded
   again). Nothing is lost because every fact is an idempotent append, and no fact lives
   only in a thread.
5. *Cancel.* When a parent ends (cancelled, failed or completed), the scheduler appends
   ``little.run.cancel_requested`` to every child named by a ``little.subrun.started``
   without an end (the children's own cancellation does the rest).

What a child inherits (its parent's permission denies, an orchestration's pipeline memory
store read-only) is recorded in its ``RunStarted`` (:mod:`little_dist.runtime.inherited`), so
it holds on whichever worker runs the child (``tests/test_subruns_inherit_fleet.py``).

A child whose workflow has no fixed ``plan=`` is submitted to be planned, as a top-level
run by workflow id is (``little.run.submitted``, its parent link in it): the scheduler sends
``little.plan``, a planner worker plans it (reused or reviewed as any planned run, see
:mod:`little_dist.fleet.planning`) and records its ``RunStarted`` with the link, then it runs;
a planning that fails for good records ``RunFailed`` with the link, which reaches the
parent's call as the child's error. The planner's model calls are in the child's log: its
report counts them, and the parent's rolls them up.

The orchestrator's ``run_workflow`` / ``start_workflow`` suspend the same way (a child of a
planned version: :class:`~little_dist.subruns.engine.ChildToStart` carries it), and its
``maxConcurrentSubRuns`` gate holds calls back without a thread: the attempt suspends with
``resumeOn: "any"`` and is due again at the first of its children's end
(:mod:`.orchestrator`; ``tests/test_orchestrate_fleet.py``).

A planned child inherits as any child does: what it inherits rides in the parent link its
submission carries, and the planner's ``RunStarted`` records the whole link
(``tests/test_subruns_planned_fleet.py``).

On the fleet, ``plan_workflow`` (and ``start_workflow`` of a workflow without a fixed plan)
plans in the worker's thread, on its own planning run, as a model call of the step would:
the slot is held while the planner answers, not while sub-runs execute.
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
    orchestrator_workflow,
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
    "orchestrator_workflow",
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
