"""A provider's own rate limit, for the scripted provider: requests and tokens per period,
shared by every process that serves the script (Redis-backed), answered with 429s.

::

    quota = ProviderQuota(requests=600, tokens=150_000, period=60, redis_url="redis://...")
    script = ScriptedModel(latency=0.2, quota=quota)

Each call is charged when it arrives, before its reply's latency: one request and the tokens
its reply reports (input plus output). A call over either limit is refused as a real provider
refuses it, with litellm's ``RateLimitError`` carrying ``Retry-After`` (seconds until the
oldest call leaves the window), and it counts all the same (OpenAI's limits count refused
requests). The windows are exact moving windows (the ``limits`` library's
``MovingWindowRateLimiter``: in Redis when ``redis_url`` is given, so every worker shares
them; else in this process's memory).

What was served is kept where every process can read it (:meth:`ProviderQuota.served`,
:meth:`ProviderQuota.refused`): the time and tokens of each accepted call, the count of 429s.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from little_dist.errors import InvalidInputError

__all__ = ["ProviderQuota", "QuotaRefused"]


class QuotaRefused(Exception):
    """Raised inside the provider for a call over the quota (turned into a 429 there)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limit reached; retry after {retry_after:.3f}s")
        self.retry_after = retry_after


@dataclass
class ProviderQuota:
    """The provider's limits per ``period`` seconds (a whole number), and where they live.

    ``name`` keeps two simulated providers apart on one Redis (the test's own name)."""

    requests: int | None = None
    tokens: int | None = None
    period: int = 60
    redis_url: str | None = None
    name: str = "scripted"
    _state: Any = field(default=None, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        for what, value in (("requests", self.requests), ("tokens", self.tokens)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise InvalidInputError(f"ProviderQuota {what} must be a whole number >= 1")
        if not isinstance(self.period, int) or self.period < 1:
            raise InvalidInputError("ProviderQuota period must be a whole number of seconds >= 1")

    # -- the file form ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "tokens": self.tokens,
            "period": self.period,
            "redisUrl": self.redis_url,
            "name": self.name,
        }

    @classmethod
    def from_dict(cls, data: Any) -> ProviderQuota:
        if not isinstance(data, dict) or set(data) - {
            "requests",
            "tokens",
            "period",
            "redisUrl",
            "name",
        }:
            raise InvalidInputError(
                "providerQuota: expected an object of requests, tokens, period, redisUrl, name"
            )
        return cls(
            requests=data.get("requests"),
            tokens=data.get("tokens"),
            period=data.get("period", 60),
            redis_url=data.get("redisUrl"),
            name=data.get("name", "scripted"),
        )

    # -- serving ------------------------------------------------------------------------------

    def charge(self, tokens: int) -> None:
        """Count one call of ``tokens``; raise :class:`QuotaRefused` when it is over."""
        limiter, items, log = self._open()
        refused = False
        for item, cost in items(tokens):
            # Each limit takes its part atomically; a refused call keeps what it took.
            if not limiter.hit(item, self.name, cost=cost):
                refused = True
        if refused:
            waits = [
                limiter.get_window_stats(item, self.name).reset_time - time.time()
                for item, _ in items(tokens)
            ]
            log.refused()
            raise QuotaRefused(max(min(max(waits), float(self.period)), 0.001))
        log.served(time.time(), tokens)

    def served(self) -> list[tuple[float, int]]:
        """Every accepted call, ``(time.time() at arrival, tokens)``, in arrival order."""
        rows: list[tuple[float, int]] = self._open()[2].read_served()
        return rows

    def refused(self) -> int:
        """How many calls were answered 429."""
        count: int = self._open()[2].read_refused()
        return count

    def reset(self) -> None:
        """Forget the windows and what was served (between two runs of a bench)."""
        limiter, items, log = self._open()
        for item, _ in items(1):
            limiter.clear(item, self.name)
        log.clear()

    def _open(self) -> Any:
        with self._lock:
            if self._state is None:
                self._state = self._make()
            return self._state

    def _make(self) -> Any:
        from limits import RateLimitItemPerSecond
        from limits.storage import MemoryStorage, RedisStorage
        from limits.strategies import MovingWindowRateLimiter

        storage: Any
        if self.redis_url:
            storage = RedisStorage(self.redis_url)
            log: Any = _RedisLog(self.redis_url, f"little:sim:{self.name}")
        else:
            storage = MemoryStorage()
            log = _MemoryLog()
        limits = []
        if self.requests is not None:
            limits.append((RateLimitItemPerSecond(self.requests, self.period, "requests"), False))
        if self.tokens is not None:
            limits.append((RateLimitItemPerSecond(self.tokens, self.period, "tokens"), True))

        def items(tokens: int) -> list[tuple[Any, int]]:
            return [(item, tokens if by_tokens else 1) for item, by_tokens in limits]

        return MovingWindowRateLimiter(storage), items, log


class _MemoryLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._served: list[tuple[float, int]] = []
        self._refused = 0

    def served(self, at: float, tokens: int) -> None:
        with self._lock:
            self._served.append((at, tokens))

    def refused(self) -> None:
        with self._lock:
            self._refused += 1

    def read_served(self) -> list[tuple[float, int]]:
        with self._lock:
            return list(self._served)

    def read_refused(self) -> int:
        with self._lock:
            return self._refused

    def clear(self) -> None:
        with self._lock:
            self._served.clear()
            self._refused = 0


class _RedisLog:
    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self._client = redis.Redis.from_url(url)
        self._served_key, self._refused_key = f"{prefix}:served", f"{prefix}:refused"

    def served(self, at: float, tokens: int) -> None:
        self._client.rpush(self._served_key, f"{at:.6f}|{tokens}")

    def refused(self) -> None:
        self._client.incr(self._refused_key)

    def read_served(self) -> list[tuple[float, int]]:
        rows = self._client.lrange(self._served_key, 0, -1)
        pairs = [(row.decode() if isinstance(row, bytes) else row).split("|") for row in rows]
        return [(float(at), int(tokens)) for at, tokens in pairs]

    def read_refused(self) -> int:
        return int(self._client.get(self._refused_key) or 0)

    def clear(self) -> None:
        self._client.delete(self._served_key, self._refused_key)
