"""Keep a lease alive from a daemon thread while its holder works.

A :class:`LeaseHeartbeat` renews its lease every ``ttl / 3`` seconds. When a renewal fails
with :class:`~little_dist.errors.LeaseLostError` (the lease expired and someone else took it)
the heartbeat stops and :attr:`LeaseHeartbeat.lost` is set, so the work can notice through
``cancelled()`` and stop; its fenced writes would be refused anyway. A renewal that fails
for another reason (storage briefly unavailable) is retried at the next beat: the lease is
only lost once the world says so.

:class:`LeaseKeeper` does the same for many leases from one thread: what a runner or a
worker process uses for its attempts, since starting a thread per attempt costs more than
the rest of a small step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

from little_dist.errors import LeaseLostError, LittleError
from little_dist.world.base import Lease, World

__all__ = ["KeptLease", "LeaseHeartbeat", "LeaseKeeper"]


class LeaseHeartbeat:
    """Renew ``lease`` every ``ttl / 3`` seconds until :meth:`stop` (a context manager)."""

    def __init__(
        self,
        world: World,
        lease: Lease,
        ttl_seconds: float,
        *,
        on_lost: Callable[[], None] | None = None,
        interval: float | None = None,
    ) -> None:
        self._world = world
        self._lease = lease
        self._ttl = ttl_seconds
        self._interval = ttl_seconds / 3 if interval is None else interval
        self._on_lost = on_lost
        self._stopped = threading.Event()
        self.lost = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, name=f"lease-heartbeat:{lease.key}", daemon=True
        )

    @property
    def lease(self) -> Lease:
        """The lease as last renewed (same key and token, later expiry)."""
        return self._lease

    def start(self) -> LeaseHeartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (does not release the lease). Safe to call more than once."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def cancelled(self) -> bool:
        """Whether the lease is lost: the holder must stop."""
        return self.lost.is_set()

    def __enter__(self) -> LeaseHeartbeat:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _beat(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._lease = self._world.renew_lease(self._lease, self._ttl)
            except LeaseLostError:
                self.lost.set()
                if self._on_lost is not None:
                    self._on_lost()
                return
            except LittleError:
                continue  # e.g. storage unavailable for a moment: try again next beat


class KeptLease:
    """One lease kept alive by a :class:`LeaseKeeper`; the same surface as LeaseHeartbeat."""

    __slots__ = ("_keeper", "_on_lost", "due", "lease", "lost", "stopped", "ttl")

    def __init__(
        self,
        keeper: LeaseKeeper,
        lease: Lease,
        ttl: float,
        due: float,
        on_lost: Callable[[], None] | None,
    ) -> None:
        self._keeper = keeper
        self.lease = lease
        self.ttl = ttl
        self.due = due
        self._on_lost = on_lost
        self.lost = threading.Event()
        self.stopped = False

    def cancelled(self) -> bool:
        """Whether the lease is lost: the holder must stop."""
        return self.lost.is_set()

    def stop(self) -> None:
        """Stop renewing (does not release the lease)."""
        self._keeper._forget(self)

    def _mark_lost(self) -> None:
        self.lost.set()
        if self._on_lost is not None:
            self._on_lost()


class LeaseKeeper:
    """One daemon thread that renews many leases, each every ``ttl / 3`` seconds.

    Starting a thread per attempt costs a thread switch (milliseconds under load); a runner
    or a worker process keeps one keeper for all its attempts. :meth:`keep` registers a
    lease and returns its :class:`KeptLease`; :meth:`close` stops the thread.
    """

    def __init__(self, world: World, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._world = world
        self._clock = clock
        self._kept: set[KeptLease] = set()
        self._wake = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        # When the thread will look next (clock time). keep() wakes it only for a lease due
        # before that: waking a sleeping thread costs a thread switch, which under load is
        # more than the rest of a small step's overhead.
        self._wake_at = 0.0
        self._idle_wait = 1.0  # how long an idle thread sleeps: the last renewal period

    def keep(
        self, lease: Lease, ttl_seconds: float, *, on_lost: Callable[[], None] | None = None
    ) -> KeptLease:
        """Renew ``lease`` every ``ttl_seconds / 3`` until the handle's ``stop()``."""
        kept = KeptLease(self, lease, ttl_seconds, self._clock() + ttl_seconds / 3, on_lost)
        with self._wake:
            if self._closed:
                raise RuntimeError("the lease keeper is closed")
            self._kept.add(kept)
            self._idle_wait = ttl_seconds / 3
            if self._thread is None:
                self._wake_at = kept.due
                self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
                self._thread.start()
            elif kept.due < self._wake_at:
                self._wake.notify()
        return kept

    def close(self) -> None:
        """Stop renewing everything and end the thread."""
        with self._wake:
            self._closed = True
            self._kept.clear()
            self._wake.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _forget(self, kept: KeptLease) -> None:
        with self._wake:
            kept.stopped = True
            self._kept.discard(kept)

    def _run(self) -> None:
        while True:
            with self._wake:
                if self._closed:
                    return
                now = self._clock()
                due = [kept for kept in self._kept if kept.due <= now]
                if not due:
                    # Idle: look again after one renewal period; a lease kept meanwhile is
                    # due no earlier than that (same TTL), so keep() need not wake us.
                    self._wake_at = min(
                        (kept.due for kept in self._kept), default=now + self._idle_wait
                    )
                    self._wake.wait(max(0.0, self._wake_at - now))
                    continue
                self._wake_at = now  # renewing: keep() must not rely on a later look
            for kept in due:
                self._renew(kept)

    def _renew(self, kept: KeptLease) -> None:
        try:
            renewed = self._world.renew_lease(kept.lease, kept.ttl)
        except LeaseLostError:
            with self._wake:
                if kept.stopped:
                    return  # stopped (and maybe released) meanwhile: not a loss
                self._kept.discard(kept)
            kept._mark_lost()
            return
        except LittleError:
            renewed = None  # storage unavailable for a moment: try again soon
        with self._wake:
            if renewed is not None:
                kept.lease = renewed
                kept.due = self._clock() + kept.ttl / 3
            else:
                kept.due = self._clock() + min(kept.ttl / 10, 1.0)
