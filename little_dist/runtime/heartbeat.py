"""Keep a lease alive from a daemon thread while its holder works.

A :class:`LeaseHeartbeat` renews its lease every ``ttl / 3`` seconds. When a renewal fails
with :class:`~little_dist.errors.LeaseLostError` (the lease expired and someone else took it)
the heartbeat stops and :attr:`LeaseHeartbeat.lost` is set, so the work can notice through
``cancelled()`` and stop; its fenced writes would be refused anyway. A renewal that fails
for another reason (storage briefly unavailable) is retried at the next beat: the lease is
only lost once the world says so.

:class:`LeaseKeeper` does the same for many leases from one thread: what a runner or a
worker process uses for its attempts, since starting a thread per attempt costs more than
the rest of a small step. It is also the attempts' watchdog: a lease kept with a
``deadline`` (a step attempt's time limit) is renewed only until then. At the deadline the
handle's :attr:`KeptLease.timed_out` is set (the work sees it through ``cancelled()`` and
should end itself); if it has not stopped the handle ``grace`` seconds later, the keeper
calls ``on_deadline`` with the lease (the attempt's owner commits its failure, fenced, so a
call that never returns cannot keep a run open). Watching deadlines here costs the hot path
nothing: no thread switch per call, no extra wake-up before a deadline is near.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from little_dist.errors import LeaseLostError, LittleError
from little_dist.world.base import Lease, World

__all__ = ["DEADLINE_GRACE", "KeptLease", "LeaseHeartbeat", "LeaseKeeper"]

_log = logging.getLogger("little.runtime")


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


#: Seconds an attempt past its deadline has to end itself before the keeper ends it (at most
#: a third of the lease TTL, so the lease, no longer renewed, is still held then).
DEADLINE_GRACE = 2.0


class KeptLease:
    """One lease kept alive by a :class:`LeaseKeeper`; the same surface as LeaseHeartbeat."""

    __slots__ = (
        "_keeper",
        "_on_deadline",
        "_on_lost",
        "deadline",
        "due",
        "grace",
        "lease",
        "lost",
        "stopped",
        "timed_out",
        "ttl",
    )

    def __init__(
        self,
        keeper: LeaseKeeper,
        lease: Lease,
        ttl: float,
        due: float,
        on_lost: Callable[[], None] | None,
        *,
        deadline: float | None = None,
        on_deadline: Callable[[Lease], None] | None = None,
    ) -> None:
        self._keeper = keeper
        self.lease = lease
        self.ttl = ttl
        self.deadline = deadline
        self.grace = min(DEADLINE_GRACE, ttl / 3)
        self.due = due if deadline is None else min(due, deadline)
        self._on_lost = on_lost
        self._on_deadline = on_deadline
        self.lost = threading.Event()
        #: Set at the deadline: the work must end now (the lease is no longer renewed).
        self.timed_out = threading.Event()
        self.stopped = False

    def cancelled(self) -> bool:
        """Whether the lease is lost or its deadline passed: the holder must stop."""
        return self.lost.is_set() or self.timed_out.is_set()

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
        self,
        lease: Lease,
        ttl_seconds: float,
        *,
        on_lost: Callable[[], None] | None = None,
        deadline: float | None = None,
        on_deadline: Callable[[Lease], None] | None = None,
    ) -> KeptLease:
        """Renew ``lease`` every ``ttl_seconds / 3`` until the handle's ``stop()``, or until
        ``deadline`` (this keeper's clock) when given; see the module docstring for what
        happens then."""
        kept = KeptLease(
            self,
            lease,
            ttl_seconds,
            self._clock() + ttl_seconds / 3,
            on_lost,
            deadline=deadline,
            on_deadline=on_deadline,
        )
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

    @property
    def next_look(self) -> float:
        """When (this keeper's clock) its thread looks at its leases next, unless woken."""
        with self._wake:
            return self._wake_at

    def wake(self) -> None:
        """Make the thread look at its leases now (a caller whose clock jumped: tests)."""
        with self._wake:
            self._wake.notify()

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
                if kept.deadline is not None and now >= kept.deadline:
                    self._expire(kept, now)
                else:
                    self._renew(kept)

    def _expire(self, kept: KeptLease, now: float) -> None:
        """A lease past its deadline: first tell its holder (and stop renewing), then, if it
        is still kept ``grace`` seconds later, hand it to ``on_deadline``."""
        assert kept.deadline is not None
        if not kept.timed_out.is_set():
            with self._wake:
                kept.due = kept.deadline + kept.grace
            kept.timed_out.set()
            return
        with self._wake:
            if kept.stopped:
                return  # its holder ended it meanwhile
            kept.stopped = True
            self._kept.discard(kept)
        if kept._on_deadline is not None:
            try:
                kept._on_deadline(kept.lease)
            except Exception:
                # The lease, no longer renewed, expires; the sweeper ends the attempt then.
                _log.warning("could not end %s at its deadline", kept.lease.key, exc_info=True)

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
            if kept.deadline is not None:
                kept.due = min(kept.due, kept.deadline)
