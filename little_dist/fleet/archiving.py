"""What the scheduler does with a run once it is over: remember it, archive it, let it go.

A finished run is remembered (the last :data:`FINISHED_MEMORY` of them, so a late signal for
one costs nothing), its backlog report cleared, and its log copied to S3 in the background
(``world.archive_run`` where the world has one) ``archive_delay`` seconds after its end:
the clients that wake on the end read the log first, without that copy competing for the
machine. Once archived, the run leaves the active set; an archive that fails forgets the run
as finished, so the next sweep finishes (and archives) it again.

An outer loop's cycle run (its id starts ``run_olc_``, see :mod:`little_dist.outer_loop`)
leaves the active set unarchived: its loop appends the supervisor's decision to it once it
has ended (``OuterLoopCycleCompleted``, which an archived log would refuse), then archives
it itself.

A run with a callback (:mod:`little_dist.fleet.callbacks`) is archived once the callback's
outcome is in its log (``deliver``: what starts the delivery); a delivery this process
stopped before its end leaves the run unarchived and forgotten as finished, so the next
sweep (here or in another scheduler) finishes it again and takes the callback over.
"""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final

from little_dist.errors import StorageUnavailableError
from little_dist.fleet.callbacks import UNKNOWN, Unknown
from little_dist.ids import CYCLE_RUN_ID_PREFIX
from little_dist.world.base import World
from little_dist.world.extras import extras_of

if TYPE_CHECKING:
    from little_dist.fleet.sweeper import ActiveRuns
    from little_dist.fleet.worker_slots import FanoutWindow

__all__ = ["FINISHED_MEMORY", "Archiver"]

#: Finished runs a scheduler remembers, whose signals it skips. Late signals of a run come
#: within seconds of its end (a dead scheduler's, claimed after signal_claim_idle): one of a
#: run finished before the last thousand costs a look that finds it over (as it does for a
#: scheduler that did not finish it), and the memory stays small (~150 bytes a run).
FINISHED_MEMORY: Final = 1_000

_log = logging.getLogger("little.scheduler")


class Archiver:
    """The finished runs of one scheduler and their archives (see the module docstring)."""

    def __init__(
        self,
        world: World,
        active: ActiveRuns,
        *,
        delay: float,
        window: FanoutWindow | None = None,
        deliver: Callable[[str, str | Unknown], Future[bool]] | None = None,
    ) -> None:
        self._world = world
        self._deliver = deliver
        # Runs whose callback is being delivered: archived once it is done.
        self._held: dict[str, Future[bool]] = {}
        self._active = active
        self._delay = delay
        self._window = window
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="little-archive")
        # Finished runs waiting for the delay to pass: (due, run id), a heap.
        self._due: list[tuple[float, str]] = []

    def __contains__(self, run_id: object) -> bool:
        """Whether ``run_id`` is a run this scheduler finished (and remembers)."""
        with self._lock:
            return run_id in self._finished

    def finish(
        self, run_id: str, status: str, sequence: int, *, callback: str | Unknown | None = UNKNOWN
    ) -> None:
        """``run_id`` is over: remember it and archive it in the background (a big log takes
        seconds to copy to S3; the scheduler's loop must keep serving signals meanwhile)."""
        with self._lock:
            if run_id in self._finished:
                return
            self._finished[run_id] = None
            while len(self._finished) > FINISHED_MEMORY:
                self._finished.popitem(last=False)
        _emit("run-finished", run=run_id, status=status, seq=sequence)
        if self._deliver is not None and callback is not None:
            pending = self._deliver(run_id, callback)
            with self._lock:
                self._held[run_id] = pending
        if self._window is not None:
            # Whatever a look reported last for this run, nothing of it waits any more.
            try:
                self._window.backlog.report(run_id, 0)
            except StorageUnavailableError as exc:
                _emit("backlog-error", level=logging.WARNING, exc=exc, run=run_id, error=str(exc))
        if self._delay > 0:
            heapq.heappush(self._due, (time.monotonic() + self._delay, run_id))
        else:
            self._pool.submit(self._archive, run_id)

    def next_due(self) -> float | None:
        """When the next waiting archive is due (monotonic), ``None`` if none waits."""
        return self._due[0][0] if self._due else None

    def backlog(self) -> int:
        """Finished runs whose archive has not started yet (for ``little_archive_backlog``)."""
        return len(self._due)

    def start_due(self, now: float | None = None) -> None:
        """Hand the finished runs whose delay has passed (all of them: ``now=None``) to the
        archive threads."""
        due = self._due
        while due and (now is None or due[0][0] <= now):
            self._pool.submit(self._archive, heapq.heappop(due)[1])

    def close(self) -> None:
        """Start every waiting archive and wait for all of them."""
        self.start_due()  # a run left waiting would wait for the next sweep
        self._pool.shutdown(wait=True)

    def _archive(self, run_id: str) -> None:
        """Archive (where the world can), then leave the active set; on failure the run
        stays active and the next sweep finishes it again. A run whose callback is still
        being delivered is archived when that is done (see the module docstring)."""
        with self._lock:
            pending = self._held.pop(run_id, None)
        if pending is not None:
            if not pending.done():
                pending.add_done_callback(lambda _: self._after_delivery(run_id, pending))
                return
            if not pending.result():
                self._unfinished(run_id)
                return
        try:
            archives = extras_of(self._world).archives
            if run_id.startswith(CYCLE_RUN_ID_PREFIX):
                archives = None  # its outer loop archives it (see the module docstring)
            if archives is not None:
                archives.archive_run(run_id)
            self._active.remove(run_id)
        except Exception as exc:
            with self._lock:
                self._finished.pop(run_id, None)
            _emit("archive-error", level=logging.WARNING, exc=exc, run=run_id, error=f"{exc}")
            return
        _emit("run-archived", run=run_id, archived=archives is not None)

    def _after_delivery(self, run_id: str, pending: Future[bool]) -> None:
        if not pending.result():
            self._unfinished(run_id)
            return
        try:
            self._pool.submit(self._archive, run_id)
        except RuntimeError:  # (closing: the next sweep finishes it again)
            self._unfinished(run_id)

    def _unfinished(self, run_id: str) -> None:
        with self._lock:
            self._finished.pop(run_id, None)


def _emit(
    event: str, *, level: int = logging.INFO, exc: BaseException | None = None, **fields: Any
) -> None:
    """One JSON log line, as the scheduler writes them."""
    if _log.isEnabledFor(level):
        line = json.dumps({"event": event, **fields}, separators=(",", ":"), default=str)
        _log.log(level, line, exc_info=exc if exc is not None else False)
