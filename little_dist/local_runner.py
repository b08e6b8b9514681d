"""The embedded default runner: one process, a thread pool, any world.

:func:`run_version` drives one run of a compiled :class:`WorkflowVersion` to its end:

* the run input is checked against the workflow's input schema before anything is written;
* the version is registered and ``WorkflowVersionRegistered`` + ``RunStarted`` appended
  (occurrence ids ``version-registered`` and ``run-start``: idempotent);
* then the loop: fold the new events into a :class:`~little_dist.run_state.RunStateBuilder`
  (incrementally; outputs stored by reference are read back in), ask
  :func:`~little_dist.scheduling.decide` what next, append its events in one batch, and
  run each new dispatch (:func:`~little_dist.runtime.execute_step_attempt`): a lone one on
  the loop's own thread, several on a thread pool; wait for one to finish; repeat until
  ``decide`` says the run is done. Nothing but ``decide`` chooses what runs.

The loop runs on a thread of its own; the calling thread gets progress and notices from it
and watches a lone attempt (no thread hand-off per step): it reads the log for a cancel
request while the attempt runs, and when the attempt's call outlives its step timeout (or a
cancel ends the run first), another thread goes on with the loop and the stuck one is left
behind (a daemon: it never keeps the process alive).

A ``little.run.cancel_requested`` in the log (``little cancel``; a sub-run whose parent was
stopped, see :mod:`little_dist.subruns`) makes ``decide`` fail the run with causeCode
``cancelled``; attempts in flight are told to stop and waited for (a model call in flight is
not: see :mod:`little_dist.harness.model_calls`). The caller's ``cancel`` handle records that
request when it is set, and a run whose deadline (``little.run.limits``, see
:mod:`little_dist.run_limits`) passes records it with the deadline's cause. Both are looked
at every ``CANCEL_POLL`` seconds at most. An interrupt of the calling thread (Ctrl-C) only
stops this process driving the run: the run stays open, and calling again with its id
resumes it.

Calling it again with the id of a finished run returns the recorded state and runs nothing.
With the id of an unfinished run it resumes: attempts left *running* by a dead process are
failed with causeCode ``lease_expired`` once their step lease is free
(:func:`~little_dist.runtime.sweep_dead_attempts`, at start and then periodically while
some are still leased) and ``decide`` retries them; the harness memo replays the tool calls
and model turns they had finished, so resuming repeats no recorded side effect.

One runner per run: the runner holds the lease ``{run}:runner`` (heartbeated) and fences
its own appends with it; a second runner waits up to ``lock_wait`` seconds for it (a killed
runner's lease expires after ``lease_ttl``) and then gives up with
:class:`RunnerBusyError`.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Final

from little_dist import occurrences
from little_dist.canonical import canonical_json
from little_dist.compiler import WorkflowVersion
from little_dist.errors import (
    ConflictError,
    InvalidInputError,
    LeaseLostError,
    LittleError,
    RunEndedError,
)
from little_dist.event_types.engine import CANCEL_EVENT_TYPE, LIMITS_EVENT_TYPE
from little_dist.events import Event, EventInput
from little_dist.ids import RUN_ID_PREFIX, validate_run_id
from little_dist.pricing import PriceFallback
from little_dist.run_limits import (
    RunLimits,
    cancel_error,
    deadline_cancel,
    requested_cancel,
)
from little_dist.run_state import RUN_ENDED, RunState, RunStateBuilder
from little_dist.runtime import (
    DEADLINE_GRACE,
    DEFAULT_STEP_TIMEOUT,
    AttemptOutcome,
    Capabilities,
    Continuation,
    LeaseHeartbeat,
    LeaseKeeper,
    execute_step_attempt,
    hydrate_events,
    run_input_of,
    sweep_dead_attempts,
)
from little_dist.runtime.daemon_pool import DaemonThreadPool
from little_dist.scheduling import Decision, RunContext, StepDispatch, decide
from little_dist.world.base import Lease, World
from little_dist.world.extras import extras_of
from little_dist.world.fleet_keys import runner_lease_key
from little_dist.world.process_mark import marked

__all__ = [
    "DEFAULT_LEASE_TTL",
    "RunInputError",
    "RunMismatchError",
    "RunStalledError",
    "RunnerBusyError",
    "check_run_input",
    "new_run_id",
    "run_version",
]

#: Lease TTL of the runner lock and of step attempts. Short enough that a killed
#: ``little run`` can be resumed within seconds; heartbeats renew every third of it.
DEFAULT_LEASE_TTL: Final = 15.0

# Event types whose payload the harness memo reads, indexed per step path as they are folded
# (session starts: the recorded capability manifests a resumed session is checked against).
_MEMO_TYPES: Final = frozenset(
    {
        "harness.session.started",
        "HarnessSessionStarted",
        "harness.model.called",
        "harness.model.responded",
        "harness.tool_call.succeeded",
        "HarnessModelCalled",
        "HarnessModelResponded",
        "HarnessToolCallSucceeded",
    }
)

#: Longest wait for an attempt before the loop reads the log again (a cancel request).
CANCEL_POLL: Final = 0.5

#: The runner holds the run's runner lease: nobody else runs its attempts, so an attempt
#: need not read the log again once it holds its step lease.
_EXCLUSIVE: Final = Continuation(read_log=False)


#: An inline attempt the calling thread watches: ``over_by`` (monotonic) when, past its step
#: timeout, the loop is taken over by a new thread (``None``: no timeout, never).
@dataclasses.dataclass(frozen=True, eq=False)
class _Armed:
    dispatch: StepDispatch
    over_by: float | None
    generation: int
    #: Set when the attempt's call returned (a loop that took over on a cancel waits for it).
    returned: threading.Event = dataclasses.field(default_factory=threading.Event)


class _Superseded(Exception):
    """This loop thread's attempt overstayed: another thread took the loop over."""


class _Stopped(Exception):
    """The calling thread was interrupted: the loop stops."""


ProgressCallback = Callable[[RunState], None]
NoticeCallback = Callable[[str], None]


class RunInputError(InvalidInputError):
    """The run input does not match the workflow's input schema; ``problems`` lists why."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("input does not match the workflow's input schema: " + "; ".join(problems))


class RunMismatchError(InvalidInputError):
    """An existing run id was given with another workflow version or another input."""


class RunnerBusyError(ConflictError):
    """Another runner holds the run and did not let go within the wait."""


class RunStalledError(LittleError):
    """``decide`` has nothing to run, nothing is running, and the run is not over."""


def new_run_id() -> str:
    """A fresh run id: ``run_`` + 32 hex digits (random)."""
    return RUN_ID_PREFIX + uuid.uuid4().hex


def check_run_input(version: WorkflowVersion, run_input: Any) -> None:
    """Raise :class:`RunInputError` unless ``run_input`` matches the LWIR input schema."""
    from little_dist.runtime.outputs import schema_problems

    spec = version.lwir.get("input")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(schema, dict):
        return
    try:
        canonical_json(run_input)
    except InvalidInputError as error:
        raise RunInputError([str(error)]) from error
    problems = schema_problems(schema, run_input)
    if problems:
        raise RunInputError(problems)


def run_version(
    world: World,
    version: WorkflowVersion,
    run_input: Any,
    *,
    run_id: str | None = None,
    capabilities: Capabilities | None = None,
    max_workers: int = 8,
    progress: ProgressCallback | None = None,
    notice: NoticeCallback | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    lock_wait: float | None = None,
    max_branches_cap: int | None = None,
    pricing_fallback: PriceFallback | None = None,
    parent: Mapping[str, Any] | None = None,
    archive: bool = True,
    cancel: Any = None,
) -> RunState:
    """Run (or resume, or just read back) one run of ``version``; return its final state.

    ``progress`` is called on the calling thread with each new state; ``notice`` with
    one-line messages (waiting for a previous runner's lease, ...). ``lock_wait`` (default
    ``lease_ttl`` + 2 s) bounds the wait for another runner's lease. Raises
    :class:`RunInputError` / :class:`RunMismatchError` before writing anything,
    :class:`RunnerBusyError` when the run stays held, :class:`RunStalledError` when
    ``decide`` cannot make progress. ``pricing_fallback`` prices the state's model calls the
    bundled registry has no rates for (``None``: registry rates only). ``parent``: the link
    of a sub-run to the run that started it (``parentRunId``, ... see
    :mod:`little_dist.subruns`), recorded in its ``RunStarted``. ``archive=False`` leaves a
    finished run's log where it is (an outer loop records its cycle's decision on it first,
    then archives it). ``cancel``: a cancel handle (anything with ``is_set()``, see
    :class:`~little_dist.run_limits.CancelToken`): once set, the run is cancelled.
    """
    if max_workers < 1:
        raise InvalidInputError(f"max_workers must be at least 1, got {max_workers!r}")
    check_run_input(version, run_input)
    run_id = new_run_id() if run_id is None else validate_run_id(run_id)
    existing = world.list_events(run_id)
    if existing:
        state = _fold(world, run_id, existing, pricing_fallback)
        _check_same_run(run_id, state, existing, version, run_input)
        if state.status in RUN_ENDED:
            if progress is not None:
                progress(state)
            return state
    runner = _Runner(
        world,
        version,
        run_input,
        run_id=run_id,
        capabilities=capabilities or Capabilities(),
        max_workers=max_workers,
        progress=progress,
        notice=notice,
        lease_ttl=lease_ttl,
        max_branches_cap=max_branches_cap,
        pricing_fallback=pricing_fallback,
        parent=parent,
        archive=archive,
        cancel_handle=cancel,
    )
    return runner.run(lock_wait=lease_ttl + 2.0 if lock_wait is None else lock_wait)


def _fold(
    world: World, run_id: str, events: Iterable[Event], pricing_fallback: PriceFallback | None
) -> RunState:
    builder = RunStateBuilder(run_id, pricing_fallback=pricing_fallback)
    builder.apply_all(hydrate_events(world, events))
    return builder.snapshot()


def _check_same_run(
    run_id: str,
    state: RunState,
    events: list[Event],
    version: WorkflowVersion,
    run_input: Any,
) -> None:
    recorded = state.workflow_version_id
    if recorded is not None and recorded != version.id:
        raise RunMismatchError(
            f"run {run_id} belongs to workflow version {recorded}, not {version.id}"
        )
    if any(event.type == "RunStarted" for event in events) and canonical_json(
        run_input_of(events)
    ) != canonical_json(run_input):
        raise RunMismatchError(f"run {run_id} was started with a different input")


class _Runner:
    """One run's loop; private state of :func:`run_version` (single-use)."""

    def __init__(
        self,
        world: World,
        version: WorkflowVersion,
        run_input: Any,
        *,
        run_id: str,
        capabilities: Capabilities,
        max_workers: int,
        progress: ProgressCallback | None,
        notice: NoticeCallback | None,
        lease_ttl: float,
        max_branches_cap: int | None,
        pricing_fallback: PriceFallback | None,
        parent: Mapping[str, Any] | None = None,
        archive: bool = True,
        cancel_handle: Any = None,
    ) -> None:
        self.world = world
        self.cancel_handle = cancel_handle
        #: The run's limits, as its log records them (see :mod:`little_dist.run_limits`).
        self.limits = RunLimits()
        self.parent = dict(parent or {})
        self.archive_on_end = archive
        self.version = version
        self.run_input = run_input
        self.run_id = run_id
        self.capabilities = capabilities
        self.max_workers = max_workers
        self.progress = progress
        self.notice = notice
        self.lease_ttl = lease_ttl
        self.context = RunContext(
            version=version,
            run_input=run_input,
            run_id=run_id,
            max_branches_cap=max_branches_cap,
        )
        own = f"runner:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.holder = marked(own)
        self.builder = RunStateBuilder(run_id, pricing_fallback=pricing_fallback)
        self.memo_events: dict[str, list[Event]] = {}
        # Events the attempts appended (handed over by execute_step_attempt), by sequence,
        # not folded yet: folded from here instead of being read back from the log.
        self.recorded: dict[int, Event] = {}
        self.recorded_lock = threading.Lock()
        # An append of ours returned events that do not follow the folded ones (an attempt's
        # appends came in between, not handed over yet): the next look must read the log.
        self.behind = False
        self.cancel = threading.Event()  # tells in-flight attempts to stop early
        self.keeper = LeaseKeeper(world)  # heartbeats every attempt's lease from one thread
        #: Seconds an attempt may run (the workflow's step_timeout, else the default).
        self.timeout = capabilities.attempt_timeout(DEFAULT_STEP_TIMEOUT)
        self.in_flight: dict[Future[AttemptOutcome], StepDispatch] = {}
        # When each in-flight attempt is surely over, its step timeout included (monotonic):
        # past it, one whose end is in the log is left to its thread (abandoned).
        self.over_by: dict[Future[AttemptOutcome], float] = {}
        self.abandoned = 0
        self.dispatched: set[tuple[str, int, str]] = set()
        self.retry_at: dict[tuple[str, int, str], float] = {}
        self.next_sweep: float | None = 0.0  # monotonic time of the next sweep; None: none due
        self.sweep_interval = max(0.05, min(1.0, lease_ttl / 6))
        # The loop runs on a thread of its own and runs a lone attempt there itself; the
        # calling thread gets progress, notices and the end from it here, and watches
        # that attempt (see _drive).
        self.messages: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.armed: _Armed | None = None
        self.generation = 0  # of the thread that runs the loop (a new one takes it over)
        self.guard = threading.Lock()  # armed and generation change together
        self.stopping = False
        #: Set with ``stopping`` when the calling thread was interrupted: attempts in flight
        #: stop without an end (a resumed run retries them).
        self.interrupted = threading.Event()
        # Inline attempts whose loop was taken over on a cancel request: still running,
        # told to stop, waited for before the run returns (as attempts on the pool are).
        self.left_running: list[_Armed] = []

    # -- lifecycle --------------------------------------------------------------------------

    def run(self, *, lock_wait: float) -> RunState:
        lock = self._acquire_runner_lock(lock_wait)
        heartbeat = LeaseHeartbeat(self.world, lock, self.lease_ttl, on_lost=self.cancel.set)
        heartbeat.start()
        executor = DaemonThreadPool(self.max_workers, name=f"little-{self.run_id}")
        try:
            self._start(lock)
            state = self._drive(lock, executor, heartbeat)
        finally:
            self.cancel.set()
            # (an abandoned attempt's call may never return: not waited for)
            executor.shutdown(wait=not self.abandoned)
            self.keeper.close()
            heartbeat.stop()
            self.world.release_lease(heartbeat.lease)
        if self.archive_on_end:
            self._archive(state)
        return state

    def _archive(self, state: RunState) -> None:
        """Hand a finished run's log to the world's archive, where it keeps one (the Redis
        world moves it to S3, then lets the stream expire); the fleet's scheduler does the
        same for fleet runs. A failed archive does not change the run's result."""
        archives = extras_of(self.world).archives
        if archives is None or state.status not in RUN_ENDED:
            return
        try:
            archives.archive_run(self.run_id)
        except LittleError as error:
            if self.notice is not None:
                self.notice(f"run {self.run_id} finished but was not archived: {error}")

    def _acquire_runner_lock(self, lock_wait: float) -> Lease:
        key = runner_lease_key(self.run_id)
        deadline = time.monotonic() + lock_wait
        told = False
        while True:
            lease = self.world.acquire_lease(key, self.holder, self.lease_ttl)
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise RunnerBusyError(
                    f"run {self.run_id} is held by another runner (waited {lock_wait:g}s)"
                )
            if not told and self.notice is not None:
                self.notice(
                    f"run {self.run_id} is held by another runner; waiting up to {lock_wait:g}s "
                    "for its lease to expire"
                )
                told = True
            time.sleep(min(0.25, max(0.01, deadline - time.monotonic())))

    def _start(self, lock: Lease) -> None:
        version = self.version
        self.world.register_version(version.id, version.to_json())
        self._fold_appended(
            self.world.append_batch(
                self.run_id,
                [
                    EventInput(
                        type="WorkflowVersionRegistered",
                        occurrence_id=occurrences.VERSION_REGISTERED,
                        payload={
                            "workflowVersionId": version.id,
                            "workflowVersionHash": version.hash,
                        },
                    ),
                    EventInput(
                        type="RunStarted",
                        occurrence_id=occurrences.RUN_START,
                        payload={
                            **self.parent,
                            "workflowVersionId": version.id,
                            "input": self.run_input,
                        },
                    ),
                ],
                fence=lock.fence,
            )
        )

    # -- the loop ---------------------------------------------------------------------------

    def _drive(
        self, lock: Lease, executor: DaemonThreadPool, heartbeat: LeaseHeartbeat
    ) -> RunState:
        """Run the loop on a thread of its own and wait for its end on this one.

        The loop runs a lone attempt on its own thread (no hand-off per step), so this
        thread is the watchdog: while that attempt runs, it reads the log for a cancel
        request every ``CANCEL_POLL`` seconds, and when the attempt is past its step timeout
        in a call that has not returned (see :meth:`_abandon_ended`), it leaves that thread
        behind and starts another that goes on with the loop. ``progress`` and ``notice``
        are called here, on the calling thread.
        """
        self._spawn(lock, executor, heartbeat)
        ended = False  # (the loop's thread said so: it is not waited for again)
        try:
            while True:
                # (not told when an attempt is armed, which would cost a switch per step:
                # looks every CANCEL_POLL seconds, and at the armed attempt's over_by)
                armed = self.armed
                timeout = CANCEL_POLL
                if armed is not None and armed.over_by is not None:
                    timeout = min(timeout, max(0.0, armed.over_by - time.monotonic()))
                try:
                    kind, value = self.messages.get(timeout=timeout)
                except queue.Empty:
                    self._watch(lock, executor, heartbeat)
                    continue
                if kind == "progress" and self.progress is not None:
                    self.progress(value)
                elif kind == "notice" and self.notice is not None:
                    self.notice(value)
                elif kind in ("done", "error"):
                    ended = True
                    if kind == "error":
                        raise value
                    return value  # type: ignore[no-any-return]
        except BaseException:
            if not ended:
                # Interrupted here (Ctrl-C) or a callback failed: the loop stops at its next
                # turn, its attempts told to stop; wait for it (a second interrupt does not).
                self.stopping = True
                self.interrupted.set()
                self.cancel.set()
                while self.messages.get()[0] not in ("done", "error"):
                    pass
            raise

    def _spawn(self, lock: Lease, executor: DaemonThreadPool, heartbeat: LeaseHeartbeat) -> None:
        generation = self.generation
        thread = threading.Thread(
            target=self._serve,
            args=(lock, executor, heartbeat, generation),
            name=f"little-loop-{self.run_id}-{generation}",
            daemon=True,  # (one left in a call that never returns dies with the process)
        )
        thread.start()

    def _serve(
        self, lock: Lease, executor: DaemonThreadPool, heartbeat: LeaseHeartbeat, generation: int
    ) -> None:
        try:
            state = self._loop(lock, executor, heartbeat, generation)
        except _Superseded:
            return
        except BaseException as error:
            if self.generation == generation:
                self.messages.put(("error", error))
            return
        if self.generation == generation:
            self.messages.put(("done", state))

    def _tell(self, message: str) -> None:
        if self.notice is not None:
            self.messages.put(("notice", message))

    def _watch(self, lock: Lease, executor: DaemonThreadPool, heartbeat: LeaseHeartbeat) -> None:
        """The calling thread's look at the loop's inline attempt (see :meth:`_drive`)."""
        armed = self.armed
        if armed is None:
            return
        dispatch = armed.dispatch
        self._stop_due(lock)
        events = self.world.list_events(self.run_id, after=self.builder.event_count)
        if any(event.type == CANCEL_EVENT_TYPE for event in events):
            # The run ends now, not when the attempt returns: another thread goes on with
            # the loop (it fails the run, and waits for the attempt, told to stop).
            with self.guard:
                if self.armed is not armed:
                    return
                self.armed = None
                self.generation += 1
                self.left_running.append(armed)
            self.cancel.set()
            self._spawn(lock, executor, heartbeat)
            return
        now = time.monotonic()
        if armed.over_by is None or now < armed.over_by:
            return
        ended = any(
            event.type in ("StepCompleted", "StepFailed")
            and event.payload.get("stepPath") == dispatch.step_path
            and event.payload.get("attempt") == dispatch.attempt
            for event in events
        )
        if not ended and now < armed.over_by + self.lease_ttl:
            return  # (the lease keeper is about to end it, or its lease expires)
        with self.guard:
            if self.armed is not armed:
                return  # (it returned meanwhile)
            self.armed = None
            self.generation += 1
            self.abandoned += 1
        if self.notice is not None:
            self.notice(
                f"step {dispatch.step_path} (attempt {dispatch.attempt}) ran past its "
                f"{self.timeout:g}s timeout in a call that has not returned; its thread "
                "is left behind and whatever it does now is discarded"
            )
        self._spawn(lock, executor, heartbeat)

    def _loop(
        self,
        lock: Lease,
        executor: DaemonThreadPool,
        heartbeat: LeaseHeartbeat,
        generation: int = 0,
    ) -> RunState:
        reported = -1
        # Whether the next look reads the log (others' appends: a cancel request, a sweep's
        # failures); not right after this loop's own append or start of an attempt, which
        # are folded already (a read would only race the attempt's own first writes).
        read = True
        while True:
            if self.stopping:
                raise _Stopped(f"run {self.run_id}: interrupted")
            if heartbeat.cancelled():
                raise LeaseLostError(f"run {self.run_id}: another runner took over the run")
            state = self._catch_up(read=read or self.behind)
            read = self.behind = False
            if self._stop_due(lock):
                read = True
                continue  # the cancel request was appended: fold it first
            sweep_due = self.next_sweep is not None and time.monotonic() >= self.next_sweep
            if sweep_due and self._sweep(state):
                read = True
                continue  # failures were appended: fold them first
            if state.event_count != reported and self.progress is not None:
                self.messages.put(("progress", state))
                reported = state.event_count
            decision = decide(self.context, state)
            wrote = self._append(decision, lock)
            if wrote:
                state = self.builder.snapshot()
            if self._submit(decision, executor, state, generation):
                continue
            if wrote and not decision.last_round:
                continue  # (what it recorded may let more run: decide on it)
            if decision.done:
                self.cancel.set()
                self._drain(executor)
                final = self._catch_up()
                if self.progress is not None and final.event_count != reported:
                    self.messages.put(("progress", final))
                return final
            self._wait(state, executor)
            read = True

    def _stop_due(self, lock: Lease) -> bool:
        """Record the run's cancel request when the caller's handle was set or the run's
        deadline passed (and none is recorded yet); whether it did."""
        # (also called from the calling thread's watch: reads only what one assignment
        # replaces, never the builder)
        if self.context.cancel_requested:
            return False
        if self.cancel_handle is not None and self.cancel_handle.is_set():
            request = requested_cancel(self.cancel_handle, "run_workflow")
        elif self.limits.passed(time.time()):
            request = deadline_cancel(self.limits)
        else:
            return False
        try:
            self.world.append(self.run_id, request, fence=lock.fence)
        except RunEndedError:
            return False  # (it ended meanwhile)
        return True

    def _catch_up(self, *, read: bool = True) -> RunState:
        """Fold what the attempts handed over (while it follows on without a gap), then
        (``read``) whatever else the log has (other attempts' events in between, a cancel
        request)."""
        with self.recorded_lock:
            known = self.recorded
            self.recorded = {}
        count = self.builder.event_count
        handed: list[Event] = []
        while (event := known.pop(count + 1, None)) is not None:
            handed.append(event)
            count += 1
        self._fold(handed)
        if read or known:  # (a gap: another writer's events came in between, a sub-run's loan)
            self._fold(self.world.list_events(self.run_id, after=self.builder.event_count))
        if known:  # out of order: what is still ahead of the fold waits for the next look
            done = self.builder.event_count
            with self.recorded_lock:
                for sequence, event in known.items():
                    if sequence > done:
                        self.recorded.setdefault(sequence, event)
        return self.builder.snapshot()

    def _handed_over(self, events: Sequence[Event]) -> None:
        """``on_recorded`` of the attempts (any thread)."""
        with self.recorded_lock:
            for event in events:
                self.recorded[event.sequence] = event

    def _fold(self, events: list[Event]) -> None:
        if not events:
            return
        self.builder.apply_all(hydrate_events(self.world, events))
        for event in events:
            if event.type == "RunStarted" and event.payload.get("inherited") is not None:
                # (a sub-run: its attempts apply what it inherits, as its log records it)
                self.context = dataclasses.replace(
                    self.context, inherited=event.payload["inherited"]
                )
            if event.type == CANCEL_EVENT_TYPE and not self.context.cancel_requested:
                # (``little cancel``, a sub-run's parent stopping, the caller's cancel
                # handle, the run's deadline): decide fails the run
                self.context = dataclasses.replace(
                    self.context,
                    cancel_requested=True,
                    cancel_error=cancel_error(event.payload),
                )
            if event.type == LIMITS_EVENT_TYPE and not self.limits:
                self.limits = RunLimits.from_payload(event.payload)
                if self.limits.max_attempts is not None:
                    self.context = dataclasses.replace(
                        self.context, default_max_attempts=self.limits.max_attempts
                    )
            if event.type in _MEMO_TYPES:
                path = event.payload.get("stepPath")
                if isinstance(path, str):
                    self.memo_events.setdefault(path, []).append(event)

    def _sweep(self, state: RunState) -> bool:
        skip = {(dispatch.step_path, dispatch.attempt) for dispatch in self.in_flight.values()}
        result = sweep_dead_attempts(
            self.world,
            state,
            version=self.version,
            holder=f"{self.holder}:sweep",
            skip=skip,
        )
        if result.held and self.next_sweep == 0.0:
            self._tell(
                f"{len(result.held)} attempt(s) of a previous process still hold their "
                f"leases; waiting up to {self.lease_ttl:g}s for them to expire"
            )
        self.next_sweep = time.monotonic() + self.sweep_interval if result.held else None
        return bool(result.failed)

    def _append(self, decision: Decision, lock: Lease) -> bool:
        """Append the decision's events; whether any of them was new.

        New events that directly follow the folded ones are folded here, from what the
        append returned, saving a read of the log.
        """
        if not decision.events:
            return False
        return self._fold_appended(
            self.world.append_batch(self.run_id, decision.events, fence=lock.fence)
        )

    def _fold_appended(self, recorded: list[Event]) -> bool:
        """Fold the new events of one append of ours when they follow the folded ones (one
        atomic batch: contiguous, nothing of anyone else's between); whether any was new."""
        last = self.builder.event_count
        new = [event for event in recorded if event.sequence > last]
        if new and new[0].sequence == last + 1:
            self._fold(new)
        elif new:
            self.behind = True  # others' events came in between: the next look reads them
        return bool(new)

    def _submit(
        self, decision: Decision, executor: DaemonThreadPool, state: RunState, generation: int
    ) -> bool:
        """Start the decision's new dispatches; whether one ran to its end already.

        A lone dispatch with nothing else in flight (a chain of steps) runs on the loop's
        thread: handing it to the pool would only add two thread switches per step. The
        calling thread watches it (:meth:`_drive`): a call past its step timeout that does
        not return does not hold the run's loop. Several run on the pool (see :meth:`_wait`).
        """
        now = time.monotonic()
        fresh: list[StepDispatch] = []
        for dispatch in decision.dispatch:
            key = (dispatch.step_path, dispatch.attempt, dispatch.kind)
            if key in self.dispatched or self.retry_at.get(key, 0.0) > now:
                continue
            self.retry_at.pop(key, None)
            self.dispatched.add(key)
            fresh.append(dispatch)
        if len(fresh) == 1 and not self.in_flight:
            self._inline(fresh[0], state, generation, now)
            return True
        for dispatch in fresh:
            future = executor.submit(self._attempt, dispatch, state)
            self.in_flight[future] = dispatch
            if self.timeout is not None:
                # The attempt's clock starts once it holds its lease: a little later.
                self.over_by[future] = now + self.timeout + DEADLINE_GRACE + self.sweep_interval
        return False

    def _inline(self, dispatch: StepDispatch, state: RunState, generation: int, now: float) -> None:
        """Run ``dispatch`` on this thread, armed for the calling thread's watch."""
        over_by = None
        if self.timeout is not None:
            over_by = now + self.timeout + DEADLINE_GRACE + self.sweep_interval
        armed = self.armed = _Armed(dispatch, over_by, generation)
        try:
            outcome = self._attempt(dispatch, state)
        finally:
            armed.returned.set()
            with self.guard:
                superseded = self.generation != generation
                if self.armed is armed:
                    self.armed = None
            if superseded:
                raise _Superseded
        self._settled(dispatch, outcome)

    def _attempt(self, dispatch: StepDispatch, state: RunState) -> AttemptOutcome:
        return execute_step_attempt(
            self.world,
            dispatch,
            version=self.version,
            capabilities=self.capabilities,
            lease_ttl=self.lease_ttl,
            state=state,
            context=self.context,
            prior_events=tuple(self.memo_events.get(dispatch.step_path, ())),
            cancel=self.cancel,
            keeper=self.keeper,
            on_recorded=self._handed_over,
            # The runner lease: no one else runs this run's attempts.
            continuation=_EXCLUSIVE,
            timeout=self.timeout,
            abandon=self.interrupted,
        )

    def _settled(self, dispatch: StepDispatch, outcome: AttemptOutcome) -> None:
        if outcome is AttemptOutcome.busy:
            # Someone else holds the step (a previous process's worker): try again later.
            key = (dispatch.step_path, dispatch.attempt, dispatch.kind)
            self.dispatched.discard(key)
            self.retry_at[key] = time.monotonic() + self.sweep_interval
            if self.next_sweep is None:
                self.next_sweep = time.monotonic() + self.sweep_interval

    def _wait(self, state: RunState, executor: DaemonThreadPool) -> None:
        self._abandon_ended(state, executor)
        deadlines = [t for t in self.retry_at.values()]
        if self.next_sweep is not None:
            deadlines.append(self.next_sweep)
        if self.over_by:
            deadlines.append(min(self.over_by.values()))
        left = self.limits.seconds_left(time.time())
        if left is not None:
            deadlines.append(time.monotonic() + max(left, 0.0))
        timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        if not self.in_flight:
            if timeout is None:
                raise RunStalledError(
                    f"run {self.run_id} cannot progress: nothing is ready, running or "
                    f"waiting (status {state.status}, {len(state.steps)} steps known)"
                )
            time.sleep(timeout)
            return
        # Wakes at least every CANCEL_POLL seconds so that the next look reads a cancel
        # request while a long attempt (a sub-run's parent waiting on it) runs.
        timeout = CANCEL_POLL if timeout is None else min(timeout, CANCEL_POLL)
        done, _ = wait(list(self.in_flight), timeout=timeout, return_when=FIRST_COMPLETED)
        for future in done:
            dispatch = self.in_flight.pop(future)
            self.over_by.pop(future, None)
            # An unexpected error (storage down) stops the run here.
            self._settled(dispatch, future.result())

    def _abandon_ended(self, state: RunState, executor: DaemonThreadPool) -> None:
        """Stop waiting for attempts past their step timeout whose end the log has (the
        lease keeper recorded it, see :func:`~little_dist.runtime.execute_step_attempt`):
        their threads are stuck in calls that have not returned."""
        now = time.monotonic()
        for future, over_by in list(self.over_by.items()):
            if over_by > now or future.done():
                continue
            dispatch = self.in_flight[future]
            step = state.steps.get(dispatch.step_path)
            attempts = step.attempts if step is not None else []
            running = len(attempts) >= dispatch.attempt and (
                attempts[dispatch.attempt - 1].status == "running"
            )
            if running and now < over_by + self.lease_ttl:
                # Not ended yet: the lease keeper is about to (or, if it could not, its
                # lease expires and the sweep fails it).
                continue
            del self.in_flight[future], self.over_by[future]
            self.abandoned += 1
            executor.abandon(future)
            self._tell(
                f"step {dispatch.step_path} (attempt {dispatch.attempt}) ran past its "
                f"{self.timeout:g}s timeout in a call that has not returned; its thread "
                "is left behind and whatever it does now is discarded"
            )

    def _drain(self, executor: DaemonThreadPool) -> None:
        """Let in-flight attempts finish (they were told to stop); surface their errors."""
        while self.over_by:  # past their timeout, the ones stuck in a call are left
            self._abandon_ended(self._catch_up(), executor)
            pending = [f for f in self.over_by if not f.done()]
            if not pending:
                break
            soonest = min(self.over_by[f] for f in pending) - time.monotonic()
            wait(pending, timeout=max(self.sweep_interval, soonest))
        futures = list(self.in_flight)
        self.in_flight.clear()
        self.over_by.clear()
        for future in futures:
            future.result()
        for armed in self.left_running:
            # (past its timeout, one stuck in a call is left behind)
            left = None if armed.over_by is None else max(0.0, armed.over_by - time.monotonic())
            if not armed.returned.wait(left):
                self.abandoned += 1
