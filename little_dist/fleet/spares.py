"""Attempts a worker's look kept for threads of its process that have not asked yet.

A look at a fan-out folds the commits of several of this process's threads at once and
schedules the branches that refill their slots, each leased for this process. The threads
whose commits it folded are a moment away from asking for their next attempt; one that asks
after the look is over takes one of these spares (:meth:`SpareAttempts.take`, on the run's
tracker) instead of looking at the run itself. A thread that committed after that look takes
one too: the spare's own commit looks at both; if the spare's attempt commits nothing (it
found itself done), the thread looks then, unless a later look decided on all it folded
(:meth:`~little_dist.fleet.run_tracker.RunTracker.looked_past`). A spare nobody takes within
:data:`SPARE_SECONDS` goes to its queue (:class:`SpareSender`, one thread per worker
process), and so do all of them when the worker starts shutting down.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from little_dist.fleet.dispatch import Advance
    from little_dist.fleet.run_tracker import RunTracker

__all__ = ["SPARE_SECONDS", "SpareAttempts", "SpareSender"]

#: How long a spare waits for a thread of its process before it goes to the broker. The
#: threads whose commits a look folded ask within tens of milliseconds when the process's
#: slots contend for the interpreter lock: on ``bench/fleet.py`` (b), alternating the two in
#: one process pair by pair, 0.2 s ran the fan-out 4.5 % faster than 0.05 s (median of 10
#: pairs; fewer spares crossed the broker), at 4 % less CPU per branch.
SPARE_SECONDS = 0.2

_log = logging.getLogger("little.worker")


class SpareAttempts:
    """One run's spares: attempts a look kept, each with the time it goes to the broker."""

    def __init__(self) -> None:
        self._spares: list[tuple[Advance, float]] = []
        self._lock = threading.Lock()

    def stash(self, attempts: Sequence[Advance], until: float) -> None:
        """Keep ``attempts`` (a look kept them; no thread was waiting) for the next threads
        of this process that ask (:meth:`take`), until the monotonic time ``until``."""
        with self._lock:
            self._spares.extend((attempt, until) for attempt in attempts)

    def __len__(self) -> int:
        with self._lock:
            return len(self._spares)

    def take(self) -> Advance | None:
        """The oldest spare, now the caller's; ``None`` if none."""
        with self._lock:
            return self._spares.pop(0)[0] if self._spares else None

    def expired(self, now: float | None = None) -> tuple[list[Advance], float | None]:
        """The spares whose time is up at ``now`` (``None``: all of them), no longer kept;
        and when the next of the others is up (``None``: none left)."""
        with self._lock:
            if now is None:
                expired, self._spares = [attempt for attempt, _ in self._spares], []
                return expired, None
            expired = [attempt for attempt, until in self._spares if until <= now]
            if expired:
                self._spares = [(a, until) for a, until in self._spares if until > now]
            return expired, min((until for _, until in self._spares), default=None)


class SpareSender:
    """Sends the spares whose time is up, from one daemon thread started on first use."""

    def __init__(self, send: Callable[[Advance], None]) -> None:
        self._send = send
        self._due: dict[RunTracker, float] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, tracker: RunTracker, until: float) -> None:
        """``tracker`` stashed spares that are up at monotonic time ``until``."""
        with self._wake:
            if self._closed:
                send_now = True
            else:
                send_now = False
                due = self._due.get(tracker)
                if due is None or until < due:
                    self._due[tracker] = until
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="little-spares", daemon=True
                    )
                    self._thread.start()
                self._wake.notify()
        if send_now:
            self._flush(tracker, None)

    def send_all(self) -> None:
        """Send every spare now (the worker is shutting down)."""
        with self._wake:
            trackers = list(self._due)
            self._due.clear()
        for tracker in trackers:
            self._flush(tracker, None)

    def close(self) -> None:
        """Send every spare and stop the thread; later spares are sent at once."""
        with self._wake:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        self.send_all()
        if thread is not None:
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._closed:
                    return
                now = time.monotonic()
                ready = [tracker for tracker, due in self._due.items() if due <= now]
                for tracker in ready:
                    del self._due[tracker]
                if not ready:
                    nearest = min(self._due.values(), default=None)
                    self._wake.wait(None if nearest is None else max(nearest - now, 0.0))
                    continue
            for tracker in ready:
                later = self._flush(tracker, now)
                if later is not None:
                    self.watch(tracker, later)

    def _flush(self, tracker: RunTracker, now: float | None) -> float | None:
        expired, later = tracker.spares.expired(now)
        for advance in expired:
            try:
                self._send(advance)
            except Exception:  # the scheduler's sweep sends what could not be sent here
                _log.exception("could not send a spare attempt of %s", tracker.run_id)
        return later
