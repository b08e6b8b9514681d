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
4. resolve the step input, run the harness for the step's role (:mod:`.harness_run`) with
   that recorder and a
   :class:`~little_dist.harness.memo.Memo` of the step path's earlier events (so a retry
   reuses finished tool calls and model turns instead of repeating them). The recorder
   appends what is pending in one batch before each side effect (a model or tool call:
   write-ahead, see the recorder's docstring), so ``StepAttemptStarted`` and the call are
   durable before the call runs, and appends a call's result as soon as it has it;
5. validate the output against the step's output contract, then commit the recorder's
   pending events, ``[ArtifactCreated]``, ``StepOutputValidated`` and ``StepCompleted`` — or
   ``StepFailed``, or ``little.step.suspended`` when its tool calls started sub-runs that
   run elsewhere (a fleet worker: :mod:`little_dist.subruns`) — in one fenced batch whose
   last event has occurrence ``end:{path}:{n}``: an attempt ends once;
6. release the lease (the commit's append does it in the same call).

In the code: :func:`execute_step_attempt` takes the lease (1.), catches up (2.,
:func:`_caught_up`), starts the recorder (3., :func:`_started`) and the heartbeat, runs and
judges (4.-5., :func:`~.harness_run.run_and_judge`) and commits (5.-6., :func:`_commit`).

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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.compiler import WorkflowVersion
from little_dist.errors import LeaseLostError, LittleError, StorageUnavailableError
from little_dist.event_types.engine import STEP_SUSPENDED
from little_dist.events import RUN_END_EVENT_TYPES, Event, EventInput
from little_dist.run_state import RUN_ENDED, RunState, RunStateBuilder
from little_dist.runtime.capabilities import Capabilities
from little_dist.runtime.continuation import PLAIN, Continuation
from little_dist.runtime.failures import step_failed, timeout_envelope
from little_dist.runtime.harness_run import run_and_judge
from little_dist.runtime.heartbeat import KeptLease, LeaseKeeper
from little_dist.runtime.observed import observed_attempt
from little_dist.runtime.outputs import INLINE_OUTPUT_LIMIT, hydrate_events
from little_dist.scheduling import RunContext, StepDispatch
from little_dist.scheduling.context import locate_step
from little_dist.scheduling.step_graph import plan_for
from little_dist.world.base import ArtifactInput, Fence, Lease, World, unique_holder
from little_dist.world.fleet_keys import step_lease_key

if TYPE_CHECKING:
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
    suspended = "suspended"  # this call committed little.step.suspended (waits for sub-runs)

    @property
    def committed(self) -> bool:
        """Whether this call committed something that ends the attempt (or suspends it)."""
        return self in (AttemptOutcome.completed, AttemptOutcome.failed, AttemptOutcome.suspended)


def run_input_of(events: Sequence[Event]) -> Any:
    """``RunStarted.payload.input`` of a run's events (``None`` before RunStarted)."""
    for event in events:
        if event.type == "RunStarted":
            return event.payload.get("input")
    return None


def _parent_run_id_of(events: Sequence[Event]) -> str | None:
    """``RunStarted.payload.parentRunId`` of a sub-run's events (``None`` for a run that no
    other run started, or before RunStarted)."""
    for event in events:
        if event.type == "RunStarted":
            parent = event.payload.get("parentRunId")
            return parent if isinstance(parent, str) else None
    return None


def _inherited_of(events: Sequence[Event]) -> Any:
    """``RunStarted.payload.inherited`` of a sub-run's events, as recorded (``None`` when
    it inherits nothing, or before RunStarted; see :mod:`little_dist.runtime.inherited`)."""
    for event in events:
        if event.type == "RunStarted":
            return event.payload.get("inherited")
    return None


# Long for its docstring (every caller's contract); the code, about 75 lines, is the walk of
# one attempt top to bottom, its parts named below.
@observed_attempt  # (metrics and traces, when on: little_dist.observability)
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
    abandon: threading.Event | None = None,
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

    ``abandon``, when set by the time the harness returns (the process driving the run was
    interrupted: Ctrl-C of ``little run``), means the attempt stops without an end, as a
    dead worker's does: what it recorded is flushed (a model call it interrupted, with what
    the call spent), nothing is committed, its lease is released, and a resumed run retries
    it (``lease_expired``, not counted against the step's attempts).
    """
    # Long on purpose: the walk (lease -> catch up -> start -> run -> commit) reads top to
    # bottom here, each part one call; about 75 lines of code under this docstring.
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
        caught_up = _caught_up(
            world,
            dispatch,
            version,
            (state, context, prior_events),
            max_branches_cap,
            read_newer=continuation.read_log,
        )
        if caught_up is None:
            return AttemptOutcome.already_done
        state, context, prior_events = caught_up
        where = locate_step(plan_for(version), path)
        recorder = _started(world, dispatch, where.step.raw, lease, continuation, on_recorded)
        lost = threading.Event()
        if keeper is None:
            own_keeper = keeper = LeaseKeeper(world)
        deadline: float | None = None
        on_deadline: Callable[[Lease], None] | None = None
        if timeout is not None:
            deadline = time.monotonic() + timeout
            on_deadline = _watchdog_ending(recorder, path, where.step.raw, attempt, timeout)
        heartbeat = keeper.keep(
            lease, lease_ttl, on_lost=lost.set, deadline=deadline, on_deadline=on_deadline
        )
        staged: list[ArtifactInput] = []  # written with the commit (one round trip)
        ending = run_and_judge(
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
            timed_out=heartbeat.timed_out.is_set,
            timeout=timeout,
        )
        if abandon is not None and abandon.is_set():
            recorder.flush()
            return AttemptOutcome.superseded
        heartbeat.stop()
        try:
            recorded = _commit(world, recorder, ending, staged, heartbeat.lease.fence, continuation)
        except LeaseLostError:
            released = True
            raise
        released = True
        if on_recorded is not None:
            on_recorded(recorded)
        if recorded[-1].type == "StepCompleted":
            return AttemptOutcome.completed
        if recorded[-1].type == STEP_SUSPENDED:
            return AttemptOutcome.suspended
        return AttemptOutcome.failed
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


def _caught_up(
    world: World,
    dispatch: StepDispatch,
    version: WorkflowVersion,
    given: tuple[RunState | None, RunContext | None, Sequence[Event] | None],
    max_branches_cap: int | None,
    *,
    read_newer: bool,
) -> tuple[RunState, RunContext, Sequence[Event]] | None:
    """The run's state, context and the step's earlier events as of now that this attempt
    holds the lease; ``None`` when the attempt is over (ended, a later one started, the run
    over). ``given``: the caller's (all three, or the log is read once for what is missing);
    ``read_newer``: read what was appended since the caller's state (another holder may
    have run the attempt between the caller's read and our lease)."""
    run_id, path, attempt = dispatch.run_id, dispatch.step_path, dispatch.attempt
    state, context, prior_events = given
    if state is None or context is None or prior_events is None:
        state, context, prior_events = _read_run(
            world, run_id, version, state, context, prior_events, max_branches_cap
        )
        return None if _attempt_over(state, path, attempt) else (state, context, prior_events)
    # Over as the caller saw it: nothing to read (the step's events, which may still be
    # undecoded in the caller's tracker, are not looked at).
    if _attempt_over(state, path, attempt):
        return None
    if read_newer:
        newer = world.list_events(run_id, after=state.event_count)
        if _settled_by(newer, path, attempt):
            return None
        prior_events = [*prior_events, *newer]
    return state, context, prior_events


def _read_run(
    world: World,
    run_id: str,
    version: WorkflowVersion,
    state: RunState | None,
    context: RunContext | None,
    prior_events: Sequence[Event] | None,
    max_branches_cap: int | None,
) -> tuple[RunState, RunContext, Sequence[Event]]:
    """The run's state, context and earlier events: the caller's where it gave them, the
    rest from one read of the log."""
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
            parent_run_id=_parent_run_id_of(events),
            inherited=_inherited_of(events),
        )
    return state, context, events if prior_events is None else prior_events


def _started(
    world: World,
    dispatch: StepDispatch,
    step: Mapping[str, Any],
    lease: Lease,
    continuation: Continuation,
    on_recorded: RecordedSink | None,
) -> EventRecorder:
    """The attempt's recorder (fenced by ``lease``, deferred), holding the continuation's
    preamble and ``StepAttemptStarted``: appended with the first side effect, or the commit.
    """
    from little_dist.harness.recorder import EventRecorder

    path, attempt = dispatch.step_path, dispatch.attempt
    recorder = EventRecorder(
        world,
        dispatch.run_id,
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
            # Engine field: who ran it (the step lease's holder, which names the worker
            # process), so a run's log says which attempt ran where.
            **({"workerId": lease.holder} if lease.holder else {}),
        },
        occurrences.attempt_started(path, attempt),
    )
    return recorder


def _commit(
    world: World,
    recorder: EventRecorder,
    ending: Sequence[EventInput],
    staged: Sequence[ArtifactInput],
    fence: Fence,
    continuation: Continuation,
) -> list[Event]:
    """Append what the recorder holds and ``ending`` in one fenced batch that releases the
    step lease (one round trip on Redis), with the ``staged`` output artifact, or taking the
    continuation's next step lease when the attempt completed; the events recorded. Raises
    :class:`~little_dist.errors.LeaseLostError` when the fence no longer holds."""
    run_id = recorder.run_id
    signal = continuation.signal
    next_lease = continuation.next_lease
    pending = recorder.take_pending()
    commit = [*pending, *ending]
    try:
        if staged and next_lease is None:
            # The output artifact the completion names is written in the same round trip,
            # ahead of the events.
            return world.append_batch_with_artifacts(
                run_id, commit, list(staged), fence=fence, signal=signal, release=True
            )
        if next_lease is not None and ending and ending[-1].type == "StepCompleted":
            for artifact in staged:
                world.put_artifact(artifact)
            recorded, taken = world.append_batch_then_acquire(
                run_id, commit, next_lease, fence=fence, signal=signal, release=True
            )
            if taken is not None:
                if continuation.on_next_lease is None:
                    world.release_lease(taken)
                else:
                    continuation.on_next_lease(taken)
            return recorded
        return world.append_batch(run_id, commit, fence=fence, signal=signal, release=True)
    except StorageUnavailableError:
        if staged and pending:
            # S3 refused the output artifact: keep what the attempt recorded (a tool's
            # result above all), so that its retry replays it instead of calling again.
            with contextlib.suppress(LittleError):
                world.append_batch(run_id, pending, fence=fence, signal=False)
        raise


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


def _watchdog_ending(
    recorder: EventRecorder, path: str, step: Mapping[str, Any], attempt: int, timeout: float
) -> Callable[[Lease], None]:
    """What the lease keeper calls when the attempt is still running ``DEADLINE_GRACE``
    seconds past its deadline: commit its ``StepFailed`` (cause ``timeout``) under the lease
    it no longer renews, releasing it, and waking the scheduler (this attempt's thread, stuck
    in a call, will not advance the run)."""

    def end(lease: Lease) -> None:
        failure = step_failed(path, step, attempt, timeout_envelope(path, timeout))
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


def _attempt_over(state: RunState, path: str, attempt: int) -> bool:
    if state.status in RUN_ENDED:
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
