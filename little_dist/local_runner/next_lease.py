"""The step lease a chain's commit takes for the step after it, until that step runs.

An attempt of a chain's link (``next_in_chain``: the one top-level step that needs exactly
this one) run on the loop's thread asks its commit to take the next link's step lease in
the same write (:attr:`~little_dist.runtime.Continuation.next_lease`): the next attempt then
starts under it instead of taking it in a write of its own. ``decide`` still says what runs
next: a lease for a step the loop does not run next, on its own thread, is released at once.

The slot is shared by the loop's threads (a loop whose attempt overstayed is taken over by a
new thread, see ``_Runner._drive``): each lease is kept with the generation of the loop that
took it, and only that loop runs under it; any other drops it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from little_dist.compiler import WorkflowVersion
from little_dist.errors import LittleError
from little_dist.events import EventInput
from little_dist.runtime import Continuation
from little_dist.scheduling import StepDispatch
from little_dist.scheduling.step_graph import next_in_chain, plan_for
from little_dist.world.base import Lease, LeaseRequest, World, unique_holder
from little_dist.world.fleet_keys import step_lease_key

__all__ = ["NextLease"]


@dataclass(frozen=True)
class _Held:
    generation: int
    step_path: str
    lease: Lease


class NextLease:
    """One run's slot for the next link's step lease (see the module docstring)."""

    def __init__(self, world: World, version: WorkflowVersion, run_id: str, ttl: float) -> None:
        self._world = world
        self._version = version
        self._run_id = run_id
        self._ttl = ttl
        self._lock = threading.Lock()
        self._held: _Held | None = None
        self._successors: dict[str, str | None] = {}

    def continuation(
        self, generation: int, dispatch: StepDispatch, preamble: Sequence[EventInput]
    ) -> Continuation:
        """How loop ``generation`` runs ``dispatch`` on its own thread, with ``preamble``: as
        the only runner of the run's attempts (no second read of the log), under the lease
        held for its step (if any), its commit taking its chain's next link's."""
        lease = self.take(generation, dispatch) if self._held is not None else None
        path = dispatch.step_path
        try:
            successor = self._successors[path]
        except KeyError:
            successor = self._successors[path] = next_in_chain(plan_for(self._version), path)
        if successor is None:
            return Continuation(lease=lease, read_log=False, preamble=preamble)
        return Continuation(
            lease=lease,
            read_log=False,
            preamble=preamble,
            next_lease=LeaseRequest(
                step_lease_key(self._run_id, successor), unique_holder("attempt"), self._ttl
            ),
            on_next_lease=functools.partial(self.keep, generation, successor),
        )

    def keep(self, generation: int, step_path: str, lease: Lease) -> None:
        """Hold ``lease`` (``step_path``'s, taken by a commit of loop ``generation``)."""
        with self._lock:
            dropped, self._held = self._held, _Held(generation, step_path, lease)
        self._release(dropped)

    def take(self, generation: int, dispatch: StepDispatch) -> Lease | None:
        """The held lease, if loop ``generation`` took it for ``dispatch``'s step; any other
        held lease is released."""
        with self._lock:
            held, self._held = self._held, None
        if (
            held is not None
            and held.generation == generation
            and held.step_path == dispatch.step_path
        ):
            return held.lease
        self._release(held)
        return None

    def drop(self) -> None:
        """Release the held lease, if any (the loop runs something else next, or ends)."""
        with self._lock:
            held, self._held = self._held, None
        self._release(held)

    def _release(self, held: _Held | None) -> None:
        if held is None:
            return
        # Not released (storage away): it expires after its TTL, and the step it guards
        # is run then, as after a crash.
        with contextlib.suppress(LittleError):
            self._world.release_lease(held.lease)
