"""Leases on Redis: a hash (holder, token, expiry) per lease, fencing tokens from ``INCR``.

A lease is a Redis hash (holder, token, expiry in Redis server milliseconds) with a
PEXPIRE; fencing tokens come from ``INCR`` on a per-lease counter, so they only grow. The
counters of a run's leases are fields of one hash of the run (``{run_x}:tokens``), which
expires with the run's log once it is archived (a sealed run takes no fenced write). Expiry
is judged by the Redis server's clock, so the clocks of the machines that hold leases do not
matter. A fenced append checks the lease in the append script; on a Redis cluster the lease
must then live in the run's slot: build its name with
:func:`~little_dist.world.redis_s3.keys.lease_key_for`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis

from little_dist.errors import LeaseLostError
from little_dist.world.base import Lease, LeaseRequest
from little_dist.world.defaults import check_lease_request
from little_dist.world.redis_s3 import scripts
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import (
    LuaScript,
    execute_pipeline,
    ms,
    redis_errors,
)

__all__ = ["COUNTER_TTL_MS", "AcquireTail", "LeaseStore"]

# The token counter outlives any lease by far, so a token is never handed out twice.
COUNTER_TTL_MS = 30 * 24 * 3600 * 1000


class LeaseStore:
    """Acquire, renew and release leases; ``now_ms`` is ``""`` for Redis server time."""

    def __init__(
        self, client: redis.Redis, keys: KeyLayout, now_ms: Callable[[], int | str]
    ) -> None:
        self._client = client
        self._keys = keys
        self._now_ms = now_ms
        # All three may be sent again after a lost reply. An acquire that ran finds the lease
        # held by its own holder (unique per call) and answers the same token without a new
        # INCR; a renewal that ran finds its token and extends again; a release that ran
        # finds nothing of its own to delete.
        self._acquire = LuaScript(client, scripts.ACQUIRE_LEASE, idempotent=True)
        self._renew = LuaScript(client, scripts.RENEW_LEASE, idempotent=True)
        self._release = LuaScript(client, scripts.RELEASE_LEASE, idempotent=True)

    def acquire(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        check_lease_request(key, holder, ttl_seconds)
        with redis_errors(f"acquire of lease {key!r}"):
            reply = self._acquire(*self._acquire_call(key, holder, ttl_seconds))
        return _lease_of(key, holder, reply)

    def acquire_many(self, requests: Sequence[LeaseRequest]) -> list[Lease | None]:
        """Each request's acquire, in order, in one pipeline (one round trip instead of one
        per lease: a wide fan-out schedules hundreds of attempts at once). Each acquire is
        atomic on its own, as :meth:`acquire` is."""
        for request in requests:
            check_lease_request(request.key, request.holder, request.ttl_seconds)
        if len(requests) < 2:
            return [self.acquire(r.key, r.holder, r.ttl_seconds) for r in requests]
        with redis_errors(f"acquire of {len(requests)} leases"):
            pipe = self._client.pipeline(transaction=False)
            for request in requests:
                self._acquire.queue(
                    pipe, *self._acquire_call(request.key, request.holder, request.ttl_seconds)
                )
            replies = execute_pipeline(pipe)
        return [
            _lease_of(request.key, request.holder, reply)
            for request, reply in zip(requests, replies, strict=True)
        ]

    def acquiring(self, request: LeaseRequest) -> AcquireTail:
        """The acquire of ``request`` as a command to queue in another call's pipeline."""
        check_lease_request(request.key, request.holder, request.ttl_seconds)
        return AcquireTail(self, request)

    def _acquire_call(
        self, key: str, holder: str, ttl_seconds: float
    ) -> tuple[list[str], list[str | int]]:
        lease_key, old_counter = self._keys.lease(key)
        counter, field = self._keys.lease_counter(key)
        args: list[str | int] = [holder, ms(ttl_seconds), COUNTER_TTL_MS, self._now_ms(), field]
        # A run's lease counts in the run's hash; its counter of old (before the hash) is
        # taken over once, so a token is never handed out twice across the change.
        if not field:
            return [lease_key, counter], args
        run = self._keys.run(key[1 : key.index("}")])  # (a run's lease: named {run_x}:...)
        return [lease_key, counter, old_counter, run.events], args

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


class AcquireTail:
    """An acquire queued after an append (``EventLog.append_batch(then=...)``): ``lease``
    is set once the pipeline ran."""

    def __init__(self, store: LeaseStore, request: LeaseRequest) -> None:
        self._store = store
        self._request = request
        self.lease: Lease | None = None

    def queue(self, pipe: Any) -> None:
        request = self._request
        keys, args = self._store._acquire_call(request.key, request.holder, request.ttl_seconds)
        self._store._acquire.queue(pipe, keys, args)

    def done(self, reply: Any) -> None:
        self.lease = _lease_of(self._request.key, self._request.holder, reply)


def _lease_of(key: str, holder: str, reply: Any) -> Lease | None:
    if reply is None:
        return None
    token, expires_ms = reply
    return Lease(key=key, holder=holder, token=int(token), expires_at=int(expires_ms) / 1000)
