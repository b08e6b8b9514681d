"""The in-memory quota backend: the algorithm of :mod:`.backend` for one process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from little_dist.quotas.backend import member, parse_member, poll_interval
from little_dist.quotas.rules import Amounts, QuotaRule

__all__ = ["MemoryQuotaBackend"]


@dataclass
class _Window:
    #: entry -> until when it counts as in flight (reserved) or the time it ended (settled)
    entries: dict[str, float] = field(default_factory=dict)
    settled: dict[str, float] = field(default_factory=dict)
    blocked_until: float = 0.0

    def prune(self, now: float, period: float) -> None:
        for entry, at in list(self.entries.items()):
            if at <= now - period:
                del self.entries[entry]
        for entry, at in list(self.settled.items()):
            if at <= now - period:
                del self.settled[entry]

    def counted(self) -> list[tuple[float, Amounts]]:
        return [(at, parse_member(e)) for e, at in [*self.entries.items(), *self.settled.items()]]


class MemoryQuotaBackend:
    """Quota windows in this process's memory (threads share them); ``clock`` in seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def _window(self, rule: QuotaRule, now: float) -> _Window:
        window = self._windows.setdefault(rule.name, _Window())
        window.prune(now, rule.period)
        return window

    def reserve(
        self, rules: Sequence[QuotaRule], reservation_id: str, amounts: Amounts, lease: float
    ) -> float:
        with self._lock:
            now = self._clock()
            wait = 0.0
            for rule in rules:
                window = self._window(rule, now)
                wait = max(wait, _wait(rule, window, amounts, now))
            if wait > 0:
                return wait
            entry = member(reservation_id, amounts)
            for rule in rules:
                self._windows[rule.name].entries[entry] = now + lease
            return 0.0

    def settle(
        self,
        rules: Sequence[QuotaRule],
        reservation_id: str,
        reserved: Amounts,
        used: Amounts,
    ) -> None:
        with self._lock:
            now = self._clock()
            old, new = member(reservation_id, reserved), member(reservation_id, used)
            for rule in rules:
                window = self._window(rule, now)
                if window.entries.pop(old, None) is not None:
                    window.settled[new] = now

    def block(self, rules: Sequence[QuotaRule], seconds: float) -> None:
        with self._lock:
            now = self._clock()
            for rule in rules:
                window = self._window(rule, now)
                window.blocked_until = max(window.blocked_until, now + seconds)


def _wait(rule: QuotaRule, window: _Window, amounts: Amounts, now: float) -> float:
    """0 when ``amounts`` fit ``rule`` now, else the seconds until they may."""
    wait = max(window.blocked_until - now, 0.0)
    if rule.concurrent is not None and len(window.entries) + 1 > rule.concurrent:
        wait = max(wait, poll_interval(rule))
    counted = window.counted()
    for limit, need, pick in (
        (rule.requests, amounts.requests, "requests"),
        (rule.tokens, amounts.tokens, "tokens"),
        (rule.input_tokens, amounts.input_tokens, "input_tokens"),
        (rule.output_tokens, amounts.output_tokens, "output_tokens"),
    ):
        if limit is None:
            continue
        excess = sum(_part(a, pick) for _, a in counted) + need - limit
        if excess <= 0:
            continue
        # Settled calls leave the window one period after they ended, oldest first.
        freed, until = 0, None
        settled = sorted(window.settled.items(), key=lambda item: item[1])
        for entry, at in settled:
            used = parse_member(entry)
            freed += _part(used, pick)
            if freed >= excess:
                until = at + rule.period - now
                break
        wait = max(wait, until if until is not None else poll_interval(rule))
    return wait


def _part(amounts: Amounts, which: str) -> int:
    value: int = getattr(amounts, which)
    return value
