"""The sub-run engine in process: start (or find) a tool call's child run and wait for its end.

:func:`await_sub_run` is what a workflow tool's call does, in three recorded moves (the
events are in :mod:`little_dist.subruns.links`):

1. derive the child's run id from the call (:func:`~little_dist.subruns.links.call_key`)
   and append ``little.subrun.started`` to the parent's log, durably, before the child
   exists — so a crash from here on leaves the parent's log naming the child;
2. drive the child to its end through the sub-run host (:class:`SubRunDriver`; in process
   :class:`~little_dist.subruns.local_host.LocalSubRuns`, on the in-process engine) with
   that run id, which starts it, resumes it (a parent attempt that died while its child
   ran), or returns its recorded end without running anything (a child that already ended);
3. append ``little.subrun.ended`` with the child's status; the caller (the tool call)
   then records the result as the call's ``harness.tool_call.succeeded`` (or ``.failed``),
   which the memo replays to a resumed parent without touching the child again.

Permissions. The child runs under every ``deny`` of the calling attempt's effective rules
ahead of its own workflow's rules (upstream's ``inheritPermissions`` at its sub-run delegate,
see :func:`~little_dist.permissions.inherit_permissions`): a sub-run can never call a tool
its parent was denied, whatever its own rules allow. As upstream, the parent's approver
(``on_ask``) passes down with the denies (it answers the child's own ``ask`` rules when the
child has no approver of its own), while the parent's ``allow`` and ``ask`` rules do not.
The denies are also recorded in the child's ``RunStarted`` (``inherited``, with an
orchestration's pipeline memory store: :mod:`little_dist.runtime.inherited`), so that the
child's attempts apply them wherever they run: a child started on the fleet
(:func:`start_elsewhere`) runs under them on any worker. The approver stays in process.

Cancel. While the child runs, the parent's attempt being told to stop (its run cancelled or
done, its lease lost, its step timed out: the harness context's ``cancelled()``) appends
``little.run.cancel_requested`` (``reason``, ``parentRunId``) to the child's log, so the
child stops too and the call returns its ``cancelled`` end.

A child that ends failed is an outcome, not an exception here: the workflow tool turns it
into the tool call's error (see :mod:`little_dist.subruns.workflow_tool`). Anything else
that goes wrong (storage, another runner holding the child) raises, records no end, and a
retry of the parent's step takes the child up where it is.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from little_dist import occurrences
from little_dist.canonical import sha256_digest
from little_dist.subruns.links import (
    SUB_RUN_ENDED,
    SUB_RUN_STARTED,
    ParentLink,
    call_key,
    child_run_id,
)

if TYPE_CHECKING:
    from little_dist.authoring.definition import WorkflowDefinition
    from little_dist.compiler import WorkflowVersion
    from little_dist.harness.tool_calls import ToolCallInfo
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.permissions import ToolPermissions
    from little_dist.run_state import RunState

__all__ = [
    "ChildToStart",
    "SubRunDriver",
    "SubRunHost",
    "SubRunOutcome",
    "await_sub_run",
    "child_run_id_for",
    "ended_payload_of",
    "failed_outcome",
    "outcome_from_ended",
    "outcome_from_state",
    "read_outcome",
    "start_elsewhere",
]


@dataclass(frozen=True)
class ChildToStart:
    """A child to submit: its run id, workflow, input and parent link (``RunStarted``);
    ``version``: the WorkflowVersion it runs when one was planned before (an orchestrator's
    ``plan_workflow``), else ``None`` (the workflow's fixed plan, or its planner's)."""

    child_run_id: str
    workflow: WorkflowDefinition
    run_input: Any
    parent: Mapping[str, Any]
    version: WorkflowVersion | None = None


class SubRunHost(Protocol):
    """Where a fleet worker's workflow tools start their sub-runs (the fleet's is
    :class:`little_dist.fleet.sub_runs.FleetSubRuns`): ``start`` submits the child run
    ``child_run_id`` of ``workflow`` on ``run_input`` with the parent link ``parent`` in its
    ``RunStarted``, idempotently (the same id again is a no-op), and returns at once (a
    ``version`` given: that WorkflowVersion of the workflow, planned before);
    ``start_many`` submits several the same way, in as few round trips as it can."""

    def start_many(self, starts: list[ChildToStart]) -> None: ...

    def start(
        self,
        child_run_id: str,
        workflow: WorkflowDefinition,
        run_input: Any,
        parent: Mapping[str, Any],
        *,
        version: WorkflowVersion | None = None,
    ) -> None: ...


class SubRunDriver(Protocol):
    """Where a call that waits for its child has it run to its end (in process:
    :class:`~little_dist.subruns.local_host.LocalSubRuns`): ``run_to_end`` starts, resumes
    or reads back the child ``child_run_id`` (idempotent) and returns how it ended."""

    def run_to_end(
        self,
        child_run_id: str,
        workflow: WorkflowDefinition,
        run_input: Any,
        parent: Mapping[str, Any],
        *,
        version: WorkflowVersion | None = None,
    ) -> SubRunOutcome: ...


#: Upstream's mapping of a run's cause code to the workflow tool's (``mapWorkflowError``).
_TOOL_CAUSES: dict[str, str] = {
    "cancelled": "cancelled",
    "timeout": "timeout",
    "input_schema_error": "input_validation",
    "step_schema_error": "input_validation",
}


@dataclass(frozen=True)
class SubRunOutcome:
    """How a sub-run ended: ``output`` (JSON) when ``completed``; else upstream's tool
    cause code (``workflow_failed``, ``timeout``, ``cancelled``, ``input_validation``), the
    run's own ``run_cause_code``, the failure ``message`` and the failed step's path."""

    child_run_id: str
    status: Literal["completed", "failed", "cancelled"]
    output: Any = None
    cause_code: str | None = None
    run_cause_code: str | None = None
    message: str | None = None
    failed_step_path: str | None = None

    def ended_payload(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"childRunId": self.child_run_id, "status": self.status}
        if self.status != "completed":
            payload["causeCode"] = self.cause_code
            payload["runCauseCode"] = self.run_cause_code
            payload["message"] = self.message
            if self.failed_step_path is not None:
                payload["failedStepPath"] = self.failed_step_path
        return payload


def call_key_of(info: ToolCallInfo) -> str:
    """The key (:func:`~little_dist.subruns.links.call_key`) of the tool call ``info``."""
    return call_key(
        info.ctx.run_id,
        info.ctx.recorder.step_path,
        info.turn,
        info.call_index,
        info.tool_name,
        info.args_hash,
    )


def _link(info: ToolCallInfo) -> ParentLink:
    return ParentLink(
        parent_run_id=info.ctx.run_id,
        tool_call_id=info.call_id,
        step_path=info.ctx.recorder.step_path,
        call_key=call_key_of(info),
    )


def _parent_payload(
    info: ToolCallInfo,
    link: ParentLink,
    workflow: WorkflowDefinition,
    pipeline_store: str | None = None,
) -> dict[str, Any]:
    """What the child's ``RunStarted`` records of its parent: the link, what it inherits
    (:mod:`little_dist.runtime.inherited`), so that any process runs it so, and its budget:
    ``budgetFromParent`` when the parent's calls are budgeted (the child borrows from the
    parent's budget, :mod:`little_dist.harness.budget_tree`), ``budgetUsd`` its own ceiling
    (its workflow's ``budget_usd``)."""
    from little_dist.runtime.inherited import INHERITED_FIELD, inherited_from

    payload = link.to_payload()
    ctx = info.ctx
    inherited = inherited_from(ctx.permissions, ctx.memory_mounts, pipeline_store=pipeline_store)
    if inherited:
        payload[INHERITED_FIELD] = inherited.to_payload()
    if ctx.budgeted:
        payload["budgetFromParent"] = True
    if workflow.budget_usd is not None:
        payload["budgetUsd"] = workflow.budget_usd
    return payload


def child_run_id_for(info: ToolCallInfo) -> str:
    """The run id of the child the call ``info`` starts (the same in every attempt)."""
    return child_run_id(_link(info).call_key)


def await_sub_run(
    info: ToolCallInfo,
    workflow: WorkflowDefinition,
    run_input: Any,
    *,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_workers: int = 4,
    version: WorkflowVersion | None = None,
    pipeline_store: str | None = None,
    driver: SubRunDriver | None = None,
    identity: Mapping[str, Any] | None = None,
) -> SubRunOutcome:
    """Start (or find) the call's child run of ``workflow`` on ``run_input`` (already
    validated) and wait in this process for its end (see the module docstring): ``driver``
    runs it (default: :class:`~little_dist.subruns.local_host.LocalSubRuns` over the
    parent's world, with ``harness`` and ``max_workers``).

    ``version``: run this WorkflowVersion (planned before, e.g. by ``plan_workflow``)
    instead of resolving one for the input (planned, reused or the fixed ``plan=``).
    ``pipeline_store``: the orchestration's pipeline memory store, which the child sees
    read-only (:mod:`little_dist.runtime.inherited`). ``identity``: more fields for the
    call's ``little.subrun.started`` (a workflow tool's ``definitionIdentity`` and
    ``executionMode``)."""
    link = _link(info)
    child = child_run_id(link.call_key)
    recorder = info.ctx.recorder
    _record_started(info, link, child, workflow, run_input, identity=identity)
    child_workflow = _with_parent_denies(workflow, info.ctx.permissions)
    parent = _parent_payload(info, link, workflow, pipeline_store)
    if driver is None:
        from little_dist.subruns.local_host import LocalSubRuns

        driver = LocalSubRuns(recorder.world, harness=harness, max_workers=max_workers)
    with _CancelWatch(info, child):
        outcome = driver.run_to_end(child, child_workflow, run_input, parent, version=version)
    _record_ended(info, link, outcome)
    return outcome


def _record_started(
    info: ToolCallInfo,
    link: ParentLink,
    child: str,
    workflow: WorkflowDefinition,
    run_input: Any,
    *,
    durable: bool = True,
    identity: Mapping[str, Any] | None = None,
) -> None:
    """``little.subrun.started`` in the parent's log (step 1): durably, or with the
    attempt's next write (``durable=False``: before the child is submitted)."""
    recorder = info.ctx.recorder
    recorder.append(
        SUB_RUN_STARTED,
        {
            **(identity or {}),
            "parentRunId": link.parent_run_id,
            "childRunId": child,
            "workflowId": workflow.id,
            "toolName": info.tool_name,
            "toolCallId": link.tool_call_id,
            "callKey": link.call_key,
            "stepPath": link.step_path,
            "attempt": recorder.attempt,
            "inputHash": sha256_digest(run_input),
            "disposition": "await",
        },
        occurrences.sub_run_started(child),
        durable=durable,
    )


def _record_ended(info: ToolCallInfo, link: ParentLink, outcome: SubRunOutcome) -> None:
    """``little.subrun.ended`` in the parent's log, durably (step 3; whoever records it first
    wins: the scheduler noticing the child's end on the fleet, or this call); with the
    child's final spend when it borrowed from the parent's budget."""
    payload: dict[str, Any] = {
        "parentRunId": link.parent_run_id,
        "stepPath": link.step_path,
        **outcome.ended_payload(),
    }
    payload.update(child_spent(info, outcome.child_run_id))
    info.ctx.recorder.append(
        SUB_RUN_ENDED,
        payload,
        occurrences.sub_run_ended(outcome.child_run_id),
        durable=True,
    )


def start_elsewhere(
    info: ToolCallInfo,
    workflow: WorkflowDefinition,
    run_input: Any,
    host: SubRunHost,
    *,
    pipeline_store: str | None = None,
    version: WorkflowVersion | None = None,
    identity: Mapping[str, Any] | None = None,
) -> SubRunOutcome:
    """The call's child run on a fleet (``host`` starts it there): its outcome once it
    ended, else raise :class:`~little_dist.harness.errors.SubRunPending` after starting it
    (the attempt suspends; see the package docstring, "How the fleet suspends").

    The parent's memo (this step's earlier events) says how far the call got: the child's
    end recorded (``little.subrun.ended``, by the scheduler that noticed it, or an earlier
    attempt): its outcome, without reading the child; the child started by an earlier
    attempt: started again (idempotent: that attempt may have died between its record and
    its submit) and its log read for an end; neither: recorded, started, pending. The
    child's link carries what it inherits (``pipeline_store``: as :func:`await_sub_run`);
    ``version``: the child runs that WorkflowVersion (as :func:`await_sub_run`)."""
    from little_dist.harness.errors import SubRunPending

    link = _link(info)
    child = child_run_id(link.call_key)
    memo = info.ctx.memo
    world = info.ctx.recorder.world
    ended = memo.sub_run_end(child)
    if ended is not None:
        recorded = outcome_from_ended(world, child, ended)
        if recorded is not None:
            return recorded
    parent = _parent_payload(info, link, workflow, pipeline_store)
    if not memo.sub_run_started(child):
        # Recorded with the turn's other calls' (written before any child is submitted);
        # the attempt submits them all at once before it suspends.
        _record_started(info, link, child, workflow, run_input, durable=False, identity=identity)
        raise SubRunPending([child], [ChildToStart(child, workflow, run_input, parent, version)])
    if version is None:
        host.start(child, workflow, run_input, parent)
    else:
        host.start(child, workflow, run_input, parent, version=version)
    outcome = read_outcome(world, child)
    if outcome is None:
        raise SubRunPending([child])
    _record_ended(info, link, outcome)
    return outcome


def read_outcome(world: Any, child: str) -> SubRunOutcome | None:
    """The child's outcome from its log, or ``None`` while it has not ended."""
    from little_dist.run_state import RunStateBuilder
    from little_dist.runtime.outputs import hydrate_events

    events = world.list_events(child)
    if not events or events[-1].type not in ("RunCompleted", "RunFailed"):
        return None
    builder = RunStateBuilder(child)
    builder.apply_all(hydrate_events(world, events))
    state = builder.snapshot()
    outcome = outcome_from_state(child, state)
    if outcome.status == "completed" and not state.has_output and state.output_ref:
        output = world.get_artifact(state.output_ref, run_id=child).payload
        return SubRunOutcome(child, "completed", output=output)
    return outcome


def outcome_from_ended(world: Any, child: str, payload: Mapping[str, Any]) -> SubRunOutcome | None:
    """The outcome a ``little.subrun.ended`` payload records; ``None`` when it lacks the
    completed child's output (recorded in process, without it): read the child then."""
    status = payload.get("status")
    if status == "completed":
        if "output" in payload:
            return SubRunOutcome(child, "completed", output=payload["output"])
        ref = payload.get("outputRef")
        if isinstance(ref, str):
            output = world.get_artifact(ref, run_id=child).payload
            return SubRunOutcome(child, "completed", output=output)
        return read_outcome(world, child)
    if status not in ("failed", "cancelled"):
        return read_outcome(world, child)

    def text(name: str) -> str | None:
        value = payload.get(name)
        return value if isinstance(value, str) else None

    return SubRunOutcome(
        child,
        "cancelled" if status == "cancelled" else "failed",
        cause_code=text("causeCode") or "workflow_failed",
        run_cause_code=text("runCauseCode"),
        message=text("message") or "Workflow run failed.",
        failed_step_path=text("failedStepPath"),
    )


def ended_payload_of(child: str, state: RunState) -> dict[str, Any]:
    """What ``little.subrun.ended`` records of a child that ended in ``state`` (its output
    inline, or by reference when the child recorded it so), without the parent's fields."""
    outcome = outcome_from_state(child, state)
    payload = outcome.ended_payload()
    payload.update(spent_payload(state))
    if outcome.status == "completed":
        if state.has_output:
            payload["output"] = state.output
        elif state.output_ref is not None:
            payload["outputRef"] = state.output_ref
    return payload


def child_spent(info: ToolCallInfo, child: str) -> dict[str, Any]:
    """``spentUsd`` of the call's child as its log says now, when the calling run is
    budgeted (:func:`spent_payload`), else nothing."""
    ctx = info.ctx
    if not ctx.budgeted:
        return {}
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.run_state import materialize_run_state

    fallback = ctx.pricing_fallback or litellm_price_fallback
    events = ctx.recorder.world.list_events(child)
    return spent_payload(materialize_run_state(events, run_id=child, pricing_fallback=fallback))


def spent_payload(state: RunState) -> dict[str, Any]:
    """``spentUsd`` of a child that borrowed from its parent's budget, as it ended: what it
    and its own children count (a call it could not price at its worst case; see
    :mod:`little_dist.run_state._budget`), else nothing."""
    if state.budget_parent_run_id is None:
        return {}
    return {"spentUsd": state.committed_usd}


def _with_parent_denies(
    workflow: WorkflowDefinition, parent: ToolPermissions | None
) -> WorkflowDefinition:
    """``workflow`` with the parent's denies ahead of its own rules and, when it has none of
    its own, the parent's approver (see the module docstring)."""
    if parent is None:
        return workflow
    from little_dist.permissions import ToolPermissions, inherit_permissions

    own = workflow.permissions
    merged = ToolPermissions(
        inherit_permissions(parent.ruleset, own.ruleset), own.on_ask or parent.on_ask
    )
    if merged == own:
        return workflow
    import dataclasses

    return dataclasses.replace(workflow, permissions=merged)


class _CancelWatch:
    """Asks the child to stop once the calling attempt is told to (see the module docstring)."""

    POLL: Final = 0.1

    def __init__(self, info: ToolCallInfo, child: str) -> None:
        self._info, self._child = info, child
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name=f"little-subrun-cancel-{child}", daemon=True
        )

    def __enter__(self) -> _CancelWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        from little_dist.errors import LittleError
        from little_dist.event_types.engine import CANCEL_EVENT_TYPE
        from little_dist.events import EventInput

        ctx = self._info.ctx
        while not self._done.wait(self.POLL):
            if not ctx.cancelled():
                continue
            request = EventInput(
                type=CANCEL_EVENT_TYPE,
                occurrence_id=occurrences.CANCEL,
                payload={"reason": "the parent's step was stopped", "parentRunId": ctx.run_id},
            )
            try:
                ctx.recorder.world.append(self._child, request)
            except LittleError:
                continue  # (tried again on the next poll while the child runs)
            return


def failed_outcome(
    child: str, run_cause: str, message: str | None, step_path: str | None
) -> SubRunOutcome:
    cause = _TOOL_CAUSES.get(run_cause, "workflow_failed")
    return SubRunOutcome(
        child,
        "cancelled" if cause == "cancelled" else "failed",
        cause_code=cause,
        run_cause_code=run_cause,
        message=message or "Workflow run failed.",
        failed_step_path=step_path,
    )


def outcome_from_state(child: str, state: RunState) -> SubRunOutcome:
    """A child's outcome from its final folded state."""
    if state.status == "completed":
        return SubRunOutcome(child, "completed", output=state.output)
    error = state.error if isinstance(state.error, Mapping) else {}
    cause = error.get("causeCode")
    message = error.get("message")
    step_path = error.get("stepPath")
    if not isinstance(step_path, str):
        failed = [path for path, step in state.steps.items() if step.status == "failed"]
        step_path = failed[-1] if failed else None
    return failed_outcome(
        child,
        cause if isinstance(cause, str) and cause else "step_failed",
        f"Run {child!r} failed: {message}" if isinstance(message, str) and message else None,
        step_path,
    )
