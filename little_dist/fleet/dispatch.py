"""One look at a run: fold what is new, decide, append, and send what became ready.

:func:`advance_run` is what the scheduler, a client that starts a run and a worker's fast
path all do to move a run on. Several of them may look at the same run at the same moment;
nothing here can make an attempt run twice: ``decide`` is pure and its events carry
deterministic occurrence ids (appending a decision twice records each fact once), and an
attempt's task is sent only under its dispatch lease (:mod:`~little_dist.fleet.sending`).

A worker's look may also *keep* attempts instead of sending them (``keep``): the next step of
a chain, the branches that refill the slots its commits freed. It leases their steps before
their ``StepScheduled`` is appended, runs one itself and hands the others to threads of its
process (:class:`Advance`); see the package docstring for the walk of one step and the words
these docstrings use.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from little_dist.errors import RunEndedError
from little_dist.events import RUN_END_EVENT_TYPES, SCHEDULE_EVENT_TYPES, EventInput
from little_dist.fleet.keeping import (
    lease_kept,
    leave_refills,
    only_schedules,
    rides_with_kept,
    schedules,
)
from little_dist.fleet.run_tracker import BRANCH_END_TYPES, RunTracker
from little_dist.fleet.sending import (
    dispatch_plan,
    dispatch_won,
    schedule_occurrence,
)
from little_dist.run_state import RunState
from little_dist.scheduling import Decision, StepDispatch, decide
from little_dist.settings import Settings
from little_dist.world.base import Lease, World

if TYPE_CHECKING:
    from little_dist.fleet.queue import TaskQueue

__all__ = ["Advance", "Keep", "KeptAttempt", "advance_run"]

# decide + append rounds per look at a run: decision steps are settled inline, each round
# may make the next one ready. Bounded so a bug cannot spin forever.
_MAX_ROUNDS: Final = 64


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
    #: (``Continuation(read_log=False)``).
    kept_alone: bool = False
    #: The step lease of ``kept`` when this call took it (the caller runs the attempt under
    #: it: ``execute_step_attempt(lease=...)``, or releases it before sending the task).
    kept_lease: Lease | None = None
    #: Decided events this call did not append (``advance_run(defer=True)``): the
    #: ``StepScheduled`` of ``kept``, which the caller records in the attempt's first append
    #: (``Continuation(preamble=...)``), or appends before sending the task.
    deferred: tuple[EventInput, ...] = ()
    #: More attempts ``keep`` took (``advance_run(want=...)``), each with its step lease
    #: and whether it is ours alone, like ``kept``: the caller hands them to other threads
    #: of its process, or sends them.
    also: tuple[KeptAttempt, ...] = ()

    @property
    def done(self) -> bool:
        """The run is over (RunCompleted/RunFailed recorded)."""
        return self.state.status in ("completed", "failed")


@dataclass(frozen=True)
class Keep:
    """What a worker's look may keep for its own process instead of sending (the fast path).

    ``accepts``: which ready attempts it may run (those of the worker's roles). ``want``:
    how many newly scheduled attempts it takes at most (leased in one round trip): the first
    becomes :attr:`Advance.kept`, the others :attr:`Advance.also`. ``defer``: when the
    decision does nothing but schedule the attempt kept (a chain's next step), or end
    branches and schedule it (a fan-out's refill, see :func:`rides_with_kept`), it is not
    appended but handed back in :attr:`Advance.deferred`, to ride with the attempt's first
    append (one round trip less per step; the step lease, taken first, keeps everyone else
    off the attempt meanwhile). ``held``: a step lease the caller took already (its commit
    took the lease of the step it expected next), used instead of an acquire if that step
    is kept.
    """

    accepts: Callable[[StepDispatch], bool]
    want: int = 1
    defer: bool = False
    held: Lease | None = None


def advance_run(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    tracker: RunTracker,
    *,
    holder: str = "dispatch",
    read: bool = True,
    keep: Keep | None = None,
) -> Advance:
    """Fold new events, decide and append until nothing new, then dispatch what is ready.

    Safe to call from any number of processes at once (see the module docstring). A run
    already over is only folded. A run submitted for planning and not started gets its
    ``little.plan`` task (re)sent under the lease :func:`dispatch_plan` takes.
    ``read=False`` starts from what the tracker holds (its caller just folded its own
    commit and knows nothing came in between). ``keep`` (a worker's fast path): attempts
    the caller runs in its own process instead of sending them (see :class:`Keep`). The
    branches the last decision held back under the tracker's window are reported
    (:meth:`RunTracker.note_held_back`).
    """
    try:
        advance = _advance_run(
            world,
            queue,
            settings,
            tracker,
            holder=holder,
            keep=keep.accepts if keep is not None else None,
            read=read,
            defer=keep.defer if keep is not None else False,
            held=keep.held if keep is not None else None,
            want=keep.want if keep is not None else 1,
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
                decision = leave_refills(decision, tracker, left)
                decided.update(
                    e.occurrence_id for e in decision.events if e.type == "StepScheduled"
                )
            leased_now = False
            have = (kept is not None) + len(others)
            if keep is not None and want > have:
                # The attempts to keep are leased before their StepScheduled is appended:
                # nobody can run them but this caller, even if a sweep sends their tasks.
                leased, sending, lost = lease_kept(
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
                if only_schedules(decision, kept[0]):
                    return Advance(
                        state, decision, (), appended, kept[0], True, kept[1], decision.events
                    )
                if rides_with_kept(decision, kept[0]):
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
                alone = kept[1].token == 1 and schedules(new, kept[0])
            others_alone = [
                mine or (lease.token == 1 and schedules(new, dispatch))
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
            tracker.offers.unclaim([dispatch])
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
    fresh = tracker.offers.claim(waiting, settings.dispatch_resend_after)
    if not fresh:
        return _advanced(state, decision, (), appended, kept, alone, also, deferred)
    narrowed = dataclasses.replace(decision, dispatch=tuple(fresh))
    try:
        sent, late = dispatch_won(
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
        tracker.offers.unclaim(fresh)
        for _, lease in ([kept] if kept is not None else []) + others:
            world.release_lease(lease)
        for lease in dispatch_leases:
            world.release_lease(lease)
        raise
    if kept is None and late is not None:
        return Advance(state, decision, tuple(sent), appended, late)
    return _advanced(state, decision, tuple(sent), appended, kept, alone, also, deferred)


#: A decision of nothing but these puts steps in flight and settles none: ``decide`` starts
#: a parallel step's attempt itself, and schedules its branches in the same call.
_IN_FLIGHT_TYPES: Final = SCHEDULE_EVENT_TYPES | {"StepAttemptStarted"}
#: Rounds a look decides again after another process took refills it chose.
_RETRIES_AFTER_LOSS: Final = 2
#: A decision of nothing but these leaves nothing for another round to decide: ``decide``
#: refills the slots of the branches it ends, and ends their group, in the same call.
_SETTLED_IN_ONE_ROUND: Final = SCHEDULE_EVENT_TYPES | BRANCH_END_TYPES


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
