"""One look at a run: fold what is new, decide, append, and send what became ready.

:func:`advance_run` is what the scheduler, a client that starts a run and a worker's fast
path all do to move a run on. Several of them may look at the same run at the same moment;
nothing here can make an attempt run twice: ``decide`` is pure and its events carry
deterministic occurrence ids (appending a decision twice records each fact once), and an
attempt's task is sent only under its dispatch lease (:mod:`~little_dist.fleet.sending`).

A worker's look may also *keep* attempts instead of sending them (``keep``): the next step of
a chain, the branches that refill the slots its commits freed. It decides with the claims of
its process (:class:`~little_dist.scheduling.Claims`: the refills of other processes' commits
are theirs, and ``decide`` leaves them out), leases the steps it keeps before their
``StepScheduled`` is appended, runs one itself and hands the others to threads of its process
(:class:`Advance`); see the package docstring for the walk of one step and the words these
docstrings use.

One look is a :class:`_Look`: its rounds of decide (:meth:`_Look.decide`), keep
(:meth:`_Look.keep`) and record (:meth:`_Look.record`), then :meth:`_Look.send` of what
became ready.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from little_dist.errors import RunEndedError
from little_dist.events import Event, EventInput
from little_dist.fleet.keeping import lease_kept
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import dispatch_plan, dispatch_won, schedule_occurrence
from little_dist.run_limits import deadline_cancel, stop_error
from little_dist.run_state import RUN_ENDED, RunState
from little_dist.scheduling import Claims, Decision, RunContext, StepDispatch, decide
from little_dist.settings import Settings
from little_dist.world.base import Lease, World

if TYPE_CHECKING:
    from little_dist.fleet.queue import TaskQueue

__all__ = ["Advance", "Keep", "KeptAttempt", "advance_run", "decision_of"]

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
        return self.state.status in RUN_ENDED


@dataclass(frozen=True)
class Keep:
    """What a worker's look may keep for its own process instead of sending (the fast path).

    ``accepts``: which ready attempts it may run (those of the worker's roles). ``want``:
    how many newly scheduled attempts it takes at most (leased in one round trip): the first
    becomes :attr:`Advance.kept`, the others :attr:`Advance.also`. ``defer``: when the
    decision may ride with the attempt kept (its :attr:`~little_dist.scheduling.Decision.rider`:
    it does nothing but schedule it, a chain's next step, or end branches and schedule it, a
    fan-out's refill), it is not appended but handed back in :attr:`Advance.deferred`, to ride
    with the attempt's first append (one round trip less per step; the step lease, taken
    first, keeps everyone else off the attempt meanwhile). ``held``: a step lease the caller
    took already (its commit took the lease of the step it expected next), used instead of
    an acquire if that step is kept.
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
        state = tracker.catch_up() if read else tracker.state()
        if past_deadline(world, tracker, state) or approvals_due(world, tracker, state):
            state = tracker.catch_up()
        if tracker.awaiting_plan and state.status not in RUN_ENDED:
            dispatch_plan(world, queue, settings, tracker.run_id, holder=holder)
            return Advance(state, None, (), 0)
        advance = _Look(world, queue, settings, tracker, holder, keep, state).run()
    except RunEndedError:
        # Another writer ended the run between this look's read and its append (a cancel,
        # another look): the log took nothing of the decision (its leases are released).
        return Advance(tracker.catch_up(), None, (), 0)
    if advance.decision is not None:
        tracker.note_held_back(advance.decision.held_back)
    return advance


def past_deadline(world: World, tracker: RunTracker, state: RunState) -> bool:
    """Record the run's cancel request once its deadline (``little.run.limits``, see
    :mod:`little_dist.run_limits`) has passed; whether it did. Every look does this (the
    sweeps look at every active run every few seconds), so a run whose deadline passes ends
    then, with or without a worker running its steps; one still waiting for its planner is
    ended here (its planner, if one comes, finds it over)."""
    if (
        tracker.cancel_requested
        or state.status in RUN_ENDED
        or not tracker.limits.passed(time.time())
    ):
        return False
    world.append(tracker.run_id, deadline_cancel(tracker.limits))
    if tracker.awaiting_plan:
        from little_dist.fleet.planning import end_unplanned

        end_unplanned(world, tracker.run_id, stop_error(tracker.limits))
    return True


def approvals_due(world: World, tracker: RunTracker, state: RunState) -> bool:
    """Record the default decision (the rule's ``onTimeout``) of every approval of the run
    past its deadline (:mod:`little_dist.approvals`); whether one was. Every look does this,
    as :func:`past_deadline` does the run's, so a deadline applies within a sweep of it."""
    if not tracker.approvals or state.status in RUN_ENDED:
        return False
    return tracker.approvals.apply(world, int(time.time() * 1000))


def decision_of(
    tracker: RunTracker,
    state: RunState,
    claims: Claims | None = None,
    *,
    context: RunContext | None = None,
) -> Decision | None:
    """The pure core's ``decide`` on the run ``tracker`` folded (``state``), with a
    worker's ``claims``; ``None`` before the run's context is known. The one place the
    fleet decides: every look (:func:`advance_run`), the first decision a submission sends
    with the run's start, a worker's look at one step it gave back, the decision a chain
    step's commit makes ahead (:mod:`~little_dist.fleet.fold_ahead`, which gives the
    ``context`` it read while it holds the tracker)."""
    ctx = context if context is not None else tracker.context
    if ctx is None:
        return None
    return decide(ctx, state) if claims is None else decide(ctx, state, claims)


@dataclass
class _Look:
    """One :func:`advance_run` under way: what it decided, kept and recorded so far."""

    world: World
    queue: TaskQueue
    settings: Settings
    tracker: RunTracker
    holder: str
    keeping: Keep | None
    state: RunState
    decision: Decision | None = None
    appended: int = 0
    #: The first attempt kept (:attr:`Advance.kept`) with its step lease, and whether it is
    #: ours alone; the others (:attr:`Advance.also`), each with the same.
    kept: tuple[StepDispatch, Lease] | None = None
    alone: bool = False
    others: list[tuple[StepDispatch, Lease]] = field(default_factory=list)
    others_alone: list[bool] = field(default_factory=list)
    #: The dispatch leases taken with the kept attempts' step leases.
    dispatch_leases: list[Lease] = field(default_factory=list)
    #: Branches this look leaves to the processes whose commits freed their slots (the
    #: claims' ``left``), in the order it left them.
    left: dict[str, None] = field(default_factory=dict)
    #: The attempts this look scheduled (a worker's look sends only those).
    decided: set[StepDispatch] = field(default_factory=set)
    #: Rounds decided again because another process took this look's refills; the refills
    #: the last round lost.
    retries: int = 0
    retry: int = 0
    #: Decided events to ride with the kept attempt's first append.
    deferred: tuple[EventInput, ...] = ()
    #: The sequence the last round's state was folded through when it decided.
    decided_through: int = 0

    def run(self) -> Advance:
        """Decide, keep and record until nothing new; then send what became ready."""
        try:
            for _ in range(_MAX_ROUNDS):
                if self.state.status in RUN_ENDED:
                    return self.advance()
                decision = self.decide()
                if decision is None:
                    return self.advance()
                leased_now = self.keep(decision)
                if not decision.events:
                    break
                if self.rides(decision, leased_now):
                    self.deferred, self.alone = decision.events, True
                    break
                if self.record(decision):
                    break
        except BaseException:
            self.release(unclaim=True)
            raise
        if self.decision is not None:
            # Recorded (or riding with the kept attempt): the commits folded by then are
            # looked at, and their threads may take the spares this look keeps.
            self.tracker.note_looked(self.decided_through)
        return self.send()

    def decide(self) -> Decision | None:
        """``decide`` on the state folded so far; a worker's look decides with its process's
        claims (what other processes' commits freed is theirs to refill)."""
        if self.keeping is None:
            decision = decision_of(self.tracker, self.state)
        else:
            claims = Claims(own_ends=self.tracker.own_ends(), left=frozenset(self.left))
            # (decided while this thread's commit was on its way, if it was: fold_ahead)
            decision = self.tracker.decided(self.state, claims)
            if decision is None:
                decision = decision_of(self.tracker, self.state, claims)
            if decision is not None:
                self.left.update(dict.fromkeys(decision.left))
                self.decided.update(decision.scheduled)
        if decision is not None:
            self.decision = decision
            self.decided_through = self.state.event_count
        return decision

    def keep(self, decision: Decision) -> bool:
        """Lease what ``keep`` takes of the attempts ``decision`` schedules, before their
        ``StepScheduled`` is appended (nobody can run them but this caller, even if a sweep
        sends their tasks); whether the first kept attempt came from this decision."""
        keeping = self.keeping
        have = (self.kept is not None) + len(self.others)
        if keeping is None or keeping.want <= have:
            return False
        leased, sending, lost = lease_kept(
            self.world,
            self.settings,
            self.tracker,
            decision,
            keeping.accepts,
            self.holder,
            keeping.held,
            keeping.want - have,
        )
        self.dispatch_leases += sending
        if lost and self.retries < _RETRIES_AFTER_LOSS:
            # Another process took refills this look chose for its own ends (rare: refills
            # go in lanes; a look without claims, or one that saw another window, chose
            # otherwise): record the decision now and decide again, taking as many of the
            # left branches as were lost.
            self.retries += 1
            self.retry = lost
        leased_now = False
        if leased and self.kept is None:
            self.kept, leased = leased[0], leased[1:]
            leased_now = True
        self.others += leased
        self.others_alone += [False] * len(leased)
        return leased_now

    def rides(self, decision: Decision, leased_now: bool) -> bool:
        """Whether ``decision`` rides with the attempt this round kept instead of being
        appended: asked for (``defer``), the decision's rider, and ours alone."""
        kept = self.kept
        return (
            self.keeping is not None
            and self.keeping.defer
            and leased_now
            and kept is not None
            # Token 1: the step's lease had never been held, so nobody has run any of its
            # attempts (a lease's tokens only grow, from 1); the attempt is ours alone.
            and kept[1].token == 1
            and not self.retry
            and decision.rider == kept[0]
        )

    def record(self, decision: Decision) -> bool:
        """Append ``decision`` and fold it; whether another round would decide nothing new."""
        tracker = self.tracker
        last = tracker.last_sequence
        decided_at = self.state.event_count
        # The decider acts on its own decision (next round, dispatch below): only the end of
        # the run needs the scheduler (it archives the run). (``done`` with events: they end
        # the run.)
        recorded = self.world.append_batch(
            tracker.run_id, list(decision.events), signal=decision.done
        )
        new = [event for event in recorded if event.sequence > last]
        self.appended += len(new)
        tracker.fold(recorded)
        # Folded contiguously: the tracker is as current as a read right after the append.
        contiguous = bool(recorded) and tracker.last_sequence >= max(e.sequence for e in recorded)
        settled = decision.last_round
        # A worker's look acts on its own process's commits (another thread's commit
        # meanwhile asks it to look again): what other processes appended in between is
        # theirs to act on, each looking after its own commit. So a decision of branch ends
        # and refills is not read past and decided again.
        mine_only = self.keeping is not None and settled and not self.retry
        self.state = tracker.state() if contiguous or mine_only else tracker.catch_up()
        self.note_alone(new)
        if self.retry:
            for path in list(self.left)[: self.retry]:
                del self.left[path]
            self.retry = 0
            return False
        # Nothing but schedules (and the start of a parallel step, whose branches the same
        # decision scheduled): the steps decided on are now in flight and settle nothing, so
        # deciding again would find nothing new.
        if not new or decision.in_flight_only:
            return True
        # Branch ends and the schedules they made room for, and nothing folded since the
        # decision but what it recorded (or only what is others' to act on): another round
        # would decide nothing of ours.
        return mine_only or (
            contiguous and tracker.last_sequence == decided_at + len(new) and settled
        )

    def note_alone(self, new: Sequence[Event]) -> None:
        """Which kept attempts are ours alone after an append that recorded ``new``.

        Ours alone only if nobody ever held the step's lease (token 1: a lease's tokens only
        grow, from 1) -- whoever appended its StepScheduled. A schedule that merely follows
        our last sequence may be a sweep's, whose worker may have run the attempt before we
        took the lease."""
        recorded = {event.occurrence_id for event in new}
        if self.kept is not None and not self.alone:
            dispatch, lease = self.kept
            self.alone = lease.token == 1 and schedule_occurrence(dispatch) in recorded
        self.others_alone = [
            mine or (lease.token == 1 and schedule_occurrence(dispatch) in recorded)
            for (dispatch, lease), mine in zip(self.others, self.others_alone, strict=True)
        ]

    def send(self) -> Advance:
        """Send the attempts waiting to start that this process has not offered lately.

        One lease round trip per attempt this process has not offered lately, not per
        pending attempt per look (a wide fan-out would otherwise cost O(branches) calls per
        commit). A worker's look offers only what it decided itself: what another process
        scheduled is that process's to run or send (it holds the dispatch lease when it
        keeps an attempt), and if it died first, the scheduler's sweep sends it. Other looks
        (the client's, the scheduler's) offer every attempt waiting to start.
        """
        decision, ctx, tracker = self.decision, self.tracker.context, self.tracker
        if decision is None or ctx is None or not decision.dispatch:
            return self.advance()
        waiting = decision.dispatch
        if self.keeping is not None:
            # (by path first: a path's str hash is cached, a dispatch's is computed, and a
            # wide fan-out's window is the whole of ``waiting``, of which few were decided)
            decided = self.decided
            paths = {d.step_path for d in decided}
            waiting = tuple(d for d in waiting if d.step_path in paths and d in decided)
        fresh = tracker.offers.claim(waiting, self.settings.dispatch_resend_after)
        if not fresh:
            return self.advance()
        narrowed = dataclasses.replace(decision, dispatch=tuple(fresh))
        keep = self.keeping.accepts if self.keeping is not None and self.kept is None else None
        try:
            sent, late = dispatch_won(
                self.world,
                self.queue,
                self.settings,
                ctx,
                self.state,
                narrowed,
                holder=self.holder,
                keep=keep,
            )
        except BaseException:
            tracker.offers.unclaim(fresh)
            self.release(unclaim=False)
            raise
        if self.kept is None and late is not None:
            return Advance(self.state, decision, tuple(sent), self.appended, late)
        return self.advance(tuple(sent))

    def release(self, *, unclaim: bool) -> None:
        """Give back what this look kept (it fails): the kept attempts' step leases (and,
        ``unclaim``, their offers: the next look sends them now) and the dispatch leases."""
        for dispatch, lease in ([self.kept] if self.kept is not None else []) + self.others:
            if unclaim:
                self.tracker.offers.unclaim([dispatch])
            self.world.release_lease(lease)
        for lease in self.dispatch_leases:
            self.world.release_lease(lease)

    def advance(self, sent: tuple[StepDispatch, ...] = ()) -> Advance:
        """What this look did, for its caller."""
        if self.kept is None:
            return Advance(self.state, self.decision, sent, self.appended)
        also = tuple(
            KeptAttempt(dispatch, lease, mine)
            for (dispatch, lease), mine in zip(self.others, self.others_alone, strict=True)
        )
        dispatch, lease = self.kept
        return Advance(
            self.state,
            self.decision,
            sent,
            self.appended,
            dispatch,
            self.alone,
            lease,
            self.deferred,
            also,
        )


#: Rounds a look decides again after another process took refills it chose.
_RETRIES_AFTER_LOSS: Final = 2
