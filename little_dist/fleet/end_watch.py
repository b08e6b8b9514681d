"""A worker's attempts are told to stop the moment their run ends.

A run cancelled (``little cancel``, ``Client.cancel``), past its deadline, failed by another
step or ended with its parent ends when its ``RunFailed`` is appended, by whoever looks at it
first (the client that cancelled, the scheduler, a worker). Every end is announced on the
world's stream of ends (``RedisS3World.read_ends``). One thread per worker process reads
that stream while an attempt of this process is in flight, and sets the cancel flag of the
attempts of each run that ended: the harness sees ``cancelled()`` at its next safe point, a
model call in flight is abandoned at once (:mod:`little_dist.harness.interruptible`), and the
attempt's records go to the run's late record (its log is sealed), what the call spent with
them. Without this, an attempt learnt of its run's end only when its commit was refused.

A world without announcements (not Redis) gets no watch: its attempts run to their end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from little_dist.errors import LittleError

__all__ = ["BLOCK_MS", "EndWatch"]

#: How long one read of the announcements waits (milliseconds).
BLOCK_MS: Final = 500

_log = logging.getLogger(__name__)

ReadEnds = Callable[[str | None, int], tuple[str, list[str]]]


class EndWatch:
    """The watch of one worker process (see the module docstring)."""

    def __init__(self, read_ends: ReadEnds | None) -> None:
        self._read = read_ends
        self._lock = threading.Lock()
        self._watched: dict[str, list[threading.Event]] = {}
        self._busy = threading.Event()  # some run is watched
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextmanager
    def watching(self, run_id: str) -> Iterator[threading.Event | None]:
        """The cancel flag of one attempt of ``run_id``, set when the run's end is
        announced (``None`` without announcements)."""
        if self._read is None:
            yield None
            return
        flag = threading.Event()
        with self._lock:
            self._watched.setdefault(run_id, []).append(flag)
            self._busy.set()
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._serve, name="little-end-watch", daemon=True
                )
                self._thread.start()
        try:
            yield flag
        finally:
            with self._lock:
                flags = self._watched.get(run_id, [])
                if flag in flags:
                    flags.remove(flag)
                if not flags:
                    self._watched.pop(run_id, None)
                if not self._watched:
                    self._busy.clear()

    def close(self) -> None:
        self._closed = True
        self._busy.set()

    def _serve(self) -> None:
        assert self._read is not None
        after: str | None = None
        while not self._closed:
            if not self._busy.wait(5.0):
                after = None  # (idle: start from the newest announcement again)
                continue
            try:
                after, ended = self._read(after, BLOCK_MS)
            except LittleError as error:  # storage away: the commit's refusal still stops it
                if self._closed:
                    return  # (the world closed under the read: the worker is going)
                _log.warning("cannot read the runs' ends: %s", error)
                self._busy.wait(1.0)
                continue
            if not ended:
                continue
            with self._lock:
                flags = [flag for run in ended for flag in self._watched.get(run, ())]
            for flag in flags:
                flag.set()
