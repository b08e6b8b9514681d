"""What a worker's look keeps for its own process, and what it leaves to others.

Helpers of :func:`~little_dist.fleet.dispatch.advance_run` for its ``keep``
(:class:`~little_dist.fleet.dispatch.Keep`), the fast path's part of a look:

* :func:`lease_kept` leases the attempts a look keeps, with their dispatch leases, in one
  round trip, before their ``StepScheduled`` is appended (nobody else can run them);
* :func:`leave_refills` leaves the refills other processes' commits made room for to those
  processes (each refill runs in the slot that freed it);
* :func:`only_schedules`, :func:`rides_with_kept` and :func:`schedules` tell when a
  decision may ride with the kept attempt's first append instead of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from little_dist.events import SCHEDULE_EVENT_TYPES, Event
from little_dist.fleet.run_tracker import BRANCH_END_TYPES, RunTracker
from little_dist.fleet.sending import dispatch_lease_key, schedule_occurrence
from little_dist.runtime.dead_attempts import step_lease_key
from little_dist.scheduling import Decision, StepDispatch
from little_dist.settings import Settings
from little_dist.world.base import Lease, LeaseRequest, World, unique_holder

__all__ = ["lease_kept", "leave_refills", "only_schedules", "rides_with_kept", "schedules"]


def leave_refills(decision: Decision, tracker: RunTracker, left: dict[str, None]) -> Decision:
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


def schedules(events: Sequence[Event], dispatch: StepDispatch) -> bool:
    """Whether ``events`` (new ones) hold the ``StepScheduled`` of ``dispatch``."""
    occurrence = schedule_occurrence(dispatch)
    return any(e.type == "StepScheduled" and e.occurrence_id == occurrence for e in events)


def only_schedules(decision: Decision, dispatch: StepDispatch) -> bool:
    """Whether ``decision`` only schedules ``dispatch``: nothing else to record or send."""
    return all(
        other.run_id == dispatch.run_id
        and other.step_path == dispatch.step_path
        and other.attempt == dispatch.attempt
        for other in decision.dispatch
    ) and all(
        event.type in SCHEDULE_EVENT_TYPES and event.occurrence_id for event in decision.events
    )


def rides_with_kept(decision: Decision, dispatch: StepDispatch) -> bool:
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


def lease_kept(
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
