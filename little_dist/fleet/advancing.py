"""Who may advance a run in this process: one thread at a time, the others hand off to it.

Threads of one worker process that commit steps of the same run at once would each look at
the run (fold, decide, append, send) — sixteen threads committing branches of one fan-out
would decide sixteen times what one look decides. :class:`Advancing` lets one of them
advance the run and asks it to look once more when it is done (``begin``/``end``); a thread
that could run another attempt of the run waits instead (``join``) and may be handed one by
the advancing thread (``hand_out``), so the next branch runs in the slot that freed it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from little_dist.fleet.dispatch import Advance

__all__ = ["Advancing", "Waiter"]


class Waiter(threading.Event):
    """A thread waiting for the advancing thread to hand it an attempt of the run."""

    def __init__(self) -> None:
        super().__init__()
        self.given: Advance | None = None


class Advancing:
    """One run's "advancing" flag, its "look again" request and its waiting threads."""

    def __init__(self) -> None:
        self._advancing = False
        self._look_again = False
        self._waiters: list[Waiter] = []
        self._lock = threading.Lock()

    def begin(self) -> bool:
        """Whether the calling thread may advance the run now. While another thread of this
        process advances it, that one is asked to look again when done, and this is False:
        16 threads committing branches of one fan-out need one decide, not 16."""
        with self._lock:
            if self._advancing:
                self._look_again = True
                return False
            self._advancing = True
            self._look_again = False
            return True

    def end(self, *, failed: bool = False) -> bool:
        """Done advancing; True (still advancing) when a look was asked for meanwhile and the
        caller must advance again. After a failure the run is left to the next look. When
        the advancing is over, threads still waiting for a hand-out get nothing."""
        with self._lock:
            if self._look_again and not failed:
                self._look_again = False
                return True
            self._advancing = False
            self._look_again = False
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.set()
        return False

    def join(self) -> Waiter | None:
        """:meth:`begin` for a thread that could run another attempt of this run: ``None``
        if it may advance the run now; else another thread is advancing it, which is asked
        to look again and may hand this one an attempt (:meth:`hand_out`): wait on the
        returned :class:`Waiter`, then :meth:`leave`."""
        with self._lock:
            if not self._advancing:
                self._advancing = True
                self._look_again = False
                return None
            self._look_again = True
            waiter = Waiter()
            self._waiters.append(waiter)
            return waiter

    def waiting(self) -> int:
        """How many threads wait for an attempt to be handed to them."""
        with self._lock:
            return len(self._waiters)

    def hand_out(self, attempts: Sequence[Advance]) -> list[Advance]:
        """Give ``attempts`` to waiting threads, first come first served; the ones left."""
        left = list(attempts)
        given: list[Waiter] = []
        with self._lock:
            while left and self._waiters:
                waiter = self._waiters.pop(0)
                waiter.given = left.pop(0)
                given.append(waiter)
        for waiter in given:
            waiter.set()
        return left

    def leave(self, waiter: Waiter) -> Advance | None:
        """Stop waiting; what was handed to ``waiter``, if anything."""
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            return waiter.given

    @property
    def busy(self) -> bool:
        """Whether a thread of this process advances the run right now."""
        with self._lock:
            return self._advancing
