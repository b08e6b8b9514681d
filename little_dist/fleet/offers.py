"""Which attempts this process offered lately: an offer is a dispatch-lease round trip.

A look at a run lists every attempt waiting to start (a wide fan-out's whole window of
branches); trying each one's dispatch lease on every look would cost a Redis round trip per
waiting attempt per commit. :class:`Offers` remembers what this process offered and when, so
that an attempt is offered again only once ``dispatch_resend_after`` has passed (by then its
dispatch lease has expired too, and the lease decides whether its task is sent again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from little_dist.scheduling import StepDispatch

__all__ = ["Offers"]

# Offers kept before a look prunes the stale ones (a scan of every offer, so not each call).
_PRUNE_FROM = 64


class Offers:
    """The attempts (path, attempt, kind) of one run this process offered, and when."""

    def __init__(self) -> None:
        self._offered: dict[tuple[str, int, str], float] = {}
        self._pruned_at = time.monotonic()
        self._lock = threading.Lock()

    def claim(self, dispatches: Sequence[StepDispatch], resend_after: float) -> list[StepDispatch]:
        """The dispatches not offered in the last ``resend_after`` seconds, now marked
        offered."""
        now = time.monotonic()
        fresh: list[StepDispatch] = []
        with self._lock:
            offered = self._offered
            for dispatch in dispatches:
                key = (dispatch.step_path, dispatch.attempt, dispatch.kind)
                last = offered.get(key)
                if last is not None and now - last < resend_after:
                    continue
                offered[key] = now
                fresh.append(dispatch)
            # Forget attempts offered long ago (started ones are never asked about again).
            # Not by "absent from dispatches": a look with an older decision, on another
            # thread, would then offer again what a newer one had pruned. A scan of every
            # offer, so not on every call (a wide fan-out asks about one attempt at a time).
            if len(offered) > _PRUNE_FROM and now - self._pruned_at >= resend_after / 4:
                self._pruned_at = now
                for stale in [k for k, last in offered.items() if now - last >= resend_after]:
                    del offered[stale]
        return fresh

    def __len__(self) -> int:
        with self._lock:
            return len(self._offered)

    def unclaim(self, dispatches: Sequence[StepDispatch]) -> None:
        """Forget that ``dispatches`` were offered (their send failed: offer them again)."""
        with self._lock:
            for dispatch in dispatches:
                self._offered.pop((dispatch.step_path, dispatch.attempt, dispatch.kind), None)

    def clear(self) -> None:
        """Forget every offer (the run's log went back: what was offered may be gone)."""
        with self._lock:
            self._offered.clear()
