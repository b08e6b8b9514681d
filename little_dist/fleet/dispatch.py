"""Fold a run, decide, append, and send one task per ready attempt — once.

Shared by the scheduler (``little scheduler``) and the worker fast path (a worker that just
committed a step advances its run itself, so a chain of steps does not wait for a scheduler
round trip). Both may look at the same run at the same moment; nothing here can make an
attempt run twice:

* ``decide`` is pure and its events carry deterministic occurrence ids, so appending the
  same decision twice records each fact once;
* before the task of attempt ``n`` of ``path`` is sent, the sender takes the lease
  :func:`dispatch_lease_key` (``{run}:dispatch:{path}:{n}``) for
  ``settings.dispatch_resend_after`` seconds under a holder unique to the call, and only the
  one that got it sends. The lease is never released: while it lives nobody sends that
  attempt again. If the attempt has still not started when it expires (the message was lost,
  a broker restart), whoever looks at the run next sends it again;
* a task delivered twice finds the step lease held (``busy``) or the attempt over
  (``already_done``): :func:`~little_dist.runtime.execute_step_attempt` fences every write.

:class:`RunTracker` keeps one run's folded state and :class:`~little_dist.scheduling.RunContext`
and folds only new events; :func:`advance_run` is one "look at the run" (fold, decide, append
until nothing new, dispatch). :class:`VersionCache` keeps compiled versions (immutable) by id.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, cast

from little_dist import occurrences
from little_dist.compiler import WorkflowVersion
from little_dist.errors import RunEndedError
from little_dist.events import RUN_END_EVENT_TYPES, SCHEDULE_EVENT_TYPES, Event, EventInput
from little_dist.lru import LruCache
from little_dist.run_state import FOLDED_EVENT_TYPES, EventLike, RunState, RunStateBuilder
from little_dist.runtime import hydrate_events
from little_dist.runtime.dead_attempts import step_lease_key
from little_dist.scheduling import Decision, RunContext, StepDispatch, decide
from little_dist.settings import Settings
from little_dist.world.base import (
    Lease,
    LeaseRequest,
    UndecodedEvent,
    World,
    run_lease_key,
    unique_holder,
)

if TYPE_CHECKING:
    from little_dist.fleet.queue import TaskQueue
    from little_dist.fleet.slots import BacklogNotes, FanoutWindow

__all__ = [
    "CANCEL_EVENT_TYPE",
    "EVENT_BYTES",
    "KEPT_EVENT_BYTES",
    "PLAN_FAILED_EVENT_TYPE",
    "SUBMITTED_EVENT_TYPE",
    "TASK_EXECUTE_STEP",
    "TASK_FIX_STEP",
    "TASK_ORCHESTRATE",
    "TASK_PLAN",
    "TASK_SUBMIT_RUN",
    "Advance",
    "RunTracker",
    "VersionCache",
    "acquire_leases",
    "advance_run",
    "dispatch_lease_key",
    "dispatch_plan",
    "dispatch_ready",
    "schedule_occurrence",
    "send_dispatch",
    "task_name_for",
]

TASK_EXECUTE_STEP: Final = "little.execute_step"
TASK_FIX_STEP: Final = "little.fix_step"
TASK_PLAN: Final = "little.plan"
TASK_ORCHESTRATE: Final = "little.orchestrate"
TASK_SUBMIT_RUN: Final = "little.submit_run"

#: Engine event asking a run to stop (``Client.cancel``, ``little cancel``); occurrence
#: ``cancel``. ``decide`` then fails the run with causeCode ``cancelled``.
CANCEL_EVENT_TYPE: Final = "little.run.cancel_requested"
#: Engine event recording a submission that still has to be planned (``little.plan``):
#: ``{workflowId, input}``, occurrence ``submit``. Appended before ``RunStarted``.
SUBMITTED_EVENT_TYPE: Final = "little.run.submitted"
#: Engine event recording a ``little.plan`` that failed in a way that may pass (a provider's
#: rate limit, an unexpected error): ``{attempt, error}``, occurrence ``plan-failed:{n}``.
PLAN_FAILED_EVENT_TYPE: Final = "little.run.plan_failed"

# decide + append rounds per look at a run: decision steps are settled inline, each round
# may make the next one ready. Bounded so a bug cannot spin forever.
_MAX_ROUNDS: Final = 64
# Events a tracker keeps past a gap in its folded sequence, at most.
_AHEAD_LIMIT: Final = 20_000
#: What a :class:`RunTracker` holds per event folded, roughly (bytes; measured on a 2,000-event
#: chain and a 100-branch fan-out read from a world that decodes every read): its folded
#: state alone (a scheduler's) about 170 to 310; with the steps' events kept for the memo
#: (a worker's) about 2,900. Its :attr:`~RunTracker.approx_bytes` weighs it in the run
#: caches (``LITTLE_RUN_CACHE_BYTES``) from the count it knows anyway: a run whose steps
#: return large outputs weighs more than this says (an inline output is at most 64 KiB).
EVENT_BYTES: Final = 384
KEPT_EVENT_BYTES: Final = 3072

_log = logging.getLogger("little.dispatch")


def dispatch_lease_key(dispatch: StepDispatch) -> str:
    """The lease whose holder alone may send ``dispatch``'s task."""
    return run_lease_key(dispatch.run_id, f"dispatch:{dispatch.step_path}:{dispatch.attempt}")


def task_name_for(dispatch: StepDispatch) -> str:
    """``little.execute_step`` or ``little.fix_step``."""
    return TASK_FIX_STEP if dispatch.kind == "fix_step" else TASK_EXECUTE_STEP


def send_dispatch(queue: TaskQueue, dispatch: StepDispatch) -> None:
    """Send ``dispatch``'s task by name to its role's queue (ids only: no lease taken)."""
    queue.send(
        task_name_for(dispatch),
        (dispatch.run_id, dispatch.step_path, dispatch.attempt),
        dispatch.role,
    )


def dispatch_ready(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    ctx: RunContext,
    state: RunState,
    decision: Decision,
    *,
    holder: str = "dispatch",
) -> list[StepDispatch]:
    """Send the task of every attempt in ``decision.dispatch`` this call wins the lease for.

    ``decision`` must have been appended already (an attempt is sent only once its
    ``StepScheduled`` is in the log). Returns what was sent. ``holder`` names the sender in
    the lease (diagnostics); a unique suffix is added, so the same process does not re-send
    an attempt whose lease it still holds.
    """
    return _dispatch_won(world, queue, settings, ctx, state, decision, holder=holder)[0]


def _dispatch_won(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    ctx: RunContext,
    state: RunState,
    decision: Decision,
    *,
    holder: str,
    keep: Callable[[StepDispatch], bool] | None = None,
) -> tuple[list[StepDispatch], StepDispatch | None]:
    """:func:`dispatch_ready`, except that the first won attempt ``keep`` accepts is not
    sent but returned (with the others sent first): the caller runs it itself, under the
    dispatch lease it now holds, exactly as a worker would that got its task."""
    sent: list[StepDispatch] = []
    if not decision.dispatch or state.status in ("completed", "failed"):
        return sent, None
    me = unique_holder(holder)
    mine = [dispatch for dispatch in decision.dispatch if dispatch.run_id == ctx.run_id]
    leases = acquire_leases(
        world, [dispatch_lease_key(d) for d in mine], me, settings.dispatch_resend_after
    )
    won = [
        (dispatch, lease) for dispatch, lease in zip(mine, leases, strict=True) if lease is not None
    ]
    kept: StepDispatch | None = None
    if keep is not None:
        for index, (dispatch, _) in enumerate(won):
            if keep(dispatch):
                kept = dispatch
                del won[index]
                break
    for index, (dispatch, _) in enumerate(won):
        try:
            send_dispatch(queue, dispatch)
        except BaseException:
            # Not sent: let the next look at the run send these instead of waiting for
            # expiry.
            for _, unsent in won[index:]:
                world.release_lease(unsent)
            raise
        sent.append(dispatch)
    return sent, kept


def acquire_leases(
    world: World, keys: Sequence[str], holder: str, ttl_seconds: float
) -> list[Lease | None]:
    """:meth:`World.acquire_leases` of ``keys`` for one holder and TTL (one round trip on
    Redis), in order."""
    return world.acquire_leases([LeaseRequest(key, holder, ttl_seconds) for key in keys])


def dispatch_plan(
    world: World, queue: TaskQueue, settings: Settings, run_id: str, *, holder: str = "dispatch"
) -> bool:
    """Send ``little.plan(run_id)`` to the planner queue unless sent in the last
    ``dispatch_resend_after`` seconds (lease ``{run}:dispatch:plan``); whether it was sent."""
    lease = world.acquire_lease(
        run_lease_key(run_id, "dispatch:plan"),
        unique_holder(holder),
        settings.dispatch_resend_after,
    )
    if lease is None:
        return False
    try:
        queue.send(TASK_PLAN, (run_id,), "planner")
    except BaseException:
        world.release_lease(lease)
        raise
    return True


class VersionCache:
    """Compiled workflow versions by id (they are immutable), bounded by count and by the
    length of their canonical LWIR (``max_bytes``: ``LITTLE_VERSION_CACHE_BYTES``),
    thread-safe."""

    def __init__(self, size: int = 256, max_bytes: int | None = None) -> None:
        self._size = size
        self._versions: LruCache[str, WorkflowVersion] = LruCache(
            size, max_bytes, weigh=_version_bytes
        )
        self._lock = threading.Lock()

    def put(self, version: WorkflowVersion) -> None:
        """Remember a version the caller has in hand (no read of the world later)."""
        with self._lock:
            self._versions[version.id] = version

    def get(self, world: World, version_id: str) -> WorkflowVersion:
        with self._lock:
            found = self._versions.get(version_id)
            if found is not None:
                self._versions.move_to_end(version_id)
                return found
        version = WorkflowVersion.from_json(world.get_version(version_id))
        with self._lock:
            self._versions[version_id] = version
        return version

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)


def _version_bytes(version: WorkflowVersion) -> int:
    return len(version.canonical_json)


class Waiter(threading.Event):
    """A thread waiting for the advancing thread to hand it an attempt of the run."""

    def __init__(self) -> None:
        super().__init__()
        self.given: Advance | None = None


class RunTracker:
    """One run's folded state and :class:`RunContext`, brought up to date incrementally.

    :meth:`catch_up` reads only the events after the last one folded, and that one too: if
    the log no longer holds it (shorter than what was folded, or another event at its
    sequence), the log went back (Redis lost the tail of its AOF in a crash) and the
    tracker drops what it folded and folds the log again from the start. ``context`` is
    ``None`` until ``RunStarted`` is recorded (a run still being planned). ``window``: the
    fleet's cap on a parallel step's branches in flight (``RunContext.max_in_flight``,
    followed as workers come and go) and where the branches it holds back are reported.
    """

    def __init__(
        self,
        world: World,
        run_id: str,
        *,
        versions: VersionCache | None = None,
        max_branches_cap: int | None = None,
        keep_step_events: bool = False,
        window: FanoutWindow | None = None,
    ) -> None:
        self.world = world
        self.run_id = run_id
        self.versions = versions if versions is not None else VersionCache()
        self.max_branches_cap = max_branches_cap
        self._window = window
        self._notes: BacklogNotes | None = None
        self._keep_step_events = keep_step_events
        self._builder = RunStateBuilder(run_id)
        # Raw events by payload stepPath (the memo of a retried attempt), if asked for; those
        # read with a parsed payload only become events when their step asks for them.
        self._step_events: dict[str, list[Event | UndecodedEvent]] | None = (
            {} if keep_step_events else None
        )
        # Events read undecoded (types the fold does not read: harness traces), decoded into
        # _step_events only once a step that has started an attempt asks for its events.
        self._undecoded: list[UndecodedEvent] = []
        # A fold that raised (storage unreachable while hydrating an output or reading the
        # version) may have left the view half updated: the next catch-up starts over.
        self._broken = False
        # Attempts this process offered (path, attempt, kind) -> monotonic time: an attempt
        # is offered again (a lease round trip) only after dispatch_resend_after.
        self._offered: dict[tuple[str, int, str], float] = {}
        self._pruned_at = time.monotonic()
        self._version_id: str | None = None
        self._run_input: Any = None
        self._started = False
        self._submitted = False
        self._cancel_requested = False
        self._context: RunContext | None = None
        self._advancing = False
        self._look_again = False
        self._waiters: list[Waiter] = []
        # Attempts a look kept for threads of this process that had not asked yet (the
        # ones whose commits it folded), each with the monotonic time it goes to the broker.
        self._spares: list[tuple[Advance, float]] = []
        # Recorded events past the first gap in what was folded, by sequence.
        self._ahead: dict[int, Event | UndecodedEvent] = {}
        # Branch paths (``fan[k]``) in which this process recorded a StepCompleted whose
        # branch end is not folded yet: their refills are this process's (_leave_refills).
        self._own_ends: set[str] = set()
        # (type, recordedAt) of the last event folded: the read after it checks the log
        # still holds it (see _read_new).
        self._last_mark: tuple[str, str] | None = None
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()

    @property
    def last_sequence(self) -> int:
        """The sequence of the last event folded."""
        return self._builder.event_count

    @property
    def approx_bytes(self) -> int:
        """Roughly what this tracker holds (:data:`EVENT_BYTES` per event folded or held)."""
        per = KEPT_EVENT_BYTES if self._step_events is not None else EVENT_BYTES
        return (self._builder.event_count + len(self._ahead)) * per

    @property
    def context(self) -> RunContext | None:
        ctx = self._context
        if ctx is None or self._window is None:
            return ctx
        cap = self._window.max_in_flight()
        if cap == ctx.max_in_flight:
            return ctx
        with self._lock:
            # The fleet grew or shrank: decide from now on with its new size (a new context
            # identity, so decide's per-run caches are built again once).
            current = self._context
            if current is not None and current.max_in_flight != cap:
                self._context = dataclasses.replace(current, max_in_flight=cap)
            return self._context

    def note_held_back(self, held_back: int) -> None:
        """Report the branches a decision held back (``Decision.held_back``) to the fleet's
        backlog; nothing unless this tracker has a window and the run ever held some back."""
        if self._window is None:
            return
        notes = self._notes
        if notes is None:
            if not held_back:
                return
            with self._lock:
                if self._notes is None:
                    self._notes = self._window.notes_for(self.run_id)
                notes = self._notes
        notes.note(held_back)

    @property
    def cancel_requested(self) -> bool:
        return self._cancel_requested

    @property
    def awaiting_plan(self) -> bool:
        """Submitted for planning (``little.run.submitted``) and not started yet."""
        return self._submitted and not self._started

    def state(self) -> RunState:
        return self._builder.snapshot()

    def catch_up(self) -> RunState:
        """Fold the events recorded since the last call; the current state."""
        # One reader at a time reads what is new (threads of one run would otherwise read the
        # same events over and over); folds and snapshots do not wait for the read.
        with self._read_lock:
            events = self._read_new()
            with self._lock:
                self._fold_next(events)
                return self._builder.snapshot()

    def _read_new(self) -> list[Event | UndecodedEvent]:
        """The events after the last one folded, but for the ones held past a gap (this
        process's own appends, folded once the gap is filled); the ones whose payloads
        nothing here reads may come undecoded. A view a failed fold left broken is
        dropped first, so everything is read again."""
        with self._lock:
            if self._broken:
                self._forget_folded()
            after = self._builder.event_count
            held = frozenset(self._ahead) if self._ahead else frozenset()
            mark = self._last_mark
        if mark is None:
            return self.world.list_events_partly(
                self.run_id, after=after, decode=_TRACKED_TYPES, skip=held
            )
        # The last event folded is read again (one entry more in the same read): a log
        # that lost its tail no longer has it, or has another event at its sequence.
        read = self.world.list_events_partly(
            self.run_id, after=after - 1, decode=_TRACKED_TYPES, skip=held
        )
        first = read[0] if read else None
        if (
            first is not None
            and first.sequence == after
            and (first.type, first.recorded_at) == mark
        ):
            del read[0]
            return read
        _log.warning(
            "run %s: the log no longer holds event %d as folded; folding it again",
            self.run_id,
            after,
        )
        with self._lock:
            self._forget_folded()
        return self.world.list_events_partly(self.run_id, after=0, decode=_TRACKED_TYPES)

    def _forget_folded(self) -> None:
        """Drop everything folded from the log (under the lock), as a new tracker has none:
        the log went back, or a fold that raised left the view half updated."""
        self._builder = RunStateBuilder(self.run_id)
        if self._step_events is not None:
            self._step_events = {}
        self._undecoded = []
        self._ahead.clear()
        self._own_ends.clear()
        self._offered.clear()
        self._version_id = None
        self._run_input = None
        self._started = self._submitted = self._cancel_requested = False
        self._context = None
        self._last_mark = None
        self._broken = False

    def catch_up_step(self, step_path: str) -> tuple[RunState, Sequence[Event]]:
        """Like :meth:`catch_up`, plus the raw events of ``step_path`` folded so far (needs
        ``keep_step_events``), both as of the same sequence."""
        with self._read_lock:
            events = self._read_new()
            with self._lock:
                self._fold_next(events)
                return self._builder.snapshot(), self._kept_step_events(step_path)

    def begin_advance(self) -> bool:
        """Whether the calling thread may advance the run now. While another thread of this
        process advances it, that one is asked to look again when done, and this is False:
        16 threads committing branches of one fan-out need one decide, not 16."""
        with self._lock:
            if self._advancing:
                self._look_again = True
                return False
            self._advancing = True
            self._look_again = False
            return True

    def end_advance(self, *, failed: bool = False) -> bool:
        """Done advancing; True (still advancing) when a look was asked for meanwhile and the
        caller must advance again. After a failure the run is left to the next look. When
        the advancing is over, threads still waiting for a hand-out get nothing."""
        with self._lock:
            if self._look_again and not failed:
                self._look_again = False
                return True
            self._advancing = False
            self._look_again = False
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()
        return False

    def join_advance(self) -> Waiter | None:
        """:meth:`begin_advance` for a thread that could run another attempt of this run:
        ``None`` if it may advance the run now; else another thread is advancing it, which
        is asked to look again and may hand this one an attempt (:meth:`hand_out`): wait on
        the returned :class:`Waiter`, then :meth:`leave`."""
        with self._lock:
            if not self._advancing:
                self._advancing = True
                self._look_again = False
                return None
            self._look_again = True
            waiter = Waiter()
            self._waiters.append(waiter)
            return waiter

    def waiting(self) -> int:
        """How many threads wait for an attempt to be handed to them."""
        with self._lock:
            return len(self._waiters)

    def hand_out(self, attempts: Sequence[Advance]) -> list[Advance]:
        """Give ``attempts`` to waiting threads, first come first served; the ones left."""
        left = list(attempts)
        given: list[Waiter] = []
        with self._lock:
            while left and self._waiters:
                waiter = self._waiters.pop(0)
                waiter.given = left.pop(0)
                given.append(waiter)
        for waiter in given:
            waiter.set()
        return left

    def stash(self, attempts: Sequence[Advance], until: float) -> None:
        """Keep ``attempts`` (left over by :meth:`hand_out`) for the next threads of this
        process that ask (:meth:`take_spare`), until the monotonic time ``until``."""
        with self._lock:
            self._spares.extend((attempt, until) for attempt in attempts)

    def take_spare(self) -> Advance | None:
        """The oldest attempt :meth:`stash` keeps, now the caller's; ``None`` if none."""
        with self._lock:
            return self._spares.pop(0)[0] if self._spares else None

    def expired_spares(self, now: float | None = None) -> tuple[list[Advance], float | None]:
        """The stashed attempts whose time is up at ``now`` (``None``: all of them), no
        longer kept; and when the next of the others is up (``None``: none left)."""
        with self._lock:
            if now is None:
                expired, self._spares = [attempt for attempt, _ in self._spares], []
                return expired, None
            expired = [attempt for attempt, until in self._spares if until <= now]
            if expired:
                self._spares = [(a, until) for a, until in self._spares if until > now]
            return expired, min((until for _, until in self._spares), default=None)

    def leave(self, waiter: Waiter) -> Advance | None:
        """Stop waiting; what was handed to ``waiter``, if anything."""
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            return waiter.given

    def step_view(self, step_path: str) -> tuple[RunState, Sequence[Event]]:
        """:meth:`catch_up_step` without reading: the state and step events folded so far."""
        with self._lock:
            return self._builder.snapshot(), self._kept_step_events(step_path)

    def _kept_step_events(self, step_path: str) -> Sequence[Event]:
        """The step's events folded so far (under the lock). A step that never started an
        attempt has none but its schedule, which is always decoded; one that did may have
        traces among the undecoded events: those are decoded when the events are first
        looked at (a task that finds its attempt over never looks)."""
        if self._step_events is None:
            return []
        kept = self._step_events.get(step_path, [])
        if self._undecoded and any(e.type == "StepAttemptStarted" for e in kept):
            return _StepEventsAsOf(self, step_path, self._builder.event_count)
        return _decoded_in_place(kept)

    def _step_events_as_of(self, step_path: str, sequence: int) -> list[Event]:
        """The step's events up to ``sequence``, the undecoded ones decoded first."""
        with self._lock:
            if self._undecoded:
                self._decode_step_events()
            assert self._step_events is not None
            kept = _decoded_in_place(self._step_events.get(step_path, []))
            return [event for event in kept if event.sequence <= sequence]

    def _decode_step_events(self) -> None:
        """Decode the events read undecoded into the step-events index, in log order."""
        assert self._step_events is not None
        pending, self._undecoded = self._undecoded, []
        touched: set[str] = set()
        for item in pending:
            event = item.decode()
            path = event.payload.get("stepPath")
            if isinstance(path, str):
                self._step_events.setdefault(path, []).append(event)
                touched.add(path)
        for path in touched:
            self._step_events[path].sort(key=_by_sequence)

    def claim_offers(
        self, dispatches: Sequence[StepDispatch], resend_after: float
    ) -> list[StepDispatch]:
        """The dispatches this tracker has not offered in the last ``resend_after`` seconds,
        now marked offered."""
        now = time.monotonic()
        fresh: list[StepDispatch] = []
        with self._lock:
            offered = self._offered
            for dispatch in dispatches:
                key = (dispatch.step_path, dispatch.attempt, dispatch.kind)
                last = offered.get(key)
                if last is not None and now - last < resend_after:
                    continue
                offered[key] = now
                fresh.append(dispatch)
            # Forget attempts offered long ago (started ones are never asked about again).
            # Not by "absent from dispatches": a look with an older decision, on another
            # thread, would then offer again what a newer one had pruned. A scan of every
            # offer, so not on every call (a wide fan-out asks about one attempt at a time).
            if len(offered) > 64 and now - self._pruned_at >= resend_after / 4:
                self._pruned_at = now
                for stale in [k for k, last in offered.items() if now - last >= resend_after]:
                    del offered[stale]
        return fresh

    def unclaim_offers(self, dispatches: Sequence[StepDispatch]) -> None:
        """Forget that ``dispatches`` were offered (their send failed: offer them again)."""
        with self._lock:
            for dispatch in dispatches:
                self._offered.pop((dispatch.step_path, dispatch.attempt, dispatch.kind), None)

    def fold(self, events: Sequence[Event], *, own: bool = False) -> None:
        """Fold those of ``events`` that directly follow the folded ones (the rest is read
        again by the next catch-up). ``own``: this process's attempt appended them (its
        commits' branch ends are its own to refill, see :meth:`foreign_ends`)."""
        with self._lock:
            if self._broken:
                self._forget_folded()  # (these then wait past the gap for the next read)
            if own:
                for event in events:
                    if event.type == "StepCompleted":
                        path = event.payload.get("stepPath")
                        if isinstance(path, str) and "]" in path:
                            self._own_ends.update(_branch_paths(path))
            self._fold_next(events)

    def foreign_ends(self, branch_paths: Sequence[str]) -> set[str]:
        """Those of ``branch_paths`` (branches a decision records as ended) that another
        process's commit ended (this process's own are forgotten once their end is folded)."""
        with self._lock:
            own = self._own_ends
            return {path for path in branch_paths if path not in own}

    def _fold_next(self, events: Sequence[Event | UndecodedEvent]) -> None:
        """Fold the run of ``events`` that continues the folded sequence without a gap.

        ``events`` may be a read that overlaps what another thread folded meanwhile, or an
        append's answer, which lists already-recorded events (with their older sequences)
        beside the new ones and may skip what others appended in between.
        """
        count = self._builder.event_count
        # What lies past a gap is kept until the gap is filled: threads of one process
        # fold their appends' answers in whatever order they come back, and an answer
        # dropped for arriving early would have to be read again.
        ahead = self._ahead
        for event in events:
            if event.sequence > count:
                ahead[event.sequence] = event
        run: list[Event | UndecodedEvent] = []
        while (following := ahead.pop(count + len(run) + 1, None)) is not None:
            run.append(following)
        if len(ahead) > _AHEAD_LIMIT:
            ahead.clear()  # a gap nobody fills: the next read brings it all
        try:
            self._fold(run)
        except BaseException:
            self._broken = True
            raise

    def _fold(self, events: Sequence[Event | UndecodedEvent]) -> None:
        if not events:
            return
        changed = False
        foldable: list[EventLike] = []
        for event in events:
            payload: dict[str, Any]
            if event.__class__ is UndecodedEvent:
                item = event
                foldable.append(item.envelope())
                if item.payload is None:  # a type the fold only counts
                    if self._step_events is not None:
                        self._undecoded.append(item)
                    continue
                payload = item.payload
            else:
                payload = cast(Event, event).payload
                foldable.append(cast(Event, event))
            kind = event.type
            if kind == "RunStarted":
                self._started = True
                version_id = payload.get("workflowVersionId")
                self._version_id = version_id if isinstance(version_id, str) else None
                self._run_input = payload.get("input")
                changed = True
            elif kind == SUBMITTED_EVENT_TYPE:
                self._submitted = True
            elif kind == CANCEL_EVENT_TYPE and not self._cancel_requested:
                self._cancel_requested = True
                changed = True
            elif kind in _BRANCH_END_TYPES and self._own_ends:
                self._own_ends.discard(payload.get("branchPath"))
            if self._step_events is not None:
                path = payload.get("stepPath")
                if isinstance(path, str):
                    self._step_events.setdefault(path, []).append(event)
        self._builder.apply_all(hydrate_events(self.world, foldable))
        self._last_mark = (events[-1].type, events[-1].recorded_at)
        if changed:
            self._refresh_context()

    def _refresh_context(self) -> None:
        if self._context is not None:
            # Keep the context's identity (decide caches per-run work on it) unless the
            # cancel flag changed.
            if self._context.cancel_requested != self._cancel_requested:
                self._context = dataclasses.replace(
                    self._context, cancel_requested=self._cancel_requested
                )
            return
        if not self._started or self._version_id is None:
            return
        if not self._version_id.startswith("wfver_"):
            return  # planning failed: RunStarted names no compiled version
        version = self.versions.get(self.world, self._version_id)
        self._context = RunContext(
            version=version,
            run_input=self._run_input,
            run_id=self.run_id,
            max_branches_cap=self.max_branches_cap,
            max_in_flight=self._window.max_in_flight() if self._window is not None else None,
            cancel_requested=self._cancel_requested,
        )


def _decoded_in_place(kept: list[Event | UndecodedEvent]) -> list[Event]:
    """``kept`` as events: those read with a parsed payload are decoded now, once (the list
    keeps the events)."""
    for index, event in enumerate(kept):
        if event.__class__ is UndecodedEvent:
            kept[index] = event.decode()
    return list(cast(list[Event], kept))


class _StepEventsAsOf(Sequence[Event]):
    """A step's events as of one folded sequence, decoded on first use."""

    def __init__(self, tracker: RunTracker, step_path: str, sequence: int) -> None:
        self._tracker = tracker
        self._path = step_path
        self._sequence = sequence
        self._events: list[Event] | None = None

    def _all(self) -> list[Event]:
        if self._events is None:
            self._events = self._tracker._step_events_as_of(self._path, self._sequence)
        return self._events

    def __len__(self) -> int:
        return len(self._all())

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __iter__(self) -> Iterator[Event]:
        return iter(self._all())


@dataclass(frozen=True)
class KeptAttempt:
    """An attempt a look at the run kept for this process (see :attr:`Advance.also`)."""

    dispatch: StepDispatch
    lease: Lease
    alone: bool


@dataclass(frozen=True)
class Advance:
    """What one :func:`advance_run` did: the final state and decision, what it sent."""

    state: RunState
    decision: Decision | None
    sent: tuple[StepDispatch, ...]
    appended: int
    #: The attempt the caller's ``keep`` took instead of sending (it holds its dispatch
    #: lease and must run it, or send it with :func:`send_dispatch`).
    kept: StepDispatch | None = None
    #: ``kept`` was leased before its ``StepScheduled`` existed and this call appended that:
    #: nobody can have run the attempt, so the caller runs it without re-reading the log
    #: (``execute_step_attempt(exclusive=True)``).
    kept_alone: bool = False
    #: The step lease of ``kept`` when this call took it (the caller runs the attempt under
    #: it: ``execute_step_attempt(lease=...)``, or releases it before sending the task).
    kept_lease: Lease | None = None
    #: Decided events this call did not append (``advance_run(defer=True)``): the
    #: ``StepScheduled`` of ``kept``, which the caller records in the attempt's first append
    #: (``execute_step_attempt(preamble=...)``), or appends before sending the task.
    deferred: tuple[EventInput, ...] = ()
    #: More attempts ``keep`` took (``advance_run(want=...)``), each with its step lease
    #: and whether it is ours alone, like ``kept``: the caller hands them to other threads
    #: of its process, or sends them.
    also: tuple[KeptAttempt, ...] = ()

    @property
    def done(self) -> bool:
        """The run is over (RunCompleted/RunFailed recorded)."""
        return self.state.status in ("completed", "failed")


def advance_run(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    tracker: RunTracker,
    *,
    holder: str = "dispatch",
    keep: Callable[[StepDispatch], bool] | None = None,
    read: bool = True,
    defer: bool = False,
    held: Lease | None = None,
    want: int = 1,
) -> Advance:
    """Fold new events, decide and append until nothing new, then dispatch what is ready.

    Safe to call from any number of processes at once (see the module docstring). A run
    already over is only folded. A run submitted for planning and not started gets its
    ``little.plan`` task (re)sent under the lease :func:`dispatch_plan` takes. ``keep``
    (a worker's eager continuation) picks one ready attempt the caller runs itself instead
    of sending it: :attr:`Advance.kept`. ``read=False`` starts from what the tracker holds
    (its caller just folded its own commit and knows nothing came in between). ``defer``:
    when a decision does nothing but schedule the attempt ``keep`` took (a chain's next
    step), or end branches and schedule that attempt (a fan-out's refill, see
    :func:`_rides_with_kept`), it is not appended but handed back in
    :attr:`Advance.deferred`, to ride with the attempt's first append (one round trip less
    per step; the step lease, taken first, keeps everyone else off the attempt meanwhile).
    ``held``: a step lease the caller took already (its commit took the lease of the step
    it expected next): used, instead of an acquire, if ``keep`` takes that step. ``want``:
    how many newly scheduled attempts ``keep`` may take (leased in one round trip); the
    first is :attr:`Advance.kept`, the others :attr:`Advance.also`. The branches the last
    decision held back under the tracker's window are reported
    (:meth:`RunTracker.note_held_back`).
    """
    try:
        advance = _advance_run(
            world,
            queue,
            settings,
            tracker,
            holder=holder,
            keep=keep,
            read=read,
            defer=defer,
            held=held,
            want=want,
        )
    except RunEndedError:
        # Another writer ended the run between this look's read and its append (a cancel,
        # another look): the log took nothing of the decision (its leases are released).
        return Advance(tracker.catch_up(), None, (), 0)
    if advance.decision is not None:
        tracker.note_held_back(advance.decision.held_back)
    return advance


def _advance_run(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    tracker: RunTracker,
    *,
    holder: str,
    keep: Callable[[StepDispatch], bool] | None,
    read: bool,
    defer: bool,
    held: Lease | None,
    want: int,
) -> Advance:
    """:func:`advance_run` but for reporting the branches its decision held back."""
    state = tracker.catch_up() if read else tracker.state()
    if tracker.awaiting_plan and state.status not in ("completed", "failed"):
        dispatch_plan(world, queue, settings, tracker.run_id, holder=holder)
        return Advance(state, None, (), 0)
    decision: Decision | None = None
    appended = 0
    kept: tuple[StepDispatch, Lease] | None = None
    alone = False
    others: list[tuple[StepDispatch, Lease]] = []
    others_alone: list[bool] = []
    dispatch_leases: list[Lease] = []  # taken with the kept attempts' step leases
    # Branches this look leaves to the processes that freed them, in the order it left them.
    left: dict[str, None] = {}
    decided: set[str | None] = set()  # the schedules this look decided (worker looks)
    retries = 0  # rounds decided again because another process took this look's refills
    retry = 0  # the refills the last round lost
    deferred: tuple[EventInput, ...] = ()  # to ride with the kept attempt's first append
    try:
        for _ in range(_MAX_ROUNDS):
            ctx = tracker.context
            if ctx is None or state.status in ("completed", "failed"):
                return _advanced(state, decision, (), appended, kept, alone)
            decision = decide(ctx, state)
            if keep is not None:
                decision = _leave_refills(decision, tracker, left)
                decided.update(
                    e.occurrence_id for e in decision.events if e.type == "StepScheduled"
                )
            leased_now = False
            have = (kept is not None) + len(others)
            if keep is not None and want > have:
                # The attempts to keep are leased before their StepScheduled is appended:
                # nobody can run them but this caller, even if a sweep sends their tasks.
                leased, sending, lost = _lease_kept(
                    world, settings, tracker, decision, keep, holder, held, want - have
                )
                dispatch_leases += sending
                if lost and retries < _RETRIES_AFTER_LOSS:
                    # Another process took refills this look chose for its own ends (that
                    # look, on another view of the log, paired them with its ends, which this
                    # look left to it): record the decision now and decide again, taking as
                    # many of the left branches as were lost.
                    retries += 1
                    retry = lost
                if leased and kept is None:
                    kept, leased = leased[0], leased[1:]
                    leased_now = True
                others += leased
                others_alone += [False] * len(leased)
            if not decision.events:
                break
            if defer and leased_now and kept is not None and kept[1].token == 1 and not retry:
                # Token 1: the step's lease had never been held, so nobody has run any of
                # its attempts (a lease's tokens only grow, from 1); the attempt is ours alone.
                if _only_schedules(decision, kept[0]):
                    return Advance(
                        state, decision, (), appended, kept[0], True, kept[1], decision.events
                    )
                if _rides_with_kept(decision, kept[0]):
                    # (what else is waiting to start was scheduled before: sent below)
                    deferred, alone = tuple(decision.events), True
                    break
            last = tracker.last_sequence
            decided_at = state.event_count
            # The decider acts on its own decision (next round, dispatch below): only the end
            # of the run needs the scheduler (it archives the run).
            recorded = world.append_batch(
                tracker.run_id, list(decision.events), signal=_ends_run(decision)
            )
            new = [event for event in recorded if event.sequence > last]
            appended += len(new)
            tracker.fold(recorded)
            # Folded contiguously: the tracker is as current as a read right after the append.
            contiguous = bool(recorded) and tracker.last_sequence >= max(
                e.sequence for e in recorded
            )
            settled = all(e.type in _SETTLED_IN_ONE_ROUND for e in decision.events)
            # A worker's look acts on its own process's commits (another thread's commit
            # meanwhile asks it to look again): what other processes appended in between
            # is theirs to act on, each looking after its own commit. So a decision of branch
            # ends and refills is not read past and decided again.
            mine_only = keep is not None and settled and not retry
            state = tracker.state() if contiguous or mine_only else tracker.catch_up()
            if kept is not None and not alone:
                # Ours alone only if nobody ever held the step's lease (token 1: a lease's
                # tokens only grow, from 1) -- whoever appended its StepScheduled. A schedule
                # that merely follows our last sequence may be a sweep's, whose worker may
                # have run the attempt before we took the lease.
                alone = kept[1].token == 1 and _schedules(new, kept[0])
            others_alone = [
                mine or (lease.token == 1 and _schedules(new, dispatch))
                for (dispatch, lease), mine in zip(others, others_alone, strict=True)
            ]
            if retry:
                for path in list(left)[:retry]:
                    del left[path]
                retry = 0
                continue
            # Nothing but schedules (and the start of a parallel step, whose branches the
            # same decision scheduled): the steps decided on are now in flight and settle
            # nothing, so deciding again would find nothing new.
            if not new or all(e.type in _IN_FLIGHT_TYPES for e in decision.events):
                break
            if mine_only or (
                contiguous and tracker.last_sequence == decided_at + len(new) and settled
            ):
                # Branch ends and the schedules they made room for, and nothing folded since
                # the decision but what it recorded (or only what is others' to act on):
                # another round would decide nothing of ours.
                break
    except BaseException:
        for dispatch, lease in ([kept] if kept is not None else []) + others:
            # Not run after all: let the next look send it now.
            tracker.unclaim_offers([dispatch])
            world.release_lease(lease)
        for lease in dispatch_leases:
            world.release_lease(lease)
        raise
    also = tuple(
        KeptAttempt(dispatch, lease, mine)
        for (dispatch, lease), mine in zip(others, others_alone, strict=True)
    )
    ctx = tracker.context
    if decision is None or ctx is None or not decision.dispatch:
        return _advanced(state, decision, (), appended, kept, alone, also, deferred)
    # One lease round trip per attempt this process has not offered lately, not per pending
    # attempt per look (a wide fan-out would otherwise cost O(branches) calls per commit).
    # A worker's look offers only what it decided itself: what another process scheduled is
    # that process's to run or send (it holds the dispatch lease when it keeps an attempt),
    # and if it died first, the scheduler's sweep sends it. Other looks (the client's, the
    # scheduler's) offer every attempt waiting to start.
    waiting = decision.dispatch
    if keep is not None:
        waiting = tuple(d for d in waiting if schedule_occurrence(d) in decided)
    fresh = tracker.claim_offers(waiting, settings.dispatch_resend_after)
    if not fresh:
        return _advanced(state, decision, (), appended, kept, alone, also, deferred)
    narrowed = dataclasses.replace(decision, dispatch=tuple(fresh))
    try:
        sent, late = _dispatch_won(
            world,
            queue,
            settings,
            ctx,
            state,
            narrowed,
            holder=holder,
            keep=keep if kept is None else None,
        )
    except BaseException:
        tracker.unclaim_offers(fresh)
        for _, lease in ([kept] if kept is not None else []) + others:
            world.release_lease(lease)
        for lease in dispatch_leases:
            world.release_lease(lease)
        raise
    if kept is None and late is not None:
        return Advance(state, decision, tuple(sent), appended, late)
    return _advanced(state, decision, tuple(sent), appended, kept, alone, also, deferred)


#: Event types whose payloads a tracker reads: the fold's, and the engine's own it acts on.
_TRACKED_TYPES: Final = FOLDED_EVENT_TYPES | {SUBMITTED_EVENT_TYPE, CANCEL_EVENT_TYPE}
_by_sequence: Final = attrgetter("sequence")


def _branch_paths(step_path: str) -> list[str]:
    """The branch paths a step path lies in: ``a[x].b[y].c`` -> ``a[x]``, ``a[x].b[y]``."""
    paths = []
    end = step_path.find("]")
    while end != -1:
        paths.append(step_path[: end + 1])
        end = step_path.find("]", end + 1)
    return paths


_BRANCH_END_TYPES: Final = frozenset({"ParallelBranchCompleted", "ParallelBranchFailed"})
#: A decision of nothing but these puts steps in flight and settles none: ``decide`` starts
#: a parallel step's attempt itself, and schedules its branches in the same call.
_IN_FLIGHT_TYPES: Final = SCHEDULE_EVENT_TYPES | {"StepAttemptStarted"}
#: Rounds a look decides again after another process took refills it chose.
_RETRIES_AFTER_LOSS: Final = 2
#: A decision of nothing but these leaves nothing for another round to decide: ``decide``
#: refills the slots of the branches it ends, and ends their group, in the same call.
_SETTLED_IN_ONE_ROUND: Final = SCHEDULE_EVENT_TYPES | _BRANCH_END_TYPES


def _leave_refills(decision: Decision, tracker: RunTracker, left: dict[str, None]) -> Decision:
    """``decision`` without the new branches it schedules in the slots other processes'
    commits freed, and without the branches an earlier round of the same look left
    (``left``, updated).

    A worker that folds another process's commits would otherwise schedule their refills
    too and, having no thread free for them, send them through the broker, while the
    threads that committed them (about to look at the run themselves) find nothing left to
    run and go back to the queue. Left to them, each refill runs in the slot that freed
    it. A process that dies between its commit and its look leaves its refill to the next
    look that does not skip it: the scheduler's (the sweep's), which schedules everything.

    Which new branch refills which end: within a parallel group (and attempt), the i-th
    branch the decision schedules goes with the i-th end it records (both come in branch
    order); a branch beyond the ends fills room an earlier look left and is anyone's. Two
    processes deciding on the same log at once thus take different branches, each the
    ones paired with its own ends, instead of both taking the first ones.
    """
    ends: dict[tuple[Any, Any], list[str]] = {}
    for event in decision.events:
        if event.type in _BRANCH_END_TYPES:
            path = event.payload.get("branchPath")
            if isinstance(path, str):
                group = (event.payload.get("stepPath"), event.payload.get("attempt"))
                ends.setdefault(group, []).append(path)
    foreign = tracker.foreign_ends([p for paths in ends.values() for p in paths]) if ends else ()
    if not foreign and not left:
        return decision
    if foreign:
        position: dict[tuple[Any, Any], int] = {}
        for event in decision.events:
            if event.type != "ParallelBranchScheduled":
                continue
            path = event.payload.get("branchPath")
            if not isinstance(path, str) or path in left:
                continue
            group = (event.payload.get("stepPath"), event.payload.get("attempt"))
            index = position.get(group, 0)
            position[group] = index + 1
            paired = ends.get(group, ())
            if index < len(paired) and paired[index] in foreign:
                left[path] = None
    if not left:
        return decision

    def dropped(path: Any) -> bool:
        # ``path`` is a left branch or lies in one: the path itself, or a prefix of it that
        # ends before a ".", is in ``left`` (one set lookup per path segment).
        if not isinstance(path, str):
            return False
        if path in left:
            return True
        dot = path.find(".")
        while dot != -1:
            if path[:dot] in left:
                return True
            dot = path.find(".", dot + 1)
        return False

    events = tuple(
        event
        for event in decision.events
        if not (
            (event.type == "ParallelBranchScheduled" and dropped(event.payload.get("branchPath")))
            or (event.type == "StepScheduled" and dropped(event.payload.get("stepPath")))
        )
    )
    dispatch = tuple(d for d in decision.dispatch if not dropped(d.step_path))
    return dataclasses.replace(decision, events=events, dispatch=dispatch)


def schedule_occurrence(dispatch: StepDispatch) -> str:
    """The occurrence id of the ``StepScheduled`` that schedules ``dispatch`` (``decide``
    schedules first attempts: ``sched:{path}:1``)."""
    return occurrences.scheduled(dispatch.step_path, dispatch.attempt)


def _schedules(events: Sequence[Event], dispatch: StepDispatch) -> bool:
    """Whether ``events`` (new ones) hold the ``StepScheduled`` of ``dispatch``."""
    occurrence = schedule_occurrence(dispatch)
    return any(e.type == "StepScheduled" and e.occurrence_id == occurrence for e in events)


def _only_schedules(decision: Decision, dispatch: StepDispatch) -> bool:
    """Whether ``decision`` only schedules ``dispatch``: nothing else to record or send."""
    return all(
        other.run_id == dispatch.run_id
        and other.step_path == dispatch.step_path
        and other.attempt == dispatch.attempt
        for other in decision.dispatch
    ) and all(
        event.type in SCHEDULE_EVENT_TYPES and event.occurrence_id for event in decision.events
    )


def _rides_with_kept(decision: Decision, dispatch: StepDispatch) -> bool:
    """Whether ``decision`` may ride with the first append of the attempt ``dispatch`` (kept
    by the caller under a never-held step lease): it records branch ends and schedules
    ``dispatch`` (its ``StepScheduled`` and its branches' ``ParallelBranchScheduled``) and
    nothing else (any other attempt it lists was scheduled before: the look sends it as
    usual).

    A fan-out's steady state: a branch's commit ends its branch and refills the slot with
    the next branch, which this thread runs. Until that append, a look at the run decides
    the same events again (the same ids: whoever appends second records nothing) and finds
    the refill leased and offered (it neither keeps nor sends it).
    """
    occurrence = schedule_occurrence(dispatch)
    path = dispatch.step_path
    for event in decision.events:
        if not event.occurrence_id:
            return False
        if event.type in _BRANCH_END_TYPES:
            continue
        if event.type == "StepScheduled":
            if event.occurrence_id != occurrence:
                return False
        elif event.type == "ParallelBranchScheduled":
            branch = event.payload.get("branchPath")
            if not isinstance(branch, str) or not path.startswith(branch + "."):
                return False
        else:
            return False
    return True


def _ends_run(decision: Decision) -> bool:
    return any(event.type in RUN_END_EVENT_TYPES for event in decision.events)


def _advanced(
    state: RunState,
    decision: Decision | None,
    sent: tuple[StepDispatch, ...],
    appended: int,
    kept: tuple[StepDispatch, Lease] | None,
    alone: bool,
    also: tuple[KeptAttempt, ...] = (),
    deferred: tuple[EventInput, ...] = (),
) -> Advance:
    if kept is None:
        return Advance(state, decision, sent, appended)
    return Advance(state, decision, sent, appended, kept[0], alone, kept[1], deferred, also)


def _lease_kept(
    world: World,
    settings: Settings,
    tracker: RunTracker,
    decision: Decision,
    keep: Callable[[StepDispatch], bool],
    holder: str,
    held: Lease | None,
    want: int,
) -> tuple[list[tuple[StepDispatch, Lease]], list[Lease], int]:
    """Up to ``want`` attempts ``decision`` schedules that ``keep`` accepts, with their step
    leases where won (all taken in one round trip; each is marked offered, so the dispatch
    that follows does not send it); the dispatch leases taken; and how many candidates
    another holder's step lease kept from this call.

    The caller runs the attempts under their step leases at once; their dispatch leases,
    taken in the same round trip, keep everyone else from sending their tasks meanwhile (as
    though sent: a task is sent again only once the dispatch lease expires with the attempt
    not started). ``held`` is used for the attempt whose step lease it is.
    """
    scheduling = {e.occurrence_id for e in decision.events if e.type == "StepScheduled"}
    if not scheduling:
        return [], [], 0
    # ``decision.dispatch`` lists every attempt waiting to start (a wide fan-out's whole
    # window): only the ones this decision schedules are candidates.
    paths = {e.payload.get("stepPath") for e in decision.events if e.type == "StepScheduled"}
    candidates = [dispatch for dispatch in decision.dispatch if dispatch.step_path in paths]
    if held is not None:
        # The step whose lease the caller's commit took comes first: it is the attempt the
        # caller keeps (runs itself), never one handed on under a lease the caller releases.
        candidates.sort(key=lambda d: step_lease_key(d.run_id, d.step_path) != held.key)
    picked: list[StepDispatch] = []
    for dispatch in candidates:
        if len(picked) >= want:
            break
        if dispatch.run_id != tracker.run_id or not keep(dispatch):
            continue
        if schedule_occurrence(dispatch) not in scheduling:
            continue  # scheduled before: its task was sent (or is the sweep's to send)
        if tracker.claim_offers([dispatch], settings.dispatch_resend_after):
            picked.append(dispatch)  # (else this process offered it lately: someone has it)
    keys = [step_lease_key(dispatch.run_id, dispatch.step_path) for dispatch in picked]
    me = unique_holder(holder)
    missing = [key for key in keys if held is None or held.key != key]
    # With each step lease taken here, the attempt's dispatch lease (same round trip), as
    # if its task were sent now: another process's look at the run (or a sweep) must not
    # send a task for an attempt a thread of ours is about to run (it would only find the
    # step busy or done). (``held``, a chain's next step, is scheduled by its own first
    # append: nobody sees it waiting.)
    requests = [LeaseRequest(key, me, settings.lease_ttl) for key in missing] + [
        LeaseRequest(dispatch_lease_key(dispatch), me, settings.dispatch_resend_after)
        for dispatch, key in zip(picked, keys, strict=True)
        if key in missing
    ]
    acquired = world.acquire_leases(requests) if requests else []
    step_leases = dict(zip(missing, acquired[: len(missing)], strict=True))
    sending = [dispatch for dispatch, key in zip(picked, keys, strict=True) if key in missing]
    dispatch_leases = dict(zip(sending, acquired[len(missing) :], strict=True))
    won: list[tuple[StepDispatch, Lease]] = []
    lost: list[StepDispatch] = []
    for dispatch, key in zip(picked, keys, strict=True):
        lease = held if held is not None and held.key == key else step_leases[key]
        if lease is not None:
            won.append((dispatch, lease))
        else:
            lost.append(dispatch)
    if lost:
        # Someone else holds the step's lease: maybe a task running it, maybe a thread whose
        # commit took it and which may yet give it back unused. Claiming these would leave
        # them to that holder; instead they are offered as if this call had never looked,
        # so the dispatch that follows sends their tasks (a duplicate finds the step busy or
        # done: harmless; a step stranded behind a lease given back is not).
        tracker.unclaim_offers(lost)
        for dispatch in lost:
            lease = dispatch_leases.pop(dispatch, None)
            if lease is not None:
                world.release_lease(lease)
    return won, [lease for lease in dispatch_leases.values() if lease is not None], len(lost)
