"""``Idempotency-Key`` on ``POST /v1/runs``: one key, one body, one run.

The first request with a key stores ``(sha256 of its body, the run id it submits)`` under
the key (``SET NX`` with a time to live, :data:`TTL_SECONDS`); a request with the same key
and the same body answers that run id (and submits it again: submitting is idempotent on
the run id, so whichever request lands first starts the run and every answer names a run
that exists); another body with the same key is a conflict. The body's hash is of its
canonical JSON, so key order and whitespace do not matter.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from little_dist.canonical import sha256_digest

__all__ = ["MAX_KEY_LENGTH", "TTL_SECONDS", "Claim", "IdempotencyKeys", "body_hash"]

#: How long a key answers the same run: a day, as the usual APIs (Stripe) keep theirs.
TTL_SECONDS: Final = 24 * 3600
MAX_KEY_LENGTH: Final = 255


def body_hash(body: Any) -> str:
    return sha256_digest(body)


@dataclass(frozen=True)
class Claim:
    """What a key answers: the run id, whether this request stored it, and whether the
    stored body was another one (a conflict)."""

    run_id: str
    fresh: bool
    conflict: bool


class IdempotencyKeys:
    """Keys in the fleet's Redis (``key_of``: the Redis key of a key's sha256 hex)."""

    def __init__(self, redis: Any, key_of: Callable[[str], str]) -> None:
        self._redis = redis
        self._key_of = key_of

    def _redis_key(self, key: str) -> str:
        return self._key_of(hashlib.sha256(key.encode("utf-8")).hexdigest())

    def claim(self, key: str, digest: str, run_id: str) -> Claim:
        """Store ``(digest, run_id)`` under ``key`` unless it holds something already."""
        name = self._redis_key(key)
        value = json.dumps({"bodySha256": digest, "runId": run_id})
        if self._redis.set(name, value, nx=True, ex=TTL_SECONDS):
            return Claim(run_id, fresh=True, conflict=False)
        stored = self._redis.get(name)
        if stored is None:  # expired between the two calls: try once more
            return self.claim(key, digest, run_id)
        held = json.loads(stored)
        return Claim(str(held["runId"]), fresh=False, conflict=held["bodySha256"] != digest)

    def release(self, key: str, run_id: str) -> None:
        """Forget a key whose submission was refused (a stored claim for ``run_id`` only)."""
        name = self._redis_key(key)
        stored = self._redis.get(name)
        if stored is not None and json.loads(stored).get("runId") == run_id:
            self._redis.delete(name)
