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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist.errors import RunEndedError
from little_dist.events import RUN_END_EVENT_TYPES, SCHEDULE_EVENT_TYPES, Event, EventInput
from little_dist.fleet.run_tracker import BRANCH_END_TYPES, RunTracker
from little_dist.fleet.sending import (
    dispatch_lease_key,
    dispatch_plan,
    dispatch_won,
    schedule_occurrence,
)
from little_dist.run_state import RunState
from little_dist.runtime.dead_attempts import step_lease_key
from little_dist.scheduling import Decision, StepDispatch, decide
from little_dist.settings import Settings
from little_dist.world.base import Lease, LeaseRequest, World, unique_holder

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
    branches and schedule it (a fan-out's refill, see :func:`_rides_with_kept`), it is not
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
        if event.type in BRANCH_END_TYPES:
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
        if event.type in BRANCH_END_TYPES:
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
        if tracker.offers.claim([dispatch], settings.dispatch_resend_after):
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
        tracker.offers.unclaim(lost)
        for dispatch in lost:
            lease = dispatch_leases.pop(dispatch, None)
            if lease is not None:
                world.release_lease(lease)
    return won, [lease for lease in dispatch_leases.values() if lease is not None], len(lost)
