"""What a fleet process keeps of one run: :class:`RunTracker`.

A tracker folds a run's log into its state and :class:`~little_dist.scheduling.RunContext`,
reading only what was appended since it last looked (and the last event it folded again, to
notice a log that went back). Its three parts each have one job: :attr:`RunTracker.advancing`
(:mod:`~.advancing`: which thread of the process advances the run),
:attr:`RunTracker.spares` (:mod:`~.spares`: attempts kept for threads about to ask) and
:attr:`RunTracker.offers` (:mod:`~.offers`: attempts offered lately). The scheduler keeps
one per run it follows, a worker one per run it works on
(:class:`~little_dist.fleet.run_cache.RunCache`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, cast

from little_dist.approvals.deadlines import APPROVAL_TYPES, ApprovalDeadlines
from little_dist.event_types.engine import (
    APPROVAL_REQUESTED,
    CALLBACK_EVENT_TYPE,
    CANCEL_EVENT_TYPE,
    LIMITS_EVENT_TYPE,
    SUBMITTED_EVENT_TYPE,
)
from little_dist.events import Event
from little_dist.fleet.advancing import Advancing
from little_dist.fleet.offers import Offers
from little_dist.fleet.spares import SpareAttempts
from little_dist.fleet.versions import BINDING_FIELD, VersionCache
from little_dist.run_limits import RunLimits, cancel_error
from little_dist.run_state import FOLDED_EVENT_TYPES, EventLike, RunState, RunStateBuilder
from little_dist.runtime import hydrate_events
from little_dist.scheduling import Claims, Decision, RunContext
from little_dist.world.base import UndecodedEvent, World

if TYPE_CHECKING:
    from little_dist.fleet.worker_slots import BacklogNotes, FanoutWindow

__all__ = ["BRANCH_END_TYPES", "EVENT_BYTES", "KEPT_EVENT_BYTES", "RunTracker", "branch_paths"]

_log = logging.getLogger("little.dispatch")

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

#: Event types whose payloads a tracker reads: the fold's, and the engine's own it acts on.
_TRACKED_TYPES: Final = FOLDED_EVENT_TYPES | {
    SUBMITTED_EVENT_TYPE,
    CANCEL_EVENT_TYPE,
    LIMITS_EVENT_TYPE,
    APPROVAL_REQUESTED,
    CALLBACK_EVENT_TYPE,
}
_by_sequence: Final = attrgetter("sequence")


def branch_paths(step_path: str) -> list[str]:
    """The branch paths a step path lies in: ``a[x].b[y].c`` -> ``a[x]``, ``a[x].b[y]``."""
    paths = []
    end = step_path.find("]")
    while end != -1:
        paths.append(step_path[: end + 1])
        end = step_path.find("]", end + 1)
    return paths


BRANCH_END_TYPES: Final = frozenset({"ParallelBranchCompleted", "ParallelBranchFailed"})

#: How long a branch another process completed may wait for that process to record its end
#: before this process's looks take it over (seconds). The committing process looks within
#: milliseconds of its commit; one that died, or whose look failed, would otherwise leave
#: the end (and its lane's refill) to the scheduler's sweep, seconds later. Taken over too
#: soon, the two only meet on the refill's step lease, which one of them gets.
ADOPT_AFTER_S: Final = 0.5


class RunTracker:
    """What this process keeps of one run: its folded state and :class:`RunContext`, brought
    up to date incrementally, and three parts with a job each: :attr:`advancing` (which
    thread advances it), :attr:`spares` (attempts kept for threads about to ask) and
    :attr:`offers` (attempts offered lately).

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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.world = world
        self._clock = clock
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
        self._version_id: str | None = None
        # The version's binding when its start carries one (little_dist.fleet.versions).
        self._version_binding: dict[str, Any] | None = None
        self._run_input: Any = None
        self._parent_run_id: str | None = None  # a sub-run's parent (RunStarted)
        self._inherited: Any = None  # what a sub-run inherits (RunStarted, as recorded)
        self._started = False
        self._submitted = False
        self._cancel_requested = False
        self._cancel_error: dict[str, Any] | None = None
        #: The run's limits as its log records them (:mod:`little_dist.run_limits`).
        self.limits = RunLimits()
        #: Its approvals a deadline may decide (:mod:`little_dist.approvals.deadlines`).
        self.approvals = ApprovalDeadlines(run_id)
        #: Where the run's end is POSTed (``little.run.callback``), if it says.
        self.callback_url: str | None = None
        self._context: RunContext | None = None
        #: Which thread of this process advances the run (see :mod:`~.advancing`).
        self.advancing = Advancing()
        #: Attempts a look kept for threads of this process that had not asked yet (the ones
        #: whose commits it folded; see :mod:`~.spares`).
        self.spares = SpareAttempts()
        #: Attempts this process offered lately (see :mod:`~.offers`).
        self.offers = Offers()
        # Recorded events past the first gap in what was folded, by sequence.
        self._ahead: dict[int, Event | UndecodedEvent] = {}
        # Branch paths (``fan[k]``) in which this process recorded a StepCompleted whose
        # branch end is not folded yet: their ends and refills are this process's (own_ends).
        self._own_ends: set[str] = set()
        # Branch paths in which a StepCompleted was folded whose branch end is not folded yet,
        # with when the last such was folded (this clock): another process's, once older
        # than ADOPT_AFTER_S, are adopted (own_ends).
        self._completing: dict[str, float] = {}
        # The last sequence a look of this process had folded when it decided (looked_past).
        self._looked_through = 0
        # (type, recordedAt) of the last event folded: the read after it checks the log
        # still holds it (see _read_new).
        self._last_mark: tuple[str, str] | None = None
        # What fold_ahead decided: (context, event count, claims, decision).
        self._predecided: tuple[RunContext, int, Claims, Decision] | None = None
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
    def cancel_error(self) -> dict[str, Any] | None:
        """The error its cancel request ends the run with (``None``: upstream's cancelled)."""
        return self._cancel_error

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
        self._predecided = None
        if self._step_events is not None:
            self._step_events = {}
        self._undecoded = []
        self._ahead.clear()
        self._completing.clear()
        # (own_ends stay: they say what this process committed, not what it folded; an end
        # folded again drops out as before, and one forgotten here would wait for a sweep)
        self._looked_through = 0
        self.offers.clear()
        self._version_id = None
        self._version_binding = None
        self._run_input = None
        self._parent_run_id = None
        self._inherited = None
        self._started = self._submitted = self._cancel_requested = False
        self._cancel_error = None
        self.limits = RunLimits()
        self.approvals = ApprovalDeadlines(self.run_id)
        self.callback_url = None
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

    def fold(self, events: Sequence[Event], *, own: bool = False) -> None:
        """Fold those of ``events`` that directly follow the folded ones (the rest is read
        again by the next catch-up). ``own``: this process's attempt appended them (its
        commits' branch ends are its own to refill, see :meth:`own_ends`)."""
        with self._lock:
            if self._broken:
                self._forget_folded()  # (these then wait past the gap for the next read)
            if own:
                for event in events:
                    if event.type == "StepCompleted":
                        path = event.payload.get("stepPath")
                        if isinstance(path, str) and "]" in path:
                            self._own_ends.update(branch_paths(path))
            self._fold_next(events)

    def fold_ahead(self, events: Sequence[Event]) -> tuple[RunContext, RunState, Claims] | None:
        """Fold ``events``, this thread's commit, while its append is on its way; what the
        look after it decides first on, ``(context, state, claims)``, when the fold leaves
        the tracker current (the caller decides and hands the decision to
        :meth:`note_decided`). The tracker stays held (other threads wait to read or fold
        it) until :meth:`settle` says whether the append recorded the events so; see
        :mod:`little_dist.fleet.fold_ahead`.

        Only for a commit no other thread's look depends on (a chain's step): the claims
        are a look's with this process's branch ends alone."""
        self._lock.acquire()
        self._predecided = None
        if self._broken:
            return None  # (the next catch-up reads everything again)
        try:
            self._fold_next(events)
        except Exception:
            self._broken = True  # (the view may be half updated: read again)
            _log.warning("run %s: folding a commit ahead failed", self.run_id, exc_info=True)
            return None
        ctx = self._context
        if ctx is None or self._builder.event_count != events[-1].sequence:
            return None
        return ctx, self._builder.snapshot(), Claims(own_ends=frozenset(self._own_ends))

    def note_decided(
        self, ctx: RunContext, state: RunState, claims: Claims, decision: Decision
    ) -> None:
        """Keep the decision made on what :meth:`fold_ahead` returned (by the thread that
        holds the tracker), for the look's :meth:`decided`."""
        self._predecided = (ctx, state.event_count, claims, decision)

    def settle(self, confirmed: bool) -> None:
        """End :meth:`fold_ahead`: ``confirmed`` when the append recorded exactly the events
        folded; otherwise what was folded ahead is dropped (the next catch-up reads the log
        again). Releases the tracker."""
        try:
            if not confirmed:
                self._broken = True
                self._predecided = None
        finally:
            self._lock.release()

    def decided(self, state: RunState, claims: Claims) -> Decision | None:
        """The decision :meth:`fold_ahead` made, if it was made on ``state`` (by its event
        count: one tracker's states of one count are the same) with ``claims`` and the
        current context; taken once."""
        with self._lock:
            found, self._predecided = self._predecided, None
        if found is None:
            return None
        ctx, count, made_with, decision = found
        if ctx is not self._context or count != state.event_count or made_with != claims:
            return None
        return decision

    def note_looked(self, through: int) -> None:
        """A look of this process decided on the log folded through sequence ``through``."""
        with self._lock:
            if through > self._looked_through:
                self._looked_through = through

    def looked_past(self, sequence: int) -> bool:
        """Whether a look of this process decided with the events up to ``sequence`` folded
        (a commit recorded through it was looked at: its branch end and refill decided)."""
        return self._looked_through >= sequence

    def own_ends(self) -> frozenset[str]:
        """The branches in which this process committed a step whose branch end is not folded
        yet: their ends and refills are this process's (``Claims.own_ends``; forgotten once
        the end is folded). With them, the branches in which another process's commit was
        folded :data:`ADOPT_AFTER_S` ago or more and whose end nobody has recorded since:
        adopted, in case that process will not look (it died, or its look failed)."""
        with self._lock:
            completing = self._completing
            # (oldest first: nothing to adopt unless the first is due)
            if not completing or next(iter(completing.values())) > self._clock() - ADOPT_AFTER_S:
                return frozenset(self._own_ends)
            due = self._clock() - ADOPT_AFTER_S
            adopted = [path for path, seen in completing.items() if seen <= due]
            return frozenset(self._own_ends.union(adopted))

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
        now: float | None = None
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
                parent = payload.get("parentRunId")
                self._parent_run_id = parent if isinstance(parent, str) else None
                self._inherited = payload.get("inherited")
                changed = True
            elif kind == "WorkflowVersionRegistered":
                binding = payload.get(BINDING_FIELD)
                self._version_binding = binding if isinstance(binding, dict) else None
            elif kind == SUBMITTED_EVENT_TYPE:
                self._submitted = True
            elif kind == CANCEL_EVENT_TYPE and not self._cancel_requested:
                self._cancel_requested = True
                self._cancel_error = cancel_error(payload)
                changed = True
            elif kind == CALLBACK_EVENT_TYPE:
                url = payload.get("url")
                self.callback_url = url if isinstance(url, str) else None
            elif kind == LIMITS_EVENT_TYPE and not self.limits:
                self.limits = RunLimits.from_payload(payload)
                changed = True
            elif kind in APPROVAL_TYPES:
                self.approvals.note(event, payload)
            elif kind == "StepCompleted":
                path = payload.get("stepPath")
                if isinstance(path, str) and "]" in path:
                    if now is None:
                        now = self._clock()
                    for branch in branch_paths(path):
                        self._completing.pop(branch, None)  # (kept oldest first)
                        self._completing[branch] = now
            elif kind in BRANCH_END_TYPES:
                ended = payload.get("branchPath")
                if isinstance(ended, str):
                    self._completing.pop(ended, None)
                    self._own_ends.discard(ended)
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
                    self._context,
                    cancel_requested=self._cancel_requested,
                    cancel_error=self._cancel_error,
                )
            return
        if not self._started or self._version_id is None:
            return
        if not self._version_id.startswith("wfver_"):
            return  # planning failed: RunStarted names no compiled version
        version = self.versions.get(self.world, self._version_id, self._version_binding)
        self._context = RunContext(
            version=version,
            run_input=self._run_input,
            run_id=self.run_id,
            max_branches_cap=self.max_branches_cap,
            max_in_flight=self._window.max_in_flight() if self._window is not None else None,
            cancel_requested=self._cancel_requested,
            cancel_error=self._cancel_error,
            default_max_attempts=self.limits.max_attempts or 1,
            parent_run_id=self._parent_run_id,
            inherited=self._inherited,
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
