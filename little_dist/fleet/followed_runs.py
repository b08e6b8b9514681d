"""What the scheduler keeps of the runs it follows: folded views and sweep memory.

Each run the scheduler looks at gets a :class:`FollowedRun`: its
:class:`~little_dist.fleet.run_tracker.RunTracker` (the run's folded state and context,
and the attempts this process offered lately: :class:`~little_dist.fleet.offers.Offers`)
and whether it is in the active set yet. :class:`FollowedRuns` holds them, least recently
looked at first, bounded by count and by ``LITTLE_RUN_CACHE_BYTES`` (a run dropped is read
from the log again if it comes back), and remembers per run how long its log was when a
sweep last looked at it (:meth:`FollowedRuns.moving`). Only a cache: forgetting a run loses no work.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from little_dist.fleet.callbacks import UNKNOWN, Unknown
from little_dist.fleet.run_tracker import RunTracker
from little_dist.lru import LruCache
from little_dist.world.base import World

if TYPE_CHECKING:
    from little_dist.fleet.versions import VersionCache
    from little_dist.fleet.worker_slots import FanoutWindow

__all__ = ["FollowedRun", "FollowedRuns"]

# The last sweep left the run to the workers moving it on (see FollowedRuns.moving).
_SWEEP_SKIPPED: Final = -1


@dataclass
class FollowedRun:
    """One run the scheduler follows."""

    tracker: RunTracker
    #: Whether this scheduler added the run to the active set.
    registered: bool = False


class FollowedRuns:
    """The runs one scheduler follows; see the module docstring."""

    def __init__(
        self,
        world: World,
        *,
        versions: VersionCache,
        max_runs: int,
        max_bytes: int | None,
        max_branches_cap: int | None,
        window: FanoutWindow | None,
    ) -> None:
        self._world = world
        self._versions = versions
        self._max_branches_cap = max_branches_cap
        self._window = window
        self._runs: LruCache[str, FollowedRun] = LruCache(max_runs, max_bytes, weigh=_run_bytes)
        # Per run: its log's length when a sweep last looked at it, or _SWEEP_SKIPPED.
        self._swept: dict[str, int] = {}

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[str]:
        """Run ids, least recently looked at first."""
        return iter(self._runs)

    def entry(self, run_id: str) -> FollowedRun:
        """The run's entry, now the most recently used (created empty: the caller catches
        its tracker up; the oldest entries go past the bounds)."""
        entry = self._runs.get(run_id)
        if entry is not None:
            self._runs.move_to_end(run_id)
            return entry
        entry = FollowedRun(
            RunTracker(
                self._world,
                run_id,
                versions=self._versions,
                max_branches_cap=self._max_branches_cap,
                window=self._window,
            )
        )
        self._runs[run_id] = entry
        return entry

    def folded(self, run_id: str) -> int:
        """The last sequence folded of the run (0: not followed)."""
        entry = self._runs.get(run_id)
        return entry.tracker.last_sequence if entry is not None else 0

    def callback_of(self, run_id: str) -> str | Unknown | None:
        """The run's callback URL as its folded log says (``None``: it has none), or
        :data:`UNKNOWN` when this scheduler has not folded the run's first events."""
        entry = self._runs.get(run_id)
        if entry is None or entry.tracker.last_sequence == 0:
            return UNKNOWN
        return entry.tracker.callback_url

    def forget(self, run_id: str) -> None:
        """Drop all that is kept of the run (it is over, or its view cannot be trusted)."""
        self._runs.pop(run_id, None)
        self._swept.pop(run_id, None)

    def moving(self, run_id: str, last: int) -> bool:
        """Whether a sweep leaves the run, whose log holds ``last`` events, to the workers
        moving it on: its log grew since the last sweep looked at it (or no sweep of this
        scheduler has yet), and that sweep did look. Never twice in a row, so every run is
        looked at at least every second sweep: what only a sweep recovers (a worker that died
        between its commit and its look, an attempt whose worker died) waits one sweep
        longer at most, while a wide run the fast path is busy with is not folded here in
        the middle of it (its end is signalled)."""
        before = self._swept.get(run_id)
        if before == _SWEEP_SKIPPED or (before is not None and last <= before):
            self._swept[run_id] = last
            return False
        self._swept[run_id] = _SWEEP_SKIPPED
        return True


def _run_bytes(entry: FollowedRun) -> int:
    return entry.tracker.approx_bytes
