"""Per-token rate limits: a token made with ``--rate 600/minute`` gets that many requests.

The windows are ``limits``' moving windows (the library the provider quotas use, the rate
strings operators know from Flask-Limiter), kept in the fleet's Redis beside the tokens
(``LITTLE_SIGNAL_STREAM:api-rate:...``), so every ``little serve`` process of the fleet
counts one window per token. A request over the rate is refused with 429 and
``Retry-After`` (the seconds until the window lets the next one in).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from little_dist.errors import InvalidInputError

__all__ = ["TokenRates", "check_rate"]


def check_rate(rate: str) -> str:
    """``rate`` if ``limits`` reads it as one rate of at least 1 per period."""
    from limits import parse_many

    try:
        items = parse_many(rate)
    except ValueError:
        items = []
    if len(items) != 1 or items[0].amount < 1:
        raise InvalidInputError(
            f"--rate: expected a rate such as '600/minute' or '10/second', got {rate!r}"
        )
    return rate


class TokenRates:
    """The moving windows of tokens with a rate (``redis``: the fleet's client, whose
    connections the limiter shares; ``url``: its URL)."""

    def __init__(self, redis: Any, url: str, key_prefix: str) -> None:
        self._redis = redis
        self._url = url
        self._prefix = key_prefix
        self._lock = threading.Lock()
        self._limiter: Any = None

    def _open(self) -> Any:
        with self._lock:
            if self._limiter is None:
                from limits.storage import RedisStorage
                from limits.strategies import MovingWindowRateLimiter

                storage = RedisStorage(
                    self._url,
                    connection_pool=self._redis.connection_pool,
                    key_prefix=self._prefix,
                )
                self._limiter = MovingWindowRateLimiter(storage)
            return self._limiter

    def retry_after(self, token_id: str, rate: str) -> int | None:
        """Count one request of the token; ``None`` if its rate allows it, else the whole
        seconds until it would."""
        from limits import parse

        limiter = self._open()
        item = parse(rate)
        if limiter.hit(item, token_id):
            return None
        reset = float(limiter.get_window_stats(item, token_id).reset_time)
        return max(1, math.ceil(reset - time.time()))
