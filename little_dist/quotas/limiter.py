"""The limiter a model call goes through: reserve before, settle after, block on a 429.

:meth:`QuotaLimiter.reserve` finds the rules a call falls under, asks the backend for its
estimated amounts and, while the backend says to wait, waits in place (in slices, watching
the attempt's cancellation and deadline) up to ``max_wait`` seconds in all; past that it
raises :class:`QuotaWaitTooLong` and the attempt fails with a retriable cause. A fleet
worker's limiter (``give_back_after``) does not wait in place for a wait expected longer than
that: :class:`QuotaWaitGivenBack`, and the attempt ends with the cause ``quota_wait`` and when
to run again, so its slot serves other work meanwhile (see
:mod:`little_dist.scheduling.policy`). The
:class:`Reservation` it returns is settled with the real usage after the call, or
:meth:`~Reservation.rejected` when the provider answered 429: every rule of the call is
then blocked for the ``Retry-After`` (the whole fleet waits, not one thread).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from little_dist.errors import InvalidInputError, LittleError, StorageUnavailableError
from little_dist.quotas.backend import QuotaBackend
from little_dist.quotas.daily import DailyBackend, DailyCeiling, MemoryDailyBackend
from little_dist.quotas.rules import Amounts, CallIdentity, QuotaRule, QuotaRules

__all__ = [
    "DEFAULT_RETRY_AFTER",
    "DailyBudgetExceeded",
    "DailyHold",
    "QuotaLimiter",
    "QuotaTooSmall",
    "QuotaWaitGivenBack",
    "QuotaWaitTooLong",
    "Reservation",
]

_log = logging.getLogger("little_dist.quotas")

#: How long a 429 without ``Retry-After`` blocks its rules (seconds).
DEFAULT_RETRY_AFTER = 1.0
#: The longest single sleep of a wait: cancellation and deadlines are looked at this often.
_SLICE = 0.5


class QuotaWaitTooLong(LittleError):
    """The call would wait for quota longer than the setting allows (retriable later)."""

    def __init__(self, message: str, *, expected_in: float) -> None:
        super().__init__(message)
        #: Seconds until the backend expected room when the wait gave up.
        self.expected_in = expected_in


class QuotaWaitGivenBack(QuotaWaitTooLong):
    """The call would wait longer than ``give_back_after``: the attempt gives its worker slot
    back and runs again once the quota is expected (a fleet's limiter only)."""


class QuotaTooSmall(InvalidInputError):
    """One call needs more than a whole period's limit: no wait can admit it."""


def _never() -> bool:
    return False


def _utc_day() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


class DailyBudgetExceeded(LittleError):
    """The call's worst case would pass a daily dollar ceiling (:mod:`.daily`)."""


@dataclass
class DailyHold:
    """One admitted call's worst case held against its daily ceilings."""

    backend: DailyBackend
    ceilings: tuple[DailyCeiling, ...]
    day: str
    reservation_id: str
    usd: float
    _open: bool = True

    def settle(self, usd: float) -> None:
        """The call cost ``usd`` (0: it failed): it replaces the worst case. A store that
        cannot be reached is logged: the worst case then stays counted for the day."""
        if self._open:
            self._open = False
            try:
                self.backend.settle(self.ceilings, self.day, self.reservation_id, max(usd, 0.0))
            except StorageUnavailableError as exc:
                _log.warning("daily budget hold %s not settled: %s", self.reservation_id, exc)


@dataclass
class Reservation:
    """One admitted call's hold on its rules' quota."""

    limiter: QuotaLimiter
    rules: tuple[QuotaRule, ...]
    reservation_id: str
    amounts: Amounts
    waited: float = 0.0
    _open: bool = True

    def settle(self, input_tokens: int, output_tokens: int) -> None:
        """The call ended with this usage: it replaces the estimate. A store that cannot be
        reached is logged, not raised: the call is over, and its estimate stops counting
        when its lease ends."""
        if self._open:
            self._open = False
            used = Amounts(self.amounts.requests, max(input_tokens, 0), max(output_tokens, 0))
            try:
                self.limiter.backend.settle(self.rules, self.reservation_id, self.amounts, used)
            except StorageUnavailableError as exc:
                _log.warning("quota reservation %s not settled: %s", self.reservation_id, exc)

    def rejected(self, retry_after: float | None) -> None:
        """The provider answered 429: block the call's rules for ``retry_after`` seconds."""
        seconds = DEFAULT_RETRY_AFTER if retry_after is None or retry_after <= 0 else retry_after
        try:
            self.limiter.backend.block(self.rules, min(seconds, self.limiter.max_wait))
        except StorageUnavailableError as exc:
            _log.warning("quota block after a 429 not recorded: %s", exc)
        self.settle(0, 0)


class QuotaLimiter:
    """Admits model calls under ``rules`` through ``backend`` (see the module docs).

    ``lease``: how long a reservation counts as in flight when it is never settled (its
    worker died); ``clock``/``sleep`` are for tests.
    """

    def __init__(
        self,
        rules: QuotaRules,
        backend: QuotaBackend,
        *,
        max_wait: float = 60.0,
        lease: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        daily: DailyBackend | None = None,
        today: Callable[[], str] = _utc_day,
        give_back_after: float | None = None,
    ) -> None:
        self.rules = rules
        self.backend = backend
        #: Where the daily dollar ceilings count (:mod:`.daily`; in memory unless given).
        self.daily: DailyBackend = daily if daily is not None else MemoryDailyBackend()
        self._today = today
        self.max_wait = max_wait
        #: A wait expected longer than this is not waited in place (:class:`QuotaWaitGivenBack`):
        #: a fleet worker's slot is given back meanwhile. ``None``: always wait in place.
        self.give_back_after = give_back_after
        self.lease = lease
        self._clock = clock
        self._sleep = sleep

    def reserve(
        self,
        call: CallIdentity,
        amounts: Amounts,
        *,
        cancelled: Callable[[], bool] = _never,
        deadline: float | None = None,
        give_back: bool = True,
    ) -> Reservation | None:
        """Wait until ``amounts`` are admitted under every rule ``call`` falls under and
        return the hold (``None``: no rule limits the call). Raises :class:`QuotaTooSmall`,
        :class:`QuotaWaitTooLong`, or returns early when ``cancelled()`` turns true (the
        caller sees its cancellation). ``give_back``: false for a call that gave its slot
        back once already (it waits for its turn in place, see :class:`QuotaWaitGivenBack`)."""
        rules = self.rules.for_call(call)
        if not rules:
            return None
        for rule in rules:
            problem = rule.too_large(amounts)
            if problem is not None:
                raise QuotaTooSmall(problem)
        reservation_id = uuid.uuid4().hex
        started = self._clock()
        while True:
            wait = self.backend.reserve(rules, reservation_id, amounts, self.lease)
            now = self._clock()
            if wait <= 0:
                return Reservation(self, rules, reservation_id, amounts, waited=now - started)
            waited = now - started
            threshold = self.give_back_after if give_back else None
            if threshold is not None and waited + wait > threshold:
                names = ", ".join(rule.name for rule in rules)
                # A wait only calls in flight can end is a poll (their end is unknown): the
                # attempt comes back no sooner than the threshold, so a slot given back is
                # not taken again at once, many times over.
                again = max(wait, threshold)
                raise QuotaWaitGivenBack(
                    f"quota of {names} expected in {wait:.2f} s: the attempt gives its slot "
                    f"back and runs again in {again:.2f} s (LITTLE_QUOTA_GIVE_BACK_AFTER)",
                    expected_in=again,
                )
            limit = self.max_wait if deadline is None else min(self.max_wait, deadline - started)
            if waited + wait > limit:
                names = ", ".join(rule.name for rule in rules)
                raise QuotaWaitTooLong(
                    f"quota of {names} expected in {wait:.2f} s; the call already waited "
                    f"{waited:.2f} s and may wait {max(limit, 0):.2f} s "
                    "(LITTLE_QUOTA_MAX_WAIT, or the step's deadline)",
                    expected_in=wait,
                )
            if cancelled():
                return None
            self._sleep(min(wait, _SLICE))

    def reserve_daily(self, call: CallIdentity, usd: float) -> DailyHold | None:
        """Hold ``usd`` (the call's worst case) against every daily ceiling ``call`` falls
        under (``None``: none does); :class:`DailyBudgetExceeded` when one cannot hold it."""
        ceilings = self.rules.daily_for(call)
        if not ceilings:
            return None
        day, reservation_id = self._today(), uuid.uuid4().hex
        passed = self.daily.reserve(ceilings, day, reservation_id, usd)
        if passed is not None:
            spent = self.daily.spent(passed, day)
            raise DailyBudgetExceeded(
                f"daily budget {passed.name!r} (${passed.usd:.6g} a UTC day) for {day}: this "
                f"call may cost up to ${usd:.6g} and ${spent:.6g} is spent or held"
            )
        return DailyHold(self.daily, ceilings, day, reservation_id, usd)
