"""``execute_step_attempt``: run one attempt of one step, exactly once as far as the log goes.

The sequence (every write fenced with the step's lease, every event with an occurrence id):

1. take the step lease ``{run}:step:{path}`` under a holder unique to this call; held by
   someone else -> :attr:`AttemptOutcome.busy` (another worker runs it right now);
2. fold the run (or use the caller's state); the attempt already ended, a later attempt
   exists, or the run is over -> :attr:`AttemptOutcome.already_done`;
3. record ``StepAttemptStarted`` (``start:{path}:{n}``) as the first event of a *deferred*
   :class:`~little_dist.harness.recorder.EventRecorder` (fenced); start the heartbeat, which
   renews the lease every ``ttl / 3`` and raises the harness's cancel flag if the lease is
   lost;
4. resolve the step input, run the harness for the step's role with that recorder and a
   :class:`~little_dist.harness.memo.Memo` of the step path's earlier events (so a retry
   reuses finished tool calls and model turns instead of repeating them). The recorder
   appends what is pending in one batch before each side effect (a model or tool call:
   write-ahead, see the recorder's docstring), so ``StepAttemptStarted`` and the call are
   durable before the call runs, and appends a call's result as soon as it has it;
5. validate the output against the step's output contract, then commit the recorder's
   pending events, ``[ArtifactCreated]``, ``StepOutputValidated`` and ``StepCompleted`` — or
   ``StepFailed`` — in one fenced batch whose last event has occurrence ``end:{path}:{n}``:
   an attempt ends once;
6. release the lease (the commit's append does it in the same call).

A plain ``tool.call`` step thus costs four world writes: the lease, the write-ahead batch
before the tool, the tool's result, and the commit batch with the release.

A :class:`~little_dist.errors.LeaseLostError` anywhere after step 1 means a newer holder owns
the step (this worker stalled past its lease and was swept or taken over): the attempt
returns :attr:`AttemptOutcome.superseded` and writes nothing more.

A :class:`~little_dist.errors.StorageUnavailableError` (S3 or Redis unreachable, after the
client's own retries) is not the step's failure either: the attempt records no end and
raises it, its lease is released, and the sweeper, finding the attempt running with no
lease, fails it with ``lease_expired``: it is retried free of the step's budget (up to
``max_crash_retries``), and the retry replays what was recorded. (Had the attempt recorded
``StepFailed``, a step with one attempt, the default, would have failed its run.)
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.compiler import WorkflowVersion
from little_dist.errors import LeaseLostError, LittleError, StorageUnavailableError
from little_dist.events import RUN_END_EVENT_TYPES, Event, EventInput
from little_dist.run_state import RunState, RunStateBuilder
from little_dist.runtime.capabilities import Capabilities, CapabilityError, RuntimeConfigError
from little_dist.runtime.continuation import PLAIN, Continuation
from little_dist.runtime.dead_attempts import WORKER_STEP_KINDS, step_lease_key
from little_dist.runtime.failures import (
    CAUSE_RUNTIME_CONFIG,
    CAUSE_STEP_SCHEMA,
    CAUSE_TIMEOUT,
    error_envelope,
)
from little_dist.runtime.heartbeat import KeptLease, LeaseKeeper
from little_dist.runtime.outputs import (
    INLINE_OUTPUT_LIMIT,
    completion_events,
    hydrate_events,
)
from little_dist.scheduling import RunContext, StepDispatch
from little_dist.scheduling.context import StepLocation, locate_step
from little_dist.scheduling.step_graph import (
    StepPlan,
    output_schema_hash,
    plan_for,
    step_output_error,
)
from little_dist.world.base import ArtifactInput, Lease, World, unique_holder

if TYPE_CHECKING:
    from little_dist.harness.bash_tool import BashTool
    from little_dist.harness.recorder import EventRecorder, RecordedSink

__all__ = ["DEFAULT_STEP_TIMEOUT", "AttemptOutcome", "execute_step_attempt", "run_input_of"]

DEFAULT_LEASE_TTL = 30.0
#: Seconds a step attempt may run in process unless its workflow says otherwise (the fleet's
#: default is the LITTLE_STEP_TIMEOUT setting, the same 900 s unless set).
DEFAULT_STEP_TIMEOUT = 900.0

_log = logging.getLogger("little.runtime")


class AttemptOutcome(enum.Enum):
    """How :func:`execute_step_attempt` ended (what the log now says about the attempt)."""

    completed = "completed"  # this call committed StepCompleted
    failed = "failed"  # this call committed StepFailed
    busy = "busy"  # another holder has the step lease: nothing was done
    already_done = "already_done"  # the attempt had ended (or the run is over): nothing done
    superseded = "superseded"  # the lease was taken over: nothing more was written


def run_input_of(events: Sequence[Event]) -> Any:
    """``RunStarted.payload.input`` of a run's events (``None`` before RunStarted)."""
    for event in events:
        if event.type == "RunStarted":
            return event.payload.get("input")
    return None


def execute_step_attempt(
    world: World,
    dispatch: StepDispatch,
    *,
    version: WorkflowVersion,
    capabilities: Capabilities,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    state: RunState | None = None,
    context: RunContext | None = None,
    max_branches_cap: int | None = None,
    prior_events: Sequence[Event] | None = None,
    inline_limit: int = INLINE_OUTPUT_LIMIT,
    holder: str | None = None,
    cancel: threading.Event | None = None,
    keeper: LeaseKeeper | None = None,
    on_recorded: RecordedSink | None = None,
    timeout: float | None = None,
    continuation: Continuation = PLAIN,
) -> AttemptOutcome:
    """Execute ``dispatch`` (one attempt of one step); see the module docstring.

    ``state``, ``context`` (the run's :class:`~little_dist.scheduling.RunContext`, as given
    to ``decide``) and ``prior_events`` (the step path's earlier events, for the memo) let a
    caller that already folded the run skip re-reading the log (the in-process runner and a
    fleet worker both pass all three, from the run they keep); without them the log is read
    once (and ``max_branches_cap``, which must equal the scheduler's, builds the context).
    They must describe the run at least up to the dispatch. ``cancel``, when set, tells the
    harness to stop (the runner sets it when the run ends or aborts); losing the lease does
    the same. ``keeper`` renews
    the lease from a shared thread (else a heartbeat thread is started for this attempt).
    ``on_recorded`` is called with every batch of events the attempt appended, in order
    (the runner folds them instead of reading them back).

    Given ``state`` and the rest, the events appended after ``state`` are read once the
    lease is held (another worker may have run the attempt between the caller's read and
    our lease), unless the ``continuation`` says nobody else can have (``read_log=False``).
    ``continuation`` also brings a step lease the caller took, events to record with the
    attempt's first append, a lease to take with the commit, and whether the commit wakes
    the scheduler (see :class:`~little_dist.runtime.continuation.Continuation`).

    ``timeout``: seconds the attempt may run once it holds the lease (``None``: no limit).
    Past it, the harness is told to stop (``cancelled()``; model calls were given what was
    left as their own timeout) and the attempt commits ``StepFailed`` with causeCode
    ``timeout``; a call that does not return is left behind: the lease keeper, which stops
    renewing the lease at the deadline, commits that failure itself ``DEADLINE_GRACE``
    seconds later (see :mod:`.heartbeat`), and whatever the call does after is refused by the
    fence. The run moves on in time either way; a thread stuck in such a call stays stuck
    until the call returns.
    """
    from little_dist.harness.recorder import EventRecorder

    run_id = dispatch.run_id
    path = dispatch.step_path
    attempt = dispatch.attempt
    lease = continuation.lease or world.acquire_lease(
        step_lease_key(run_id, path), holder or unique_holder("attempt"), lease_ttl
    )
    if lease is None:
        return AttemptOutcome.busy
    heartbeat: KeptLease | None = None
    own_keeper: LeaseKeeper | None = None  # an attempt run without the caller's keeper
    released = False
    try:
        read_log = state is None or context is None or prior_events is None
        if read_log:
            events = world.list_events(run_id)
            if state is None:
                builder = RunStateBuilder(run_id)
                builder.apply_all(hydrate_events(world, events))
                state = builder.snapshot()
            if context is None:
                context = RunContext(
                    version=version,
                    run_input=run_input_of(events),
                    run_id=run_id,
                    max_branches_cap=max_branches_cap,
                )
            if prior_events is None:
                prior_events = events
        assert state is not None and context is not None and prior_events is not None
        # Over as the caller saw it: nothing to read (the step's events, which may still be
        # undecoded in the caller's tracker, are not looked at).
        if _attempt_over(state, path, attempt):
            return AttemptOutcome.already_done
        if not read_log and continuation.read_log:
            # The caller folded the log before we held the lease: another holder may have
            # ended this attempt, or recorded results our memo must see, in between.
            newer = world.list_events(run_id, after=state.event_count)
            if _settled_by(newer, path, attempt):
                return AttemptOutcome.already_done
            prior_events = [*prior_events, *newer]
        plan = plan_for(version)
        where = locate_step(plan, path)
        step = where.step.raw
        recorder = EventRecorder(
            world,
            run_id,
            path,
            attempt,
            lease.fence,
            deferred=True,
            sink=on_recorded,
            # The preamble (the caller's decision) is the caller's to act on, like its commit.
            signal=continuation.signal,
        )
        for event in continuation.preamble:
            recorder.append(event.type, dict(event.payload), event.occurrence_id or "")
        recorder.append(
            "StepAttemptStarted",
            {
                "stepPath": path,
                "stepId": step.get("id"),
                "attempt": attempt,
                "attemptId": f"attempt_{attempt}",
            },
            occurrences.attempt_started(path, attempt),
        )
        lost = threading.Event()
        if keeper is None:
            own_keeper = keeper = LeaseKeeper(world)
        deadline: float | None = None
        on_deadline: Callable[[Lease], None] | None = None
        if timeout is not None:
            deadline = time.monotonic() + timeout
            on_deadline = _watchdog_ending(recorder, path, step, attempt, timeout)
        heartbeat = keeper.keep(
            lease, lease_ttl, on_lost=lost.set, deadline=deadline, on_deadline=on_deadline
        )
        timed_out = heartbeat.timed_out.is_set
        staged: list[ArtifactInput] = []  # written with the commit (one round trip)
        ending = _run_and_judge(
            world,
            dispatch,
            where=where,
            version=version,
            capabilities=capabilities,
            state=state,
            context=context,
            prior_events=prior_events,
            recorder=recorder,
            cancelled=_either(lost, cancel, heartbeat.timed_out),
            inline_limit=inline_limit,
            stage=staged,
            deadline=deadline,
            timed_out=timed_out,
            timeout=timeout,
        )
        heartbeat.stop()
        fence = heartbeat.lease.fence
        signal_commit = continuation.signal
        next_lease = continuation.next_lease
        pending = recorder.take_pending()
        commit = [*pending, *ending]
        try:
            # The commit releases the step lease in the same call (one round trip on Redis),
            # and may take the next step's.
            if staged and next_lease is None:
                # The output artifact the completion names is written in the same round
                # trip, ahead of the events.
                recorded = world.append_batch_with_artifacts(
                    run_id, commit, staged, fence=fence, signal=signal_commit, release=True
                )
            elif next_lease is not None and ending and ending[-1].type == "StepCompleted":
                for artifact in staged:
                    world.put_artifact(artifact)
                recorded, taken = world.append_batch_then_acquire(
                    run_id, commit, next_lease, fence=fence, signal=signal_commit, release=True
                )
                if taken is not None:
                    if continuation.on_next_lease is None:
                        world.release_lease(taken)
                    else:
                        continuation.on_next_lease(taken)
            else:
                recorded = world.append_batch(
                    run_id, commit, fence=fence, signal=signal_commit, release=True
                )
        except LeaseLostError:
            released = True
            raise
        except StorageUnavailableError:
            if staged and pending:
                # S3 refused the output artifact: keep what the attempt recorded (a tool's
                # result above all), so that its retry replays it instead of calling again.
                with contextlib.suppress(LittleError):
                    world.append_batch(run_id, pending, fence=fence, signal=False)
            raise
        released = True
        if on_recorded is not None:
            on_recorded(recorded)
        return (
            AttemptOutcome.completed
            if recorded[-1].type == "StepCompleted"
            else (AttemptOutcome.failed)
        )
    except LeaseLostError:
        return AttemptOutcome.superseded
    finally:
        if heartbeat is not None:
            heartbeat.stop()
            lease = heartbeat.lease
        if not released:
            world.release_lease(lease)
        if own_keeper is not None:
            own_keeper.close()


def _settled_by(events: Sequence[Event], path: str, attempt: int) -> bool:
    """Whether ``events`` end attempt ``attempt`` of ``path``, start a later one, or end the
    run."""
    end = occurrences.attempt_ended(path, attempt)
    for event in events:
        if event.occurrence_id == end or event.type in RUN_END_EVENT_TYPES:
            return True
        payload = event.payload
        if (
            event.type == "StepAttemptStarted"
            and payload.get("stepPath") == path
            and isinstance(payload.get("attempt"), int)
            and payload["attempt"] > attempt
        ):
            return True
    return False


def _either(
    first: threading.Event, second: threading.Event | None, third: threading.Event
) -> Callable[[], bool]:
    if second is None:
        return lambda: first.is_set() or third.is_set()
    return lambda: first.is_set() or second.is_set() or third.is_set()


def _timeout_envelope(path: str, timeout: float) -> dict[str, Any]:
    return error_envelope(
        name="StepTimeoutError",
        message=f"step {path!r} ran past its timeout of {timeout:g}s",
        cause_code=CAUSE_TIMEOUT,
    )


def _watchdog_ending(
    recorder: EventRecorder, path: str, step: Mapping[str, Any], attempt: int, timeout: float
) -> Callable[[Lease], None]:
    """What the lease keeper calls when the attempt is still running ``DEADLINE_GRACE``
    seconds past its deadline: commit its ``StepFailed`` (cause ``timeout``) under the lease
    it no longer renews, releasing it, and waking the scheduler (this attempt's thread, stuck
    in a call, will not advance the run)."""

    def end(lease: Lease) -> None:
        failure = _failure(path, step, attempt, _timeout_envelope(path, timeout))
        try:
            recorder.end_now([failure], lease.fence)
        except LeaseLostError:
            return  # the attempt committed (or was taken over) meanwhile
        _log.warning(
            "step %s of run %s (attempt %d) passed its %gs timeout inside a call that has "
            "not returned; failed it with cause 'timeout' (the thread stays busy until the "
            "call returns, and whatever it writes then is refused)",
            path,
            recorder.run_id,
            attempt,
            timeout,
        )

    return end


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _attempt_over(state: RunState, path: str, attempt: int) -> bool:
    if state.status in ("completed", "failed"):
        return True
    step_state = state.steps.get(path)
    if step_state is None:
        return False
    attempts = step_state.attempts
    if len(attempts) > attempt:
        return True  # a later attempt started: this one is history
    # Attempt n recorded and finished -> done. Recorded and still running -> its worker died
    # (we hold the lease now): continue it under the same attempt number; the memo replays
    # what it finished.
    return len(attempts) == attempt and attempts[-1].status != "running"


def _failure(path: str, step: Mapping[str, Any], attempt: int, error: dict[str, Any]) -> EventInput:
    return EventInput(
        type="StepFailed",
        occurrence_id=occurrences.attempt_ended(path, attempt),
        payload={
            "stepPath": path,
            "stepId": step.get("id"),
            "attempt": attempt,
            "attemptId": f"attempt_{attempt}",
            "error": error,
        },
    )


def _run_and_judge(
    world: World,
    dispatch: StepDispatch,
    *,
    where: StepLocation,
    version: WorkflowVersion,
    capabilities: Capabilities,
    state: RunState,
    context: RunContext,
    prior_events: Sequence[Event],
    recorder: EventRecorder,
    cancelled: Callable[[], bool],
    inline_limit: int,
    stage: list[ArtifactInput],
    deadline: float | None,
    timed_out: Callable[[], bool],
    timeout: float | None,
) -> list[EventInput]:
    """Run the harness and return the events that end the attempt (not yet appended); the
    small output artifact they name is added to ``stage`` (written with them). An attempt
    past its ``deadline`` fails with cause ``timeout`` whatever the harness made of it."""
    path, attempt = dispatch.step_path, dispatch.attempt
    step = where.step.raw
    if step.get("uses") not in WORKER_STEP_KINDS:
        error = error_envelope(
            name="RuntimeConfigError",
            message=f"step {path!r} uses {step.get('uses')!r}, which no worker executes",
            cause_code=CAUSE_RUNTIME_CONFIG,
        )
        return [_failure(path, step, attempt, error)]
    try:
        step_input = _step_input(context, state, path, step)
        output, artifact_refs = _run_harness(
            world,
            dispatch,
            step=step,
            visit_index=where.visit,
            step_input=step_input,
            version=version,
            capabilities=capabilities,
            state=state,
            prior_events=prior_events,
            recorder=recorder,
            cancelled=cancelled,
            deadline=deadline,
        )
    except (LeaseLostError, StorageUnavailableError):
        # Not the step's failure: the attempt stops without an end (see the module docs).
        raise
    except Exception as exc:  # the attempt fails; the runner and the log carry on
        from little_dist.harness.errors import reraise_guard_error

        reraise_guard_error(exc)
        if timeout is not None and (timed_out() or _past(deadline)):
            return [_failure(path, step, attempt, _timeout_envelope(path, timeout))]
        return [_failure(path, step, attempt, _envelope(exc))]
    if timeout is not None and (timed_out() or _past(deadline)):
        # It returned, but too late: its result is not trusted more than a hung one's.
        return [_failure(path, step, attempt, _timeout_envelope(path, timeout))]
    problem = step_output_error(plan_for(version), where.step, output)
    if problem is not None:
        error = error_envelope(
            name="StepOutputValidationError", message=problem, cause_code=CAUSE_STEP_SCHEMA
        )
        return [_failure(path, step, attempt, error)]
    return completion_events(
        world,
        run_id=dispatch.run_id,
        step=step,
        step_path=path,
        attempt=attempt,
        output=output,
        artifact_refs=artifact_refs,
        schema_hash=_schema_hash(where.step),
        inline_limit=inline_limit,
        always_artifact=where.parallel is not None,
        stage=stage,
    )


def _step_input(context: RunContext, state: RunState, path: str, step: Mapping[str, Any]) -> Any:
    """What the harness gets as ``step_input``: the rendered prompt of an ``ai.generate`` step
    (the model's user message), else upstream's ``resolveStepInput``."""
    from little_dist.expressions import UNDEFINED
    from little_dist.step_context import resolve_step_config, resolve_step_input

    config = step.get("with")
    if step.get("uses") == "ai.generate" and isinstance(config, Mapping) and "prompt" in config:
        value = resolve_step_config(context, state, path).get("prompt")
    else:
        value = resolve_step_input(context, state, path)
    return None if value is UNDEFINED else value


def _envelope(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, RuntimeConfigError):
        return error_envelope(exc, cause_code=CAUSE_RUNTIME_CONFIG, retriable=False)
    from little_dist.harness.errors import envelope_for

    envelope = envelope_for(exc)
    # Re-normalized so engine rules (terminal causes never retry, bounded messages) hold
    # whatever a custom harness raised.
    return error_envelope(
        exc,
        name=str(envelope.get("name") or type(exc).__name__),
        message=str(envelope.get("message") or ""),
        cause_code=str(envelope.get("causeCode") or "step_failed"),
        retriable=bool(envelope.get("retriable", True)),
    )


def _run_harness(
    world: World,
    dispatch: StepDispatch,
    *,
    step: Mapping[str, Any],
    visit_index: int,
    step_input: Any,
    version: WorkflowVersion,
    capabilities: Capabilities,
    state: RunState,
    prior_events: Sequence[Event],
    recorder: EventRecorder,
    cancelled: Callable[[], bool],
    deadline: float | None,
) -> tuple[Any, tuple[str, ...]]:
    """Build the task and context for the step's role and run the chosen harness."""
    from little_dist.harness.memo import Memo
    from little_dist.harness.types import (
        ExecuteStepResult,
        ExecuteStepTask,
        FixStepResult,
        FixStepTask,
        HarnessContext,
        HarnessRole,
        HarnessScope,
        ResolvedModel,
        StepContext,
        role_for_step,
    )

    path, attempt = dispatch.step_path, dispatch.attempt
    step_context = StepContext(step_path=path, visit_index=visit_index, attempt=attempt)
    task: ExecuteStepTask | FixStepTask
    role: HarnessRole
    if dispatch.kind == "fix_step":
        role = "fixer"
        step_state = state.steps.get(path)
        previous = step_state.attempts[-1] if step_state and step_state.attempts else None
        task = FixStepTask(
            step=step,
            step_input=step_input,
            original_attempt_error=dict(previous.error or {}) if previous else {},
            prior_fix_attempts=max(0, attempt - 2),
            step_context=step_context,
        )
    else:
        role = role_for_step(step)
        task = ExecuteStepTask(step=step, step_input=step_input, step_context=step_context)
    with_ = step.get("with") if isinstance(step.get("with"), Mapping) else {}
    assert isinstance(with_, Mapping)
    slot = with_.get("model") if step.get("uses") == "ai.generate" else None
    if dispatch.kind == "fix_step":
        fixer = (step.get("onFailure") or {}).get("fixer") or {}
        slot = fixer.get("model", slot)
    model = (
        capabilities.resolve_model(slot)
        if isinstance(slot, str)
        else ResolvedModel(slot_id="none", litellm_model="none")
    )
    tools = _tools_for(step, version, capabilities)
    bash = _bash_tool(step, capabilities, tools, recorder)
    if bash is not None:
        tools[bash.name] = bash
    manifest = _manifest(dispatch, step=step, version=version)
    ctx = HarnessContext(
        run_id=dispatch.run_id,
        role=role,
        model=model,
        recorder=recorder,
        memo=Memo.from_events(prior_events, path, world=world),
        scope=HarnessScope(run_id=dispatch.run_id, role=role, step_path=path),
        system=capabilities.system,
        tools=tools,
        skills=tuple(capabilities.skills),
        cancelled=cancelled,
        manifest=manifest,
        max_turns=capabilities.max_turns,
        deadline=deadline,
    )
    try:
        result = capabilities.harness_registry().run(task, ctx)
    finally:
        if bash is not None:
            bash.close()
    if isinstance(result, ExecuteStepResult):
        return result.output, tuple(result.artifact_refs)
    if isinstance(result, FixStepResult):
        return result.output, ()
    raise RuntimeConfigError(
        f"the {role} harness returned {type(result).__name__} for step {path!r}; "
        "expected ExecuteStepResult or FixStepResult"
    )


def _tools_for(
    step: Mapping[str, Any], version: WorkflowVersion, capabilities: Capabilities
) -> dict[str, Any]:
    """The tools the step may call: the named one for ``tool.call``; else the allowlist."""
    with_ = step.get("with")
    if step.get("uses") == "tool.call" and isinstance(with_, Mapping):
        name = with_.get("tool")
        found = capabilities.tools.get(name) if isinstance(name, str) else None
        if found is None:
            raise CapabilityError(
                f"step {step.get('id')!r} calls tool {name!r}, which is not registered "
                f"(registered: {', '.join(capabilities.tools.names()) or 'none'})"
            )
        return {found.name: found}
    names = _named_tools(step, version)
    if names is not None:
        # A name the workflow does not register is refused, not quietly left out: the
        # document selects among the registered tools, it never adds one.
        tools = capabilities.tools
        for name in names:
            if not capabilities.offers_tool(name):
                raise CapabilityError(
                    f"step {step.get('id')!r} names tool {name!r}, which is not registered "
                    f"(registered: {', '.join(tools.names()) or 'none'})"
                )
    return capabilities.tools_for(names)


def _named_tools(step: Mapping[str, Any], version: WorkflowVersion) -> list[str] | None:
    """The step's ``with.tools``, else the workflow's ``permissions.tools``, else None."""
    with_ = step.get("with")
    if isinstance(with_, Mapping) and isinstance(with_.get("tools"), list):
        return [str(name) for name in with_["tools"]]
    permissions = version.lwir.get("permissions")
    if isinstance(permissions, Mapping) and isinstance(permissions.get("tools"), list):
        return [str(name) for name in permissions["tools"]]
    return None


def _bash_tool(
    step: Mapping[str, Any],
    capabilities: Capabilities,
    tools: Mapping[str, Any],
    recorder: EventRecorder,
) -> BashTool | None:
    """This attempt's bash tool, when the workflow enables it and the step's model may be
    offered it (see :mod:`little_dist.harness.bash_tool`); else None."""
    if capabilities.bash is None or step.get("uses") == "tool.call" or "bash" in tools:
        return None
    # A step's own tools list limits it; permissions.tools (registered tools only: upstream's
    # compiler refuses "bash" there) does not, as upstream adds bash beside the allowed tools.
    with_ = step.get("with")
    listed = with_.get("tools") if isinstance(with_, Mapping) else None
    if isinstance(listed, list) and "bash" not in listed:
        return None
    from little_dist.harness.bash_tool import BashTool

    return BashTool(capabilities.bash, recorder)


def _manifest(
    dispatch: StepDispatch, *, step: Mapping[str, Any], version: WorkflowVersion
) -> dict[str, Any]:
    """What this engine adds to the session manifest (the harness registry adds the rest:
    step path, model slot, tools and skills digests, harness id)."""
    from little_dist.harness.recorder import frozen_digest

    # Step objects come from the scheduling plan, cached per version: hashed once each.
    return {"workflowVersionId": version.id, "stepConfigHash": frozen_digest(step)}


# StepPlan objects are cached with their version's plan, so the same object recurs for every
# attempt of a step: its schema hash is computed once, and forgotten with the plan (the plan
# cache is bounded; holding the step here would keep it alive past that bound).
_schema_hashes: weakref.WeakKeyDictionary[StepPlan, str | None] = weakref.WeakKeyDictionary()


def _schema_hash(step: StepPlan) -> str | None:
    try:
        return _schema_hashes[step]
    except KeyError:
        digest = output_schema_hash(step.output)
        _schema_hashes[step] = digest
        return digest
