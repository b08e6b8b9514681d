"""The fleet's Celery tasks. Arguments are ids only, so Flower shows what each task is.

==========================================================  ===============  =============
task                                                        queue (role)     body
==========================================================  ===============  =============
``little.execute_step(run_id, step_path, attempt)``         worker           one attempt
``little.fix_step(run_id, step_path, attempt)``             fixer            one fix attempt
``little.plan(run_id)``                                     planner          plan + start
``little.orchestrate(run_id)``                              orchestrator     advance a run
``little.submit_run(workflow_id, lwir, input, run_id)``     planner          submit a run
==========================================================  ===============  =============

A task body catches up the run's cached tracker (:class:`RunCache`: only the events appended
since this process last looked are read and folded), finds its WorkflowVersion (cached per
process) and the capabilities of its workflow (from the ``--app`` registry, by the LWIR's
``metadata.name``) and calls :func:`~little_dist.runtime.execute_step_attempt`, which
fences every write with the step lease: a task delivered twice finds the step busy or the
attempt over and does nothing. Nothing waits on another run while holding a worker slot.

Fast path: after a commit the worker advances the run itself
(:func:`~little_dist.fleet.dispatch.advance_run`: decide, append, send what became ready
under the dispatch leases), so a chain of steps does not wait for a scheduler round trip,
and runs one next step of its roles in the same slot (eager continuation, see
:meth:`WorkerRuntime.execute`). Its commit then does not signal the scheduler (which would
only find nothing new); the scheduler's sweep (every few seconds) covers a worker that died
between its commit and its look. Threads of one process that commit steps of one run at once
advance it once (:meth:`~little_dist.fleet.dispatch.RunTracker.begin_advance`).
``WorkerRuntime(fast_path=False)`` (``little worker --no-fast-path``) leaves all of it to
the scheduler, and every commit signals it.

``little.orchestrate`` resumes a run by advancing it (decide + dispatch): the engine's
orchestrator waits are suspensions recorded in the log, never a blocked slot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.errors import InvalidInputError, LittleError, StorageUnavailableError
from little_dist.events import Event, EventInput
from little_dist.fleet.dispatch import (
    PLAN_FAILED_EVENT_TYPE,
    SUBMITTED_EVENT_TYPE,
    TASK_EXECUTE_STEP,
    TASK_FIX_STEP,
    TASK_ORCHESTRATE,
    TASK_PLAN,
    TASK_SUBMIT_RUN,
    Advance,
    KeptAttempt,
    RunTracker,
    VersionCache,
    advance_run,
    schedule_occurrence,
    send_dispatch,
)
from little_dist.fleet.spares import SPARE_SECONDS, SpareSender
from little_dist.ids import InvalidIdError, validate_run_id
from little_dist.lru import LruCache
from little_dist.runtime import (
    AttemptOutcome,
    LeaseHeartbeat,
    LeaseKeeper,
    execute_step_attempt,
)
from little_dist.runtime.dead_attempts import step_lease_key
from little_dist.scheduling import StepDispatch, decide
from little_dist.scheduling.context import StepPathError, locate_step
from little_dist.scheduling.step_graph import next_in_chain, plan_for
from little_dist.settings import Role, Settings
from little_dist.world.base import Lease, LeaseRequest, World, run_lease_key, unique_holder

if TYPE_CHECKING:
    from celery import Celery

    from little_dist.compiler import WorkflowVersion
    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.queue import TaskQueue
    from little_dist.fleet.slots import FanoutWindow
    from little_dist.scheduling import DispatchKind

__all__ = ["TASK_NAMES", "RunCache", "WorkerRuntime", "register_tasks"]

TASK_NAMES = (TASK_EXECUTE_STEP, TASK_FIX_STEP, TASK_PLAN, TASK_ORCHESTRATE, TASK_SUBMIT_RUN)

_log = logging.getLogger("little.worker")

# Runs whose tracker a worker process keeps (each holds the run's folded state and its
# steps' raw events); a run evicted while still running is simply read from the log again.
_RUN_CACHE_SIZE = 256
# How long a thread that committed a step waits for the thread advancing the run to hand it
# an attempt (the advance takes milliseconds; this only bounds a stuck one).
_HANDOUT_WAIT_S = 0.25
# (version id, step path) -> the chain's next step, remembered per process.
_SUCCESSOR_CACHE_SIZE = 4096
_TERMINAL = ("completed", "failed")
#: Plan attempts of one run that may fail (without a cause that ends it at once) before the
#: run is failed.
PLAN_ATTEMPTS = 3


class WorkerRuntime:
    """What task bodies use, built once per process: world, app registry, version cache.

    ``world`` and ``registry`` are opened lazily (after a prefork pool forks, in each child)
    unless given. ``queue`` is where fast-path dispatches are sent (a
    :class:`~little_dist.fleet.queue.TaskQueue`); set by
    :func:`register_tasks`. ``roles`` (the queues the worker consumes) are the attempts it
    may run as an eager continuation (none by default). ``window``: the fleet's cap on a
    fan-out's branches in flight (:mod:`little_dist.fleet.slots`); by default built from the
    settings when the world is too (a runtime given its world gets none unless given one).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        world: World | None = None,
        registry: AppRegistry | None = None,
        fast_path: bool = True,
        roles: Iterable[str] = (),
        window: FanoutWindow | None = None,
    ) -> None:
        self.settings = settings
        self._window = window
        self._window_from_settings = window is None and world is None
        self.fast_path = fast_path
        #: The roles whose queues this worker consumes: the attempts it may continue with.
        self.roles = frozenset(roles)
        #: Set when the worker starts shutting down: no more eager continuation.
        self.stopping = threading.Event()
        self._on_shutdown: Callable[..., None] | None = None
        self._keeper: LeaseKeeper | None = None
        self._keeper_world: World | None = None
        self.versions = VersionCache(max_bytes=settings.version_cache_bytes)
        #: Where tasks go (set by :func:`register_tasks`: the Celery app, as a TaskQueue).
        self.queue: TaskQueue | None = None
        self._world = world
        self._registry = registry
        self._lock = threading.Lock()
        self.name = f"worker:{socket.gethostname()}:{os.getpid()}"
        self.runs = RunCache(self)
        self._successors: dict[tuple[str, str], str | None] = {}
        #: Sends the spare attempts no thread of this process took in time.
        self.spares = SpareSender(self._hand_off)
        # When a thread of this process last gave up its inline budget to the queue while
        # the queue seemed to hold only its own run's tasks (see :meth:`_yields`).
        self._last_yield = time.monotonic()

    @property
    def world(self) -> World:
        with self._lock:
            if self._world is None:
                from little_dist.world.factory import world_from_settings

                self._world = world_from_settings(self.settings)
            return self._world

    @property
    def window(self) -> FanoutWindow | None:
        """The fleet's cap on a fan-out's branches in flight (see :mod:`~.slots`)."""
        with self._lock:
            if self._window_from_settings:
                from little_dist.fleet.slots import fanout_window

                self._window = fanout_window(self.settings)
                self._window_from_settings = False
            return self._window

    @property
    def keeper(self) -> LeaseKeeper:
        """The one thread that renews the leases of this process's running attempts."""
        world = self.world
        with self._lock:
            if self._keeper is None or self._keeper_world is not world:
                self._keeper = LeaseKeeper(world)
                self._keeper_world = world
            return self._keeper

    @property
    def registry(self) -> AppRegistry:
        with self._lock:
            if self._registry is None:
                from little_dist.fleet.app_registry import load_registry

                self._registry = load_registry(self.settings.app)
            return self._registry

    def warm(self) -> None:
        """Open the world, the app registry and the lease keeper now, so the first task does
        not pay for them (a boto3 client alone takes a few hundred milliseconds)."""
        self.keeper  # noqa: B018 - opens the world too
        self.registry  # noqa: B018

    def close(self) -> None:
        self.spares.close()
        with self._lock:
            if self._keeper is not None:
                self._keeper.close()
                self._keeper = None
            if self._world is not None:
                self._world.close()
                self._world = None
            if self._window is not None:
                self._window.close()
        self.runs.clear()

    # -- task bodies -------------------------------------------------------------------------

    def execute(self, run_id: str, step_path: str, attempt: int, kind: DispatchKind) -> str:
        """One attempt of one step, then its eager continuation; the first attempt's outcome
        (the :class:`AttemptOutcome` value, or why nothing ran).

        Eager continuation: when the commit makes a next step of this worker's roles ready
        and this worker wins its step lease (taken before the step's ``StepScheduled`` is
        appended, see :func:`~little_dist.fleet.dispatch.advance_run`), it runs that attempt
        itself, in this slot,
        instead of sending it through the broker (no queue round trip between the steps of a
        chain), for at most ``worker_inline_steps`` steps and ``worker_inline_seconds`` per
        task; then, or once the worker is shutting down, the next attempt is sent to its
        queue as usual, so other runs get their turn (:meth:`_yields`: not when the queue
        holds nothing but this run's own waiting attempts). Other ready attempts are always
        sent, so a fan-out still spreads.
        """
        try:
            validate_run_id(run_id)
        except InvalidIdError as error:
            _log.error("refused %s for %r: %s", kind, run_id, error)
            return "invalid"
        started = time.monotonic()
        outcome, kept = self._attempt(run_id, step_path, attempt, kind)
        deadline = time.monotonic() + self.settings.worker_inline_seconds
        steps = 0
        while kept is not None:
            steps += 1
            now = time.monotonic()
            spent = steps > self.settings.worker_inline_steps or now > deadline
            over = now - started > self.settings.worker_inline_max_seconds
            if self.stopping.is_set() or over or (spent and self._yields(kept)):
                self._hand_off(kept)
                break
            if spent:
                # Nothing else waits for this slot: a new budget, not a broker round trip.
                deadline = time.monotonic() + self.settings.worker_inline_seconds
                steps = 1
            current = kept
            step = current.kept
            assert step is not None
            try:
                _, kept = self._attempt(
                    step.run_id, step.step_path, step.attempt, step.kind, continued=current
                )
            except Exception:
                # This task's own attempt is committed: the continuation goes back to the
                # queue (the worker that gets it finds it busy, done, or to be continued).
                _log.exception(
                    "%s %s %s#%d (inline) raised; sending it to the queue",
                    step.kind,
                    step.run_id,
                    step.step_path,
                    step.attempt,
                )
                self._hand_off(current)  # (releasing a lease already released is harmless)
                break
        return outcome

    def _yields(self, kept: Advance) -> bool:
        """Whether a slot whose inline budget ran out gives its next attempt (``kept``) to
        the queue: yes when the queue holds tasks beyond this run's attempts waiting to
        start (another run's, surely), or its length is unknown; no when it is empty (the
        slot would only take the same attempt back) or holds no more than those attempts
        (a wide fan-out's own window: yielding would only swap one branch for another, at
        the cost of a send and a delivery), except that one slot of this process yields
        per ``worker_inline_seconds`` anyway, in case another run's task hides among them.
        """
        dispatch = kept.kept
        if dispatch is None:
            return True
        queued = self.queued_tasks(dispatch.role)
        if queued is None:
            return True
        if queued == 0:
            return False
        decision = kept.decision
        waiting = (
            sum(
                1
                for other in decision.dispatch
                if other.run_id == dispatch.run_id and other.role == dispatch.role
            )
            if decision is not None
            else 0
        )
        if queued > waiting:
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._last_yield < self.settings.worker_inline_seconds:
                return False
            self._last_yield = now
        return True

    def queued_tasks(self, role: Role) -> int | None:
        """How many tasks wait in ``role``'s queue (``None``: unknown, e.g. no queue)."""
        return self.queue.depth(role) if self.queue is not None else None

    def _attempt(
        self,
        run_id: str,
        step_path: str,
        attempt: int,
        kind: DispatchKind,
        *,
        continued: Advance | None = None,
    ) -> tuple[str, Advance | None]:
        """One attempt; its outcome, and the advance that kept a next attempt for this
        worker (``continued``: the one that kept this attempt, when it runs inline)."""
        inline = continued is not None
        world = self.world
        tracker = self.runs.get(run_id)
        how = " (inline)" if inline else ""
        lease = continued.kept_lease if continued is not None else None
        if not inline:
            # A message names a step of the run's version, or it is junk (or forged): it
            # gets no lease key in Redis. The check needs the run's version: a tracker
            # seeing the run for the first time reads it here, before the lease.
            refused = self._refuse_path(tracker, kind, step_path, attempt)
            if refused is not None:
                return refused, None
            # A delivered task takes the step lease first, then catches up (other processes
            # append to the run too): whoever held the step before has ended, so the read
            # has all there is and the attempt need not read again; a duplicate delivery of
            # a running attempt stops here, without reading.
            lease = world.acquire_lease(
                step_lease_key(run_id, step_path),
                unique_holder(self.name),
                self.settings.lease_ttl,
            )
            if lease is None:
                _log.info("%s %s %s#%d: %s", kind, run_id, step_path, attempt, "busy")
                return AttemptOutcome.busy.value, None
        # An inline attempt was just decided from this tracker, which holds everything its
        # input needs; whatever was appended since is read once the step lease is held.
        try:
            state, step_events = (
                tracker.step_view(step_path) if inline else tracker.catch_up_step(step_path)
            )
        except BaseException:
            # (storage unreachable: the task fails; the attempt is sent again once its
            # dispatch lease expires, and this lease must not keep it busy until then)
            self._release(lease)
            raise
        ctx = tracker.context
        if state.status in _TERMINAL:
            self.runs.forget(run_id)
            _log.info("%s %s %s#%d%s: the run is over", kind, run_id, step_path, attempt, how)
            self._release(lease)
            return AttemptOutcome.already_done.value, None
        if ctx is None:
            _log.warning("%s %s %s#%d: the run has not started", kind, run_id, step_path, attempt)
            self._release(lease)
            return "not_started", None
        try:
            step = locate_step(plan_for(ctx.version), step_path).step
        except StepPathError as error:
            _log.error("%s %s: %s", kind, run_id, error)
            self._release(lease)
            return "invalid", None
        dispatch = StepDispatch(
            run_id=run_id,
            step_path=step_path,
            step_id=step.id,
            attempt=attempt,
            role="fixer" if kind == "fix_step" else "worker",
            kind=kind,
        )
        if not inline and not _sent_by_the_engine(ctx, state, step, step_events, dispatch):
            _log.warning(
                "%s %s %s#%d: no such attempt is due (a stale or forged message); ignored",
                kind,
                run_id,
                step_path,
                attempt,
            )
            self._release(lease)
            return "not_due", None
        last_recorded = 0
        # A chain's next step: its lease rides with this attempt's commit (the advance that
        # follows then keeps that step without a round trip of its own).
        successor = self._successor(ctx.version, step_path)
        next_lease = (
            LeaseRequest(
                step_lease_key(run_id, successor),
                unique_holder(self.name),
                self.settings.lease_ttl,
            )
            if successor is not None
            else None
        )
        taken: list[Lease] = []

        def fold_recorded(events: Sequence[Event]) -> None:
            # What this attempt appends is folded as it is recorded, not read back.
            nonlocal last_recorded
            tracker.fold(events, own=True)
            if events:
                last_recorded = max(last_recorded, events[-1].sequence)

        capabilities = self.registry.capabilities_for(ctx.version)
        outcome = execute_step_attempt(
            world,
            dispatch,
            version=ctx.version,
            capabilities=capabilities,
            lease_ttl=self.settings.lease_ttl,
            state=state,
            context=ctx,
            prior_events=step_events,
            holder=unique_holder(self.name),
            keeper=self.keeper,
            on_recorded=fold_recorded,
            # The fast path advances the run right after the commit: the scheduler need not
            # look too (its sweep covers a worker that dies in between).
            signal_commit=not self._fast,
            # Read under the step lease, or leased before it was scheduled (nobody else can
            # have run it): no second read.
            exclusive=continued.kept_alone if continued is not None else True,
            held_lease=lease,
            # The StepScheduled this worker decided for it rides with its first append.
            preamble=continued.deferred if continued is not None else (),
            next_lease=next_lease,
            on_next_lease=taken.append,
            timeout=capabilities.attempt_timeout(self.settings.step_timeout),
        )
        _log.info("%s %s %s#%d%s: %s", kind, run_id, step_path, attempt, how, outcome.value)
        held = taken[0] if taken else None
        if outcome not in (AttemptOutcome.completed, AttemptOutcome.failed):
            self._release(held)
            return outcome.value, None
        keep = self._keeps if self.settings.worker_inline_steps > 0 else None
        # The tracker folded the commit: if nothing else came in between, it is as current
        # as a read right after the commit would make it.
        current = tracker.last_sequence == last_recorded
        try:
            advance = self._advance(tracker, keep=keep, read=not current, held=held)
        except BaseException:
            self._release(held)
            raise
        if held is not None and (advance is None or advance.kept_lease is not held):
            self._release(held)  # the next step was not ours to run after all
            if successor is not None:
                self._send_unstarted(tracker, successor)
        if advance is not None and advance.done:
            self.runs.forget(run_id)
        if advance is None or advance.kept is None:
            return outcome.value, None
        return outcome.value, advance

    def _refuse_path(
        self, tracker: RunTracker, kind: str, step_path: str, attempt: int
    ) -> str | None:
        """Why a delivered task is refused before it touches Redis (``None``: it is not): its
        run is over or unknown, or its step path is not one of the run's version."""
        run_id = tracker.run_id
        if attempt < 1:
            _log.error("%s %s %s#%d: attempts count from 1", kind, run_id, step_path, attempt)
            return "invalid"
        ctx = tracker.context
        if ctx is None:
            state = tracker.catch_up()
            ctx = tracker.context
            if ctx is None:
                if state.status not in _TERMINAL and not tracker.awaiting_plan:
                    self.runs.forget(run_id)  # nothing to keep for a run id nobody started
                _log.warning(
                    "%s %s %s#%d: the run has not started", kind, run_id, step_path, attempt
                )
                return "not_started"
        try:
            locate_step(plan_for(ctx.version), step_path)
        except StepPathError as error:
            _log.error("%s %s: %s", kind, run_id, error)
            return "invalid"
        return None

    @property
    def _fast(self) -> bool:
        return self.fast_path and self.queue is not None

    def _successor(self, version: WorkflowVersion, step_path: str) -> str | None:
        """The step this worker will most likely run right after ``step_path`` commits: the
        one top-level step of its roles that needs exactly that step (a chain's next link);
        ``None`` when the fast path or the eager continuation is off, or there is none."""
        if not self._fast or self.settings.worker_inline_steps <= 0 or "worker" not in self.roles:
            return None
        key = (version.id, step_path)
        with self._lock:
            if key in self._successors:
                return self._successors[key]
        found = next_in_chain(plan_for(version), step_path)
        with self._lock:
            if len(self._successors) >= _SUCCESSOR_CACHE_SIZE:
                self._successors.clear()
            self._successors[key] = found
        return found

    def _send_unstarted(self, tracker: RunTracker, step_path: str) -> None:
        """After giving back the unused lease this thread's commit took on ``step_path``: if
        that step is scheduled and its attempt has not started, send its task.

        Whoever scheduled it meanwhile (another thread of this process advancing the run,
        another worker) found it leased, by us, and left it to us: without this it would
        wait for its dispatch lease to expire and a sweep. A second task for it finds the
        step busy or done.
        """
        if self.queue is None:
            return
        try:
            state = tracker.catch_up()
            ctx = tracker.context
            if ctx is None or state.status in _TERMINAL:
                return
            decision = decide(ctx, state)
            scheduling = {e.occurrence_id for e in decision.events if e.type == "StepScheduled"}
            for dispatch in decision.dispatch:
                if dispatch.step_path != step_path:
                    continue
                # (one this decision would schedule is not yet: the look deciding it sends it)
                if schedule_occurrence(dispatch) not in scheduling:
                    send_dispatch(self.queue, dispatch)
        except LittleError as error:
            _log.warning(
                "could not look at %s %s again: %s (the scheduler will)",
                tracker.run_id,
                step_path,
                error,
                exc_info=True,
            )

    def _release(self, lease: Lease | None) -> None:
        if lease is not None:
            with contextlib.suppress(LittleError):  # it expires anyway
                self.world.release_lease(lease)

    def _keeps(self, dispatch: StepDispatch) -> bool:
        """Whether this worker may run ``dispatch`` itself: an attempt of one of its roles."""
        return dispatch.role in self.roles

    def _hand_off(self, advance: Advance) -> None:
        """Send a kept attempt to its queue, freeing the step lease taken for it (best
        effort: if this fails, the scheduler's sweep sends it)."""
        dispatch = advance.kept
        if self.queue is None or dispatch is None:
            return
        try:
            if advance.deferred:  # scheduled in the log before its task goes out
                self.world.append_batch(dispatch.run_id, list(advance.deferred), signal=False)
            self._release(advance.kept_lease)
            send_dispatch(self.queue, dispatch)
        except Exception:
            _log.exception(
                "could not send %s %s#%d; the scheduler will",
                dispatch.run_id,
                dispatch.step_path,
                dispatch.attempt,
            )

    def plan(self, run_id: str) -> str:
        """Plan a submitted run with its workflow's planner, then start it.

        Planning that cannot succeed ends the run: a ``RunFailed`` naming the cause is
        recorded (``input_schema_error`` for an input the planned version refuses,
        ``planner_failed`` for a planner that fails for good or ``PLAN_ATTEMPTS`` times,
        ``internal`` for anything unexpected that happens that often). A failure that may
        pass (storage unreachable, a provider's rate limit) leaves the run submitted: the
        scheduler sends ``little.plan`` again after ``dispatch_resend_after``, as it does
        when a planner worker dies mid-plan.
        """
        validate_run_id(run_id)
        world = self.world
        events = world.list_events(run_id)
        tracker = RunTracker(
            world,
            run_id,
            versions=self.versions,
            max_branches_cap=self.settings.max_branches_cap,
            window=self.window,
        )
        tracker.fold(events)
        if any(event.type == "RunStarted" for event in events):
            self._advance(tracker, force=True)
            return "started"
        submitted = next((e for e in events if e.type == SUBMITTED_EVENT_TYPE), None)
        if submitted is None:
            _log.warning("plan %s: nothing was submitted under this run id", run_id)
            return "unknown_run"
        workflow_id = submitted.payload.get("workflowId")
        run_input = submitted.payload.get("input")
        definition = self.registry.get(workflow_id) if isinstance(workflow_id, str) else None
        if definition is None:
            _fail_unplanned(
                world,
                run_id,
                f"workflow {workflow_id!r} is not defined in the planner's app module "
                f"({', '.join(self.registry.modules) or 'no --app given'})",
            )
            return "unknown_workflow"
        lease = world.acquire_lease(
            run_lease_key(run_id, "plan"),
            unique_holder(self.name),
            self.settings.lease_ttl,
        )
        if lease is None:
            return "busy"  # another planner works on it
        heartbeat = LeaseHeartbeat(world, lease, self.settings.lease_ttl).start()
        try:
            try:
                started = self._plan_and_start(run_id, definition, run_input)
            except Exception as error:
                return self._planning_failed(run_id, events, error)
        finally:
            heartbeat.stop()
            with contextlib.suppress(LittleError):  # it expires anyway
                world.release_lease(heartbeat.lease)
        if not started:
            return "failed"  # the planner gave up and recorded RunFailed
        self._advance(tracker, force=True)
        return "started"

    def _plan_and_start(self, run_id: str, definition: Any, run_input: Any) -> bool:
        """Resolve the run's version (planning it if need be) and record its start; False
        when planning failed and recorded ``RunFailed`` itself."""
        from little_dist.local_runner import check_run_input
        from little_dist.planner import resolve_version

        world = self.world
        version = resolve_version(
            world,
            run_id,
            definition,
            run_input,
            capabilities=self.registry.capabilities_for_workflow(definition.id),
        )
        if version is None:
            return False
        check_run_input(version, run_input)
        world.append_batch(
            run_id,
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
                    payload={"workflowVersionId": version.id, "input": run_input},
                ),
            ],
        )
        return True

    def _planning_failed(self, run_id: str, events: Sequence[Event], error: Exception) -> str:
        """Record why planning ``run_id`` failed: ``RunFailed`` when it cannot succeed (or
        failed ``PLAN_ATTEMPTS`` times), else one ``little.run.plan_failed`` (the scheduler
        sends ``little.plan`` again later). Storage errors record nothing: the log may be
        unreachable, and the re-send covers them."""
        from little_dist.local_runner import RunInputError
        from little_dist.planner.harnesses import PlannerError

        if isinstance(error, StorageUnavailableError):
            _log.warning(
                "plan %s: storage unavailable (planning again later)", run_id, exc_info=True
            )
            return "retry"
        failures = 1 + sum(1 for event in events if event.type == PLAN_FAILED_EVENT_TYPE)
        if isinstance(error, RunInputError):
            name, cause, final = "RunInputError", "input_schema_error", True
        elif isinstance(error, PlannerError):
            name, cause, final = "PlannerError", "planner_failed", not _passing(error)
        elif isinstance(error, InvalidInputError):
            name, cause, final = type(error).__name__, "runtime_config_error", True
        else:
            name, cause, final = type(error).__name__, "internal", False
        message = f"planning failed: {error}" if str(error) else f"planning failed: {name}"
        _log.warning(
            "plan %s: %s (attempt %d of %d)",
            run_id,
            message,
            failures,
            PLAN_ATTEMPTS,
            exc_info=not isinstance(error, InvalidInputError | PlannerError),
        )
        if final or failures >= PLAN_ATTEMPTS:
            _fail_unplanned(self.world, run_id, message, name=name, cause=cause)
            return "failed"
        self.world.append(
            run_id,
            EventInput(
                type=PLAN_FAILED_EVENT_TYPE,
                occurrence_id=occurrences.plan_failed(failures),
                payload={"attempt": failures, "error": {"name": name, "message": message}},
            ),
        )
        return "retry"

    def orchestrate(self, run_id: str) -> str:
        """Advance a run: decide, append, dispatch what is ready."""
        validate_run_id(run_id)
        advance = self._advance(self.runs.get(run_id), force=True)
        if advance is not None and advance.done:
            self.runs.forget(run_id)
            return "done"
        return "advanced"

    def submit(
        self,
        workflow_id: str | None = None,
        lwir: dict[str, Any] | None = None,
        input: Any = None,
        run_id: str | None = None,
    ) -> str:
        """Submit a run of a registered workflow (by id) or of an LWIR document; its run id,
        or ``"refused"`` (logged in one line, nothing stored) for a submission over the input
        limits or naming capabilities its workflow does not register."""
        from little_dist.fleet.client import submit_run

        if (workflow_id is None) == (lwir is None):
            raise LittleError("little.submit_run takes exactly one of workflow_id and lwir")
        target: Any = lwir if lwir is not None else workflow_id
        try:
            return submit_run(
                self.world,
                target,
                input,
                run_id=run_id,
                queue=self.queue,
                settings=self.settings,
                registry=self.registry,
                holder=self.name,
                window=self.window,
            )
        except InvalidInputError as error:
            # The sender's bad input, not the worker's failure: one line, no traceback.
            _log.error("little.submit_run %s refused: %s", run_id or "(new run)", error)
            return "refused"

    def _advance(
        self,
        tracker: RunTracker,
        *,
        force: bool = False,
        keep: Callable[[StepDispatch], bool] | None = None,
        read: bool = True,
        held: Lease | None = None,
    ) -> Advance | None:
        """The fast path (``None`` when off or failed: failures are left to the scheduler).

        Threads of this process that commit steps of one run at once advance it once: a
        thread that finds another advancing the run leaves it to that one (which looks
        again when it is done) and gets ``None``.
        """
        if (not self.fast_path and not force) or self.queue is None:
            return None
        if keep is not None:
            if held is None and not self.stopping.is_set():
                # A look that folded this thread's commit may have kept its next attempt.
                spare = tracker.take_spare()
                if spare is not None:
                    return spare
            waiter = tracker.join_advance()
            if waiter is not None:
                # Another thread advances the run: it may hand this one an attempt it keeps
                # (a fan-out's next branch), which then runs here, without the broker.
                waiter.wait(_HANDOUT_WAIT_S)
                return tracker.leave(waiter)
        elif not tracker.begin_advance():
            return None
        kept: Advance | None = None
        try:
            while True:
                # This thread's next attempt (if it has none yet), and one for each thread
                # of this process waiting for one.
                # The threads whose commits this look folds are usually a moment away from
                # asking: up to a pool's worth of attempts are kept (the rest go out now).
                wanted = (
                    0
                    if keep is None
                    else max((kept is None) + tracker.waiting(), self.settings.worker_concurrency)
                )
                advance = advance_run(
                    self.world,
                    self.queue,
                    self.settings,
                    tracker,
                    holder=self.name,
                    keep=keep if wanted else None,
                    read=read,
                    defer=kept is None,
                    held=held if kept is None else None,
                    want=max(wanted, 1),
                )
                others = list(advance.also)
                if advance.kept is not None:
                    if kept is None:
                        kept = advance
                    elif advance.kept_lease is not None:
                        others.insert(
                            0, KeptAttempt(advance.kept, advance.kept_lease, advance.kept_alone)
                        )
                    else:
                        # Kept under its dispatch lease (it was scheduled before): this
                        # thread has its next attempt already, so the task goes out.
                        self._hand_off(dataclasses.replace(advance, also=()))
                if others:
                    self._hand_out(tracker, advance, others)
                read = True
                if advance.done or not tracker.end_advance():
                    break
                if kept is not None and kept.deferred:
                    # Looking again: the next decision must see the kept attempt scheduled.
                    tracker.fold(
                        self.world.append_batch(tracker.run_id, list(kept.deferred), signal=False)
                    )
                    kept = dataclasses.replace(kept, deferred=())
        except LittleError as error:
            tracker.end_advance(failed=True)
            if kept is not None:
                self._hand_off(kept)
            _log.warning(
                "fast path for %s: %s (the scheduler will catch up)",
                tracker.run_id,
                error,
                exc_info=True,
            )
            return None
        except BaseException:
            tracker.end_advance(failed=True)
            if kept is not None:
                self._release(kept.kept_lease)
            raise
        if advance.done:
            tracker.end_advance(failed=True)  # nothing more to look at
        if kept is None:
            return advance
        return dataclasses.replace(
            advance,
            kept=kept.kept,
            kept_alone=kept.kept_alone,
            kept_lease=kept.kept_lease,
            deferred=kept.deferred,
            also=(),
        )

    def _hand_out(self, tracker: RunTracker, advance: Advance, kept: list[KeptAttempt]) -> None:
        """Give attempts this look kept to threads of this process waiting for one; keep
        the rest as spares for the next threads that ask (sent to their queues if none
        does in time)."""
        attempts = [
            dataclasses.replace(
                advance,
                kept=item.dispatch,
                kept_alone=item.alone,
                kept_lease=item.lease,
                deferred=(),
                also=(),
            )
            for item in kept
        ]
        left = tracker.hand_out(attempts)
        if not left:
            return
        if self.stopping.is_set():
            for attempt in left:
                self._hand_off(attempt)
            return
        # Threads whose commits this look folded are usually a moment away from asking for
        # an attempt: the rest waits for them as spares (see little_dist.fleet.spares), and
        # goes to the broker if none asks in time.
        until = time.monotonic() + SPARE_SECONDS
        tracker.stash(left, until)
        self.spares.watch(tracker, until)


class RunCache:
    """The worker process's :class:`RunTracker` per run, most recently used first, bounded.

    Task bodies of one run (the thread pool runs several at once) share its tracker: it
    folds under its own lock and reads only the events after the last one folded, instead
    of reading and folding the whole log for every task. A tracker is only a cache: every
    use catches up with the log first, so events other processes appended are always seen.
    Finished runs are dropped; the least recently used run goes when the cache holds more
    than ``size`` runs or more than ``LITTLE_RUN_CACHE_BYTES`` of them (``max_bytes``,
    :attr:`RunTracker.approx_bytes`; never the run in hand).
    """

    def __init__(
        self, runtime: WorkerRuntime, size: int = _RUN_CACHE_SIZE, max_bytes: int | None = None
    ) -> None:
        self._runtime = runtime
        self._size = size
        self._trackers: LruCache[str, RunTracker] = LruCache(
            size,
            runtime.settings.run_cache_bytes if max_bytes is None else max_bytes,
            weigh=_tracker_bytes,
        )
        self._lock = threading.Lock()

    def get(self, run_id: str) -> RunTracker:
        """The run's tracker (created empty on first use; the caller catches it up)."""
        with self._lock:
            tracker = self._trackers.get(run_id)
            if tracker is not None:
                self._trackers.move_to_end(run_id)
                return tracker
        world = self._runtime.world  # outside our lock: may open the world
        window = self._runtime.window
        with self._lock:
            tracker = self._trackers.get(run_id)
            if tracker is None or tracker.world is not world:
                tracker = RunTracker(
                    world,
                    run_id,
                    versions=self._runtime.versions,
                    max_branches_cap=self._runtime.settings.max_branches_cap,
                    keep_step_events=True,
                    window=window,
                )
                self._trackers[run_id] = tracker
            # (the least recently used go past either bound: read from the log again if
            # they come back)
            self._trackers.move_to_end(run_id)
            return tracker

    def forget(self, run_id: str) -> None:
        """Drop the run's tracker (the run is over)."""
        with self._lock:
            self._trackers.pop(run_id, None)

    def clear(self) -> None:
        with self._lock:
            self._trackers.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._trackers)

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._trackers


def _tracker_bytes(tracker: RunTracker) -> int:
    return tracker.approx_bytes


def _sent_by_the_engine(
    ctx: Any, state: Any, step: Any, step_events: Sequence[Event], dispatch: StepDispatch
) -> bool:
    """Whether ``dispatch`` (a delivered task) is an attempt the engine sent: one that exists
    already (the attempt decides whether it is over), or the next one that is due (the first
    once its ``StepScheduled`` is in the log; a later one as the retry policy has it)."""
    from little_dist.scheduling.policy import admits

    view = state.steps.get(dispatch.step_path)
    return admits(
        step,
        view.attempts if view is not None else (),
        dispatch.attempt,
        dispatch.kind,
        scheduled=any(
            e.type == "StepScheduled" and e.occurrence_id == schedule_occurrence(dispatch)
            for e in step_events
        ),
        default_max_attempts=ctx.default_max_attempts,
        max_crash_retries=ctx.max_crash_retries,
    )


def _passing(error: Exception) -> bool:
    """Whether a planner error may pass on its own (its model call's error is retriable)."""
    from little_dist.harness.errors import model_error_from

    cause = error.__cause__
    if cause is None:
        return False  # a misbehaving harness: it will misbehave again
    return bool(model_error_from(cause, model="planner").envelope().get("retriable"))


def _fail_unplanned(
    world: World,
    run_id: str,
    message: str,
    *,
    name: str = "RuntimeConfigError",
    cause: str = "runtime_config_error",
) -> None:
    world.append_batch(
        run_id,
        [
            EventInput(
                type="RunStarted",
                occurrence_id=occurrences.RUN_START,
                payload={"workflowVersionId": "uncompiled"},
            ),
            EventInput(
                type="RunFailed",
                occurrence_id=occurrences.RUN_END,
                payload={
                    "workflowVersionId": "uncompiled",
                    "error": {
                        "name": name,
                        "message": message,
                        "causeCode": cause,
                        "retriable": False,
                    },
                },
            ),
        ],
    )


def register_tasks(app: Celery, runtime: WorkerRuntime) -> None:
    """Register the five tasks on ``app``, their bodies running on ``runtime``."""
    from celery.signals import worker_shutting_down

    from little_dist.fleet.queue import CeleryQueue

    runtime.queue = CeleryQueue(app, runtime.settings)

    def stop_continuing(**_: Any) -> None:
        runtime.stopping.set()
        runtime.spares.send_all()

    # Kept by the runtime (signals hold weak references): a shutting-down worker finishes
    # its running attempts but sends their continuations to the queue.
    runtime._on_shutdown = stop_continuing
    worker_shutting_down.connect(stop_continuing)

    @app.task(name=TASK_EXECUTE_STEP, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def execute_step(run_id: str, step_path: str, attempt: int) -> str:
        return runtime.execute(run_id, step_path, int(attempt), "execute_step")

    @app.task(name=TASK_FIX_STEP, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def fix_step(run_id: str, step_path: str, attempt: int) -> str:
        return runtime.execute(run_id, step_path, int(attempt), "fix_step")

    @app.task(name=TASK_PLAN, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def plan(run_id: str) -> str:
        return runtime.plan(run_id)

    @app.task(name=TASK_ORCHESTRATE, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def orchestrate(run_id: str) -> str:
        return runtime.orchestrate(run_id)

    @app.task(name=TASK_SUBMIT_RUN, ignore_result=True, shared=False)  # type: ignore[untyped-decorator]
    def submit_run(
        workflow_id: str | None = None,
        lwir: dict[str, Any] | None = None,
        input: Any = None,
        run_id: str | None = None,
    ) -> str:
        return runtime.submit(workflow_id=workflow_id, lwir=lwir, input=input, run_id=run_id)
