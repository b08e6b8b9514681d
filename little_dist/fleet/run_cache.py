"""A worker process's :class:`~little_dist.fleet.run_tracker.RunTracker` per run, bounded."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from little_dist.fleet.run_tracker import RunTracker
from little_dist.lru import LruCache

if TYPE_CHECKING:
    from little_dist.fleet.worker import WorkerRuntime

__all__ = ["RunCache"]

# Runs whose tracker a worker process keeps (each holds the run's folded state and its
# steps' raw events); a run evicted while still running is simply read from the log again.
_RUN_CACHE_SIZE = 256


class RunCache:
    """The worker process's :class:`RunTracker` per run, most recently used first, bounded.

    Task bodies of one run (the thread pool runs several at once) share its tracker: it
    folds under its own lock and reads only the events after the last one folded, instead
    of reading and folding the whole log for every task. A tracker is only a cache: every
    use catches up with the log first, so events other processes appended are always seen.
    Finished runs are dropped; the least recently used run goes when the cache holds more
    than ``size`` runs or more than ``LITTLE_RUN_CACHE_BYTES`` of them (``max_bytes``,
    :attr:`RunTracker.approx_bytes`; never the run in hand).
    """

    def __init__(
        self, runtime: WorkerRuntime, size: int = _RUN_CACHE_SIZE, max_bytes: int | None = None
    ) -> None:
        self._runtime = runtime
        self._size = size
        self._trackers: LruCache[str, RunTracker] = LruCache(
            size,
            runtime.settings.run_cache_bytes if max_bytes is None else max_bytes,
            weigh=_tracker_bytes,
        )
        self._lock = threading.Lock()

    def get(self, run_id: str) -> RunTracker:
        """The run's tracker (created empty on first use; the caller catches it up)."""
        with self._lock:
            tracker = self._trackers.get(run_id)
            if tracker is not None:
                self._trackers.move_to_end(run_id)
                return tracker
        world = self._runtime.world  # outside our lock: may open the world
        window = self._runtime.window
        with self._lock:
            tracker = self._trackers.get(run_id)
            if tracker is None or tracker.world is not world:
                tracker = RunTracker(
                    world,
                    run_id,
                    versions=self._runtime.versions,
                    max_branches_cap=self._runtime.settings.max_branches_cap,
                    keep_step_events=True,
                    window=window,
                )
                self._trackers[run_id] = tracker
            # (the least recently used go past either bound: read from the log again if
            # they come back)
            self._trackers.move_to_end(run_id)
            return tracker

    def forget(self, run_id: str) -> None:
        """Drop the run's tracker (the run is over)."""
        with self._lock:
            self._trackers.pop(run_id, None)

    def clear(self) -> None:
        with self._lock:
            self._trackers.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._trackers)

    def __contains__(self, run_id: object) -> bool:
        with self._lock:
            return run_id in self._trackers

    @property
    def max_bytes(self) -> int | None:
        """The bound on the runs' total :attr:`RunTracker.approx_bytes` (``None``: none)."""
        return self._trackers.max_weight


def _tracker_bytes(tracker: RunTracker) -> int:
    return tracker.approx_bytes
