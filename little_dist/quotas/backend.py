"""The quota backend interface: reserve, settle, block, over the rules a call falls under.

Two implementations, one algorithm: :mod:`.memory` (one process, no Redis) and
:mod:`.redis_backend` (every worker of a fleet, one atomic Lua script per call).

The algorithm. Each rule keeps the calls of its last period: a call enters when it is
reserved (with its estimated amounts, counted as in flight until ``lease`` seconds pass) and
is settled when it ends (its real amounts, counted from its end for one period). A call is
admitted when, for every rule, what the calls still counted hold plus what it asks stays
within each limit, the calls in flight stay under ``concurrent``, and no 429 blocks the rule;
else nothing is taken and the caller learns how long to wait (until enough settled calls
leave the window; a short poll when only calls in flight could free room). Counting a call
from its end, not its start, makes the window at least the provider's: whatever the provider
counted in any period, the limiter counted too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from little_dist.quotas.rules import Amounts, QuotaRule

__all__ = ["QuotaBackend", "member", "parse_member", "poll_interval"]


class QuotaBackend(Protocol):
    def reserve(
        self, rules: Sequence[QuotaRule], reservation_id: str, amounts: Amounts, lease: float
    ) -> float:
        """Take ``amounts`` from every rule at once and return 0, or take nothing and return
        the seconds to wait before asking again."""
        ...

    def settle(
        self,
        rules: Sequence[QuotaRule],
        reservation_id: str,
        reserved: Amounts,
        used: Amounts,
    ) -> None:
        """Replace a reservation's estimate by what the call used (counted from now)."""
        ...

    def block(self, rules: Sequence[QuotaRule], seconds: float) -> None:
        """Admit no call under ``rules`` for ``seconds`` (a provider's ``Retry-After``)."""
        ...


def member(reservation_id: str, amounts: Amounts) -> str:
    """A reservation as a window entry: its id and amounts, in one string."""
    return f"{reservation_id}|{amounts.requests}|{amounts.input_tokens}|{amounts.output_tokens}"


def parse_member(entry: str) -> Amounts:
    _, requests, given, taken = entry.rsplit("|", 3)
    return Amounts(int(requests), int(given), int(taken))


def poll_interval(rule: QuotaRule) -> float:
    """How long to wait when only calls in flight could make room (their end is unknown)."""
    return min(max(rule.period / 100, 0.01), 0.25)
