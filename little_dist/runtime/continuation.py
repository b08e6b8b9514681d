"""What a caller arranged for a step attempt before running it: one value, not six keywords.

A plain attempt takes its step lease, reads the run's log and wakes the scheduler when it
commits (:data:`PLAIN`). Two callers know more and save round trips by saying so:

* the in-process runner holds the run's runner lease, so nobody else runs its attempts:
  ``Continuation(read_log=False)``;
* a fleet worker's fast path (:mod:`little_dist.fleet`) runs attempts its own look kept: it
  took the step lease already (``lease``), may have leased the step before scheduling it
  (nobody can have run it: ``read_log=False``), holds the ``StepScheduled`` it decided to
  record with the attempt's first append (``preamble``), wants the next step of a chain
  leased in the commit's round trip (``next_lease``, won lease to ``on_next_lease``), and
  advances the run itself after the commit (``signal=False``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from little_dist.events import EventInput
from little_dist.world.base import Lease, LeaseRequest

__all__ = ["PLAIN", "Continuation"]


@dataclass(frozen=True)
class Continuation:
    """How :func:`~little_dist.runtime.execute_step_attempt` runs one attempt; see the module
    docstring for who sets what.

    ``lease``: the step lease (``{run}:step:{path}``, for the attempt's TTL) the caller took;
    released like one the attempt takes. ``read_log``: whether the events appended after the
    caller's state are read once the lease is held (another worker may have run the attempt
    between the caller's read and its lease); false only when nobody else can run the run's
    attempts. ``preamble``: events recorded just before ``StepAttemptStarted``, in its first
    append. ``next_lease``: a lease to take in the round trip of a commit that completes the
    step; won, it goes to ``on_next_lease`` (the caller runs that step under it or releases
    it). ``signal``: whether the commit, and the first append that carries the preamble,
    wake the scheduler (see :meth:`~little_dist.world.base.World.append_batch`).
    """

    lease: Lease | None = None
    read_log: bool = True
    preamble: Sequence[EventInput] = ()
    next_lease: LeaseRequest | None = None
    on_next_lease: Callable[[Lease], None] | None = None
    signal: bool = True


#: A plain attempt: it takes its lease, reads the log and signals the scheduler.
PLAIN = Continuation()
