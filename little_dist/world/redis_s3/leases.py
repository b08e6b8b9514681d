"""Leases on Redis: a hash (holder, token, expiry) per lease, fencing tokens from ``INCR``.

A lease is a Redis hash (holder, token, expiry in Redis server milliseconds) with a
PEXPIRE; fencing tokens come from ``INCR`` on a per-lease counter, so they only grow. Expiry
is judged by the Redis server's clock, so the clocks of the machines that hold leases do not
matter. A fenced append checks the lease in the append script; on a Redis cluster the lease
must then live in the run's slot: build its name with
:func:`~little_dist.world.redis_s3.keys.lease_key_for`.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from little_dist.errors import LeaseLostError
from little_dist.world.base import Lease, check_lease_request
from little_dist.world.redis_s3 import scripts
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import LuaScript, ms, redis_errors

__all__ = ["LeaseStore"]

# The token counter outlives any lease by far, so a token is never handed out twice.
_COUNTER_TTL_MS = 30 * 24 * 3600 * 1000


class LeaseStore:
    """Acquire, renew and release leases; ``now_ms`` is ``""`` for Redis server time."""

    def __init__(
        self, client: redis.Redis, keys: KeyLayout, now_ms: Callable[[], int | str]
    ) -> None:
        self._keys = keys
        self._now_ms = now_ms
        self._acquire = LuaScript(client, scripts.ACQUIRE_LEASE)
        self._renew = LuaScript(client, scripts.RENEW_LEASE)
        self._release = LuaScript(client, scripts.RELEASE_LEASE)

    def acquire(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        check_lease_request(key, holder, ttl_seconds)
        lease_key, counter_key = self._keys.lease(key)
        with redis_errors(f"acquire of lease {key!r}"):
            reply = self._acquire(
                [lease_key, counter_key],
                [holder, ms(ttl_seconds), _COUNTER_TTL_MS, self._now_ms()],
            )
        if reply is None:
            return None
        token, expires_ms = reply
        return Lease(key=key, holder=holder, token=int(token), expires_at=int(expires_ms) / 1000)

    def renew(self, lease: Lease, ttl_seconds: float) -> Lease:
        check_lease_request(lease.key, lease.holder, ttl_seconds)
        lease_key, _ = self._keys.lease(lease.key)
        with redis_errors(f"renewal of lease {lease.key!r}"):
            reply = self._renew(
                [lease_key], [lease.holder, lease.token, ms(ttl_seconds), self._now_ms()]
            )
        if reply is None:
            raise LeaseLostError(f"Lease {lease.key!r} is no longer held with token {lease.token}")
        return Lease(lease.key, lease.holder, lease.token, int(reply) / 1000)

    def release(self, lease: Lease) -> None:
        lease_key, _ = self._keys.lease(lease.key)
        with redis_errors(f"release of lease {lease.key!r}"):
            self._release([lease_key], [lease.holder, lease.token])
