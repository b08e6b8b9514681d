"""The in-process runner's loop: one run, driven by the calling thread, its attempts on a
thread pool or inline (see :mod:`little_dist.local_runner`)."""

from __future__ import annotations

import dataclasses
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, Final

from little_dist import occurrences
from little_dist.compiler import WorkflowVersion
from little_dist.errors import LeaseLostError, LittleError, RunEndedError
from little_dist.event_types.engine import CANCEL_EVENT_TYPE
from little_dist.events import EventInput
from little_dist.local_runner.checks import RunnerBusyError, RunStalledError
from little_dist.local_runner.next_lease import NextLease
from little_dist.local_runner.run_view import RunView
from little_dist.pricing import PriceFallback
from little_dist.run_limits import deadline_cancel, requested_cancel
from little_dist.run_state import RUN_ENDED, RunState
from little_dist.runtime import (
    DEADLINE_GRACE,
    DEFAULT_STEP_TIMEOUT,
    AttemptOutcome,
    Capabilities,
    Continuation,
    LeaseHeartbeat,
    LeaseKeeper,
    execute_step_attempt,
    sweep_dead_attempts,
)
from little_dist.runtime.daemon_pool import DaemonThreadPool
from little_dist.scheduling import Decision, RunContext, StepDispatch, decide
from little_dist.world.base import Lease, World
from little_dist.world.extras import extras_of
from little_dist.world.fleet_keys import runner_lease_key
from little_dist.world.process_mark import marked

#: Lease TTL of the runner lock and of step attempts. Short enough that a killed
#: ``little run`` can be resumed within seconds; heartbeats renew every third of it.
DEFAULT_LEASE_TTL: Final = 15.0

#: Longest wait for an attempt before the loop reads the log again (a cancel request).
CANCEL_POLL: Final = 0.5


#: An inline attempt the calling thread watches: ``over_by`` (monotonic) when, past its step
#: timeout, the loop is taken over by a new thread (``None``: no timeout, never).
@dataclasses.dataclass(frozen=True, eq=False)
class _Armed:
    dispatch: StepDispatch
    over_by: float | None
    generation: int
    #: Set when the attempt's call returned (a loop that took over on a cancel waits for it).
    returned: threading.Event = dataclasses.field(default_factory=threading.Event)


def _held_for_a_while(lock: Lease, ttl: float) -> bool:
    """Whether the runner lease, as last renewed, still has more than a third of its
    ``ttl`` to run: renewed every third, it has unless this process stalled (paused past
    the TTL: another runner may have taken the run over and run its next step). A decision
    that rides with an attempt's append is not fenced by the runner lease: it rides only
    then; else it is appended on its own, where the fence refuses a stale runner and the
    attempt never starts."""
    return lock.expires_at - time.time() > ttl / 3


class _Superseded(Exception):
    """This loop thread's attempt overstayed: another thread took the loop over."""


class _Stopped(Exception):
    """The calling thread was interrupted: the loop stops."""


ProgressCallback = Callable[[RunState], None]
NoticeCallback = Callable[[str], None]


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
        context = RunContext(
            version=version,
            run_input=run_input,
            run_id=run_id,
            max_branches_cap=max_branches_cap,
        )
        own = f"runner:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.holder = marked(own)
        self.view = RunView(world, run_id, context, pricing_fallback)
        self.cancel = threading.Event()  # tells in-flight attempts to stop early
        self.keeper = LeaseKeeper(world)  # heartbeats every attempt's lease from one thread
        self.next_lease = NextLease(world, version, run_id, lease_ttl)
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
        self.view.fold_appended(
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
                self.next_lease.drop()
                self.messages.put(("error", error))
            return
        self.next_lease.drop()
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
        events = self.world.list_events(self.run_id, after=self.view.builder.event_count)
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
            state = self.view.catch_up(read=read or self.view.behind)
            read = self.view.behind = False
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
            decision = decide(self.view.context, state)
            fresh = self._fresh(decision)
            if len(fresh) != 1 or self.in_flight:
                self.next_lease.drop()  # (no attempt runs next on this thread)
            if self._rides(decision, fresh, heartbeat.lease):
                # A chain's next step: its schedule is recorded with its first append (one
                # write less per step), and folded from what the attempt hands over.
                self._inline(fresh[0], state, generation, decision.events)
                continue
            wrote = self._append(decision, lock)
            if wrote:
                state = self.view.builder.snapshot()
            if self._submit(fresh, executor, state, generation):
                continue
            if wrote and not decision.last_round:
                continue  # (what it recorded may let more run: decide on it)
            if decision.done:
                self.cancel.set()
                self._drain(executor)
                final = self.view.catch_up()
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
        if self.view.context.cancel_requested:
            return False
        if self.cancel_handle is not None and self.cancel_handle.is_set():
            request = requested_cancel(self.cancel_handle, "run_workflow")
        elif self.view.limits.passed(time.time()):
            request = deadline_cancel(self.view.limits)
        else:
            return False
        try:
            self.world.append(self.run_id, request, fence=lock.fence)
        except RunEndedError:
            return False  # (it ended meanwhile)
        return True

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
        return self.view.fold_appended(
            self.world.append_batch(self.run_id, decision.events, fence=lock.fence)
        )

    def _fresh(self, decision: Decision) -> list[StepDispatch]:
        """The decision's dispatches not started yet (nor waiting to be tried again), now
        marked started."""
        now = time.monotonic()
        fresh: list[StepDispatch] = []
        for dispatch in decision.dispatch:
            key = (dispatch.step_path, dispatch.attempt, dispatch.kind)
            if key in self.dispatched or self.retry_at.get(key, 0.0) > now:
                continue
            self.retry_at.pop(key, None)
            self.dispatched.add(key)
            fresh.append(dispatch)
        return fresh

    def _rides(self, decision: Decision, fresh: Sequence[StepDispatch], lock: Lease) -> bool:
        """Whether ``decision``'s events go with the first append of its one new attempt,
        run inline (:attr:`~little_dist.scheduling.Decision.rider`), instead of on their own.
        Fenced by that attempt's step lease rather than the runner's: only the loop holding
        the runner lease (``lock``, as last renewed) decides the run, so it rides only while
        that lease is surely held (:func:`_held_for_a_while`)."""
        return (
            bool(decision.events)
            and len(fresh) == 1
            and not self.in_flight
            and decision.rider == fresh[0]
            and _held_for_a_while(lock, self.lease_ttl)
        )

    def _submit(
        self,
        fresh: Sequence[StepDispatch],
        executor: DaemonThreadPool,
        state: RunState,
        generation: int,
    ) -> bool:
        """Start the decision's new dispatches (``fresh``, see :meth:`_fresh`); whether one
        ran to its end already.

        A lone dispatch with nothing else in flight (a chain of steps) runs on the loop's
        thread: handing it to the pool would only add two thread switches per step. The
        calling thread watches it (:meth:`_drive`): a call past its step timeout that does
        not return does not hold the run's loop. Several run on the pool (see :meth:`_wait`).
        """
        if len(fresh) == 1 and not self.in_flight:
            self._inline(fresh[0], state, generation)
            return True
        now = time.monotonic()
        for dispatch in fresh:
            future = executor.submit(self._attempt, dispatch, state)
            self.in_flight[future] = dispatch
            if self.timeout is not None:
                # The attempt's clock starts once it holds its lease: a little later.
                self.over_by[future] = now + self.timeout + DEADLINE_GRACE + self.sweep_interval
        return False

    def _inline(
        self,
        dispatch: StepDispatch,
        state: RunState,
        generation: int,
        preamble: Sequence[EventInput] = (),
    ) -> None:
        """Run ``dispatch`` on this thread, armed for the calling thread's watch; with
        ``preamble`` (the decision that scheduled it) recorded in its first append."""
        over_by = None
        if self.timeout is not None:
            over_by = time.monotonic() + self.timeout + DEADLINE_GRACE + self.sweep_interval
        armed = self.armed = _Armed(dispatch, over_by, generation)
        try:
            outcome = self._attempt(dispatch, state, preamble, generation)
        finally:
            armed.returned.set()
            with self.guard:
                superseded = self.generation != generation
                if self.armed is armed:
                    self.armed = None
            if superseded:
                raise _Superseded
        self._settled(dispatch, outcome)

    def _attempt(
        self,
        dispatch: StepDispatch,
        state: RunState,
        preamble: Sequence[EventInput] = (),
        generation: int | None = None,
    ) -> AttemptOutcome:
        """Run ``dispatch``; ``generation``: the loop running it on its own thread, whose
        commit takes a chain's next step lease (see :mod:`.next_lease`)."""
        # The runner holds the run's runner lease: nobody else runs its attempts, so an
        # attempt need not read the log again once it holds its step lease.
        if generation is not None:
            continuation = self.next_lease.continuation(generation, dispatch, preamble)
        else:
            continuation = Continuation(read_log=False, preamble=preamble)
        return execute_step_attempt(
            self.world,
            dispatch,
            version=self.version,
            capabilities=self.capabilities,
            lease_ttl=self.lease_ttl,
            state=state,
            context=self.view.context,
            prior_events=tuple(self.view.memo_events.get(dispatch.step_path, ())),
            cancel=self.cancel,
            keeper=self.keeper,
            on_recorded=self.view.handed_over,
            continuation=continuation,
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
        left = self.view.limits.seconds_left(time.time())
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
            self._abandon_ended(self.view.catch_up(), executor)
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
