"""A worker process's runtime: the spine every delivered task walks.

:class:`WorkerRuntime` is what the Celery task bodies (:mod:`~little_dist.fleet.tasks`) run
on, built once per process: the world, the app registry, the version cache, the lease keeper,
the run cache. :meth:`WorkerRuntime.attempt` is the walk of one step the package docstring
tells (check, lease, catch up, run, commit), read top to bottom; the fast path
(:mod:`~little_dist.fleet.fastpath`) joins it at one seam: how the attempt is arranged, and
what follows its commit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.errors import LittleError
from little_dist.events import Event
from little_dist.fleet.dispatch import Advance
from little_dist.fleet.end_watch import EndWatch
from little_dist.fleet.fastpath import FastPath
from little_dist.fleet.fold_ahead import CommitAhead
from little_dist.fleet.run_cache import RunCache
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import schedule_occurrence
from little_dist.fleet.sub_runs import FleetSubRuns, with_fleet_sub_runs
from little_dist.fleet.versions import VersionCache
from little_dist.ids import InvalidIdError, validate_run_id
from little_dist.run_state import RUN_ENDED, RunState
from little_dist.runtime import AttemptOutcome, LeaseKeeper, execute_step_attempt
from little_dist.scheduling import RunContext, StepDispatch
from little_dist.scheduling.context import StepPathError, locate_step
from little_dist.scheduling.step_graph import plan_for
from little_dist.settings import Role, Settings
from little_dist.world.base import Lease, World, unique_holder
from little_dist.world.extras import extras_of
from little_dist.world.fleet_keys import step_lease_key
from little_dist.world.in_flight import while_in_flight

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.queue import TaskQueue
    from little_dist.fleet.shared_redis import SharedRedis
    from little_dist.fleet.worker_slots import FanoutWindow
    from little_dist.scheduling import DispatchKind

__all__ = ["WorkerRuntime"]

_log = logging.getLogger("little.worker")


class WorkerRuntime:
    """What task bodies use, built once per process: world, app registry, version cache.

    ``world`` and ``registry`` are opened lazily (after a prefork pool forks, in each child)
    unless given. ``queue`` is where fast-path dispatches are sent (a
    :class:`~little_dist.fleet.queue.TaskQueue`); set by
    :func:`register_tasks`. ``roles`` (the queues the worker consumes) are the attempts it
    may run as an eager continuation (none by default). ``window``: the fleet's cap on a
    fan-out's branches in flight (:mod:`little_dist.fleet.worker_slots`); by default built from the
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
        #: What this worker does beyond one attempt per task (see :mod:`~.fastpath`).
        self.fastpath = FastPath(self)
        #: Where its workflow tools start their sub-runs (on the fleet: the attempt suspends).
        self.sub_runs = FleetSubRuns(self)
        self._with_sub_runs: dict[int, tuple[Any, Any]] = {}
        self._quotas: Any = None
        self._quotas_made = False
        self._shared: SharedRedis | None = None
        self._shared_known = False
        self._looks: Executor | None = None
        self._end_watch: EndWatch | None = None

    @property
    def end_watch(self) -> EndWatch:
        """Tells this process's attempts to stop when their run ends (:mod:`~.end_watch`)."""
        world = self.world
        with self._lock:
            if self._end_watch is None:
                ends = extras_of(world).end_announcements
                self._end_watch = EndWatch(None if ends is None else ends.read_ends)
            return self._end_watch

    @property
    def world(self) -> World:
        with self._lock:
            if self._world is None:
                from little_dist.world.factory import world_from_settings

                self._world = world_from_settings(self.settings)
            return self._world

    @property
    def quotas(self) -> Any:
        """The provider quota limiter of this worker's model calls, on the fleet's Redis
        (:func:`~little_dist.harness.quota_limiters.fleet_limiter`; ``None``: no
        ``LITTLE_QUOTAS``)."""
        with self._lock:
            if not self._quotas_made:
                from little_dist.fleet.worker_slots import fleet_redis
                from little_dist.harness.quota_limiters import fleet_limiter

                # (the fleet's Redis only when there are quotas: a worker on a world of its
                # own, without LITTLE_QUOTAS, has no fleet Redis to ask for)
                if self.settings.quotas is not None:
                    self._quotas = fleet_limiter(self.settings, fleet_redis(self.settings))
                self._quotas_made = True
            return self._quotas

    @property
    def window(self) -> FanoutWindow | None:
        """The fleet's cap on a fan-out's branches in flight (see :mod:`~.worker_slots`)."""
        with self._lock:
            if self._window_from_settings:
                from little_dist.fleet.worker_slots import fanout_window

                self._window = fanout_window(self.settings)
                self._window_from_settings = False
            return self._window

    @property
    def shared_redis(self) -> SharedRedis | None:
        """The fleet when it lives on one Redis (see :mod:`~.shared_redis`): ``little.submit_run``
        then starts a run and sends its first tasks in one round trip. Found out once."""
        with self._lock:
            known = self._shared_known
        if known:
            return self._shared
        queue = self.queue
        if queue is None:
            return None
        from concurrent.futures import ThreadPoolExecutor

        from little_dist.fleet.shared_redis import shared_redis

        looks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="little-look")
        found = shared_redis(self.world, queue, self.settings, looks)
        with self._lock:
            if self._shared_known:  # (another thread found out meanwhile)
                looks.shutdown()
                return self._shared
            self._shared, self._shared_known = found, True
            self._looks = looks if found is not None else None
        if found is None:
            looks.shutdown()
        return found

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
        self.fastpath.spares.close()
        with self._lock:
            if self._end_watch is not None:
                self._end_watch.close()
                self._end_watch = None
            if self._keeper is not None:
                self._keeper.close()
                self._keeper = None
            if self._world is not None:
                self._world.close()
                self._world = None
            if self._window is not None:
                self._window.close()
            looks, self._looks = self._looks, None
            self._shared, self._shared_known = None, False
        if looks is not None:
            looks.shutdown()
        self.runs.clear()

    # -- task bodies -------------------------------------------------------------------------

    def execute(self, run_id: str, step_path: str, attempt: int, kind: DispatchKind) -> str:
        """One attempt of one step (:meth:`attempt`), then what the fast path kept for this
        slot (:meth:`~.fastpath.FastPath.run_kept`); the first attempt's outcome (the
        :class:`AttemptOutcome` value, or why nothing ran)."""
        try:
            validate_run_id(run_id)
        except InvalidIdError as error:
            _log.error("refused %s for %r: %s", kind, run_id, error)
            return "invalid"
        started = time.monotonic()
        outcome, kept = self.attempt(run_id, step_path, attempt, kind)
        if kept is not None:
            self.fastpath.run_kept(kept, started)
        return outcome

    def attempt(
        self,
        run_id: str,
        step_path: str,
        attempt: int,
        kind: DispatchKind,
        *,
        continued: Advance | None = None,
    ) -> tuple[str, Advance | None]:
        """One attempt, the spine's walk (see the package docstring): check the message,
        take the step lease, catch up, run the attempt, commit; its outcome, and the advance
        that kept a next attempt for this worker (``continued``: the one that kept this
        attempt, when it runs inline)."""
        tracker = self.runs.get(run_id)
        lease = continued.kept_lease if continued is not None else None
        if continued is None:
            admitted = self._admit(tracker, step_path, attempt, kind)
            if isinstance(admitted, str):
                return admitted, None
            lease = admitted
        ready = self._catch_up(tracker, step_path, attempt, kind, lease, inline=continued)
        if isinstance(ready, str):
            self.release(lease)
            return ready, None
        state, step_events, ctx, dispatch = ready
        # The one seam of the spine: how the fast path (when on) arranges this attempt and
        # what it does after the commit (advance the run, keep the next attempt).
        arranged = self.fastpath.arrange(tracker, ctx, step_path, lease, continued)
        last_recorded = 0

        def fold_recorded(events: Sequence[Event]) -> None:
            # What this attempt appends is folded as it is recorded, not read back.
            nonlocal last_recorded
            tracker.fold(events, own=True)
            if events:
                last_recorded = max(last_recorded, events[-1].sequence)

        capabilities = with_fleet_sub_runs(
            self.registry.capabilities_for(ctx.version),
            self.sub_runs,
            self._with_sub_runs,
            self.quotas,
        )
        # A chain's step, its next step run here: its commit's fold and the next decision
        # are made while the commit is on its way (little_dist.fleet.fold_ahead).
        ahead = (
            while_in_flight(CommitAhead(tracker, occurrences.attempt_ended(step_path, attempt)))
            if arranged.successor is not None and "]" not in step_path
            else contextlib.nullcontext()
        )
        with self.end_watch.watching(run_id) as ended, ahead:
            outcome = execute_step_attempt(
                self.world,
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
                timeout=capabilities.attempt_timeout(self.settings.step_timeout),
                continuation=arranged.continuation,
                cancel=ended,
            )
        how = " (inline)" if continued is not None else ""
        _log.info("%s %s %s#%d%s: %s", kind, run_id, step_path, attempt, how, outcome.value)
        committed = outcome.committed
        # The tracker folded the commit: if nothing else came in between, it is as current
        # as a read right after the commit would make it.
        current = tracker.last_sequence == last_recorded
        return outcome.value, arranged.next(committed=committed, current=current)

    def _admit(
        self, tracker: RunTracker, step_path: str, attempt: int, kind: DispatchKind
    ) -> Lease | str:
        """A delivered task's step lease, or why the task does nothing (its outcome)."""
        # A message names a step of the run's version, or it is junk (or forged): it gets no
        # lease key in Redis. The check needs the run's version: a tracker seeing the run for
        # the first time reads it here, before the lease.
        refused = self._refuse_path(tracker, kind, step_path, attempt)
        if refused is not None:
            return refused
        # A delivered task takes the step lease first, then catches up (other processes
        # append to the run too): whoever held the step before has ended, so the read has all
        # there is and the attempt need not read again; a duplicate delivery of a running
        # attempt stops here, without reading.
        lease = self.world.acquire_lease(
            step_lease_key(tracker.run_id, step_path),
            unique_holder(self.name),
            self.settings.lease_ttl,
        )
        if lease is None:
            _log.info("%s %s %s#%d: busy", kind, tracker.run_id, step_path, attempt)
            return AttemptOutcome.busy.value
        return lease

    def _catch_up(
        self,
        tracker: RunTracker,
        step_path: str,
        attempt: int,
        kind: DispatchKind,
        lease: Lease | None,
        *,
        inline: Advance | None,
    ) -> tuple[RunState, Sequence[Event], RunContext, StepDispatch] | str:
        """The run as the attempt needs it (its state, the step's earlier events, its
        context, the dispatch), or why the attempt does not run (its outcome; the caller
        releases the lease)."""
        run_id = tracker.run_id
        how = " (inline)" if inline is not None else ""
        # An inline attempt was just decided from this tracker, which holds everything its
        # input needs; whatever was appended since is read once the step lease is held.
        try:
            state, step_events = (
                tracker.step_view(step_path) if inline else tracker.catch_up_step(step_path)
            )
        except BaseException:
            # (storage unreachable: the task fails; the attempt is sent again once its
            # dispatch lease expires, and this lease must not keep it busy until then)
            self.release(lease)
            raise
        ctx = tracker.context
        if state.status in RUN_ENDED:
            self.runs.forget(run_id)
            _log.info("%s %s %s#%d%s: the run is over", kind, run_id, step_path, attempt, how)
            return AttemptOutcome.already_done.value
        if ctx is None:
            _log.warning("%s %s %s#%d: the run has not started", kind, run_id, step_path, attempt)
            return "not_started"
        try:
            step = locate_step(plan_for(ctx.version), step_path).step
        except StepPathError as error:
            _log.error("%s %s: %s", kind, run_id, error)
            return "invalid"
        dispatch = StepDispatch(
            run_id=run_id,
            step_path=step_path,
            step_id=step.id,
            attempt=attempt,
            role="fixer" if kind == "fix_step" else "worker",
            kind=kind,
            parent_run_id=ctx.parent_run_id,
        )
        if inline is None and not _sent_by_the_engine(ctx, state, step, step_events, dispatch):
            _log.warning(
                "%s %s %s#%d: no such attempt is due (a stale or forged message); ignored",
                kind,
                run_id,
                step_path,
                attempt,
            )
            return "not_due"
        return state, step_events, ctx, dispatch

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
                if state.status not in RUN_ENDED and not tracker.awaiting_plan:
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

    def release(self, lease: Lease | None) -> None:
        """Give back ``lease`` (best effort: it expires anyway)."""
        if lease is not None:
            with contextlib.suppress(LittleError):  # it expires anyway
                self.world.release_lease(lease)

    def queued_tasks(self, role: Role) -> int | None:
        """How many tasks wait in ``role``'s queue (``None``: unknown, e.g. no queue)."""
        return self.queue.depth(role) if self.queue is not None else None

    def plan(self, run_id: str) -> str:
        """``little.plan``: plan a submitted run, then start it (see :mod:`~.planning`)."""
        from little_dist.fleet.planning import plan

        return plan(self, run_id)

    def orchestrate(self, run_id: str) -> str:
        """Advance a run: decide, append, dispatch what is ready."""
        validate_run_id(run_id)
        advance = self.advance(self.runs.get(run_id), force=True)
        if advance is not None and advance.done:
            self.runs.forget(run_id)
            return "done"
        return "advanced"

    def submit(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        task_id: str | None = None,
    ) -> str:
        """``little.submit_run``: submit a run by workflow id or LWIR document; its run id, or
        :class:`~.refusals.SubmissionRefused` (see :mod:`~.submit_task`)."""
        from little_dist.fleet.submit_task import submit

        return submit(self, args, kwargs or {}, task_id=task_id)

    def advance(
        self,
        tracker: RunTracker,
        *,
        force: bool = False,
        keep: Callable[[StepDispatch], bool] | None = None,
        read: bool = True,
        held: Lease | None = None,
    ) -> Advance | None:
        """Look at the run (see :meth:`~.fastpath.FastPath.advance`): after a commit only on
        the fast path; ``force`` (``little.plan``, ``little.orchestrate``) whenever this
        worker can send tasks."""
        return self.fastpath.advance(tracker, force=force, keep=keep, read=read, held=held)


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
