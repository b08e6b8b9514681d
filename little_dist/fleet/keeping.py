"""What a worker's look keeps for its own process: the leases of the attempts it runs itself.

A helper of :func:`~little_dist.fleet.dispatch.advance_run` for its ``keep``
(:class:`~little_dist.fleet.dispatch.Keep`), the fast path's part of a look:
:func:`lease_kept` leases the attempts a look keeps, with their dispatch leases, in one round
trip, before their ``StepScheduled`` is appended (nobody else can run them). What the look
leaves to other processes (their refills) and which attempt a decision may ride with are
decided by ``decide`` itself (:class:`~little_dist.scheduling.Claims`,
:attr:`~little_dist.scheduling.Decision.rider`).
"""

from __future__ import annotations

from collections.abc import Callable

from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import dispatch_lease_key
from little_dist.scheduling import Decision, StepDispatch
from little_dist.settings import Settings
from little_dist.world.base import Lease, LeaseRequest, World, unique_holder
from little_dist.world.fleet_keys import step_lease_key

__all__ = ["lease_kept"]


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
    # ``decision.dispatch`` lists every attempt waiting to start (a wide fan-out's whole
    # window): only the ones this decision schedules are candidates (the others' tasks were
    # sent, or are the sweep's to send).
    candidates = list(decision.scheduled)
    if not candidates:
        return [], [], 0
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
        if dispatch.not_before_ms is not None:
            continue  # not to run yet (a quota wait): its task is sent with the delay

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
