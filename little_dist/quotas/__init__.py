"""Fleet-wide provider quotas: requests, tokens and concurrent calls per provider, model and
API key, shared by every worker.

* :mod:`.rules` (pure): ``LITTLE_QUOTAS`` parsed and checked; which rules a call falls under;
* :mod:`.backend`: the interface and the algorithm (reserve, settle, block), implemented by
  :mod:`.memory` (one process) and :mod:`.redis_backend` (one Lua script a call);
* :mod:`.limiter`: :class:`QuotaLimiter`, what a model call goes through
  (:func:`little_dist.harness.model_calls.call_model` is the one seam);

What a call reserves (litellm's token counter, its ``max_tokens``) is
:mod:`little_dist.harness.quota_estimate`; which limiter a call goes through (a fleet
worker's on Redis, else this process's in memory) is :mod:`little_dist.harness.quota_limiters`:
both need what lies above this package (litellm, the settings), which imports nothing of
little_dist but its errors.

How waits work and what a 429 does: ``docs/operations.md``, "Provider quotas".
"""

from __future__ import annotations

from little_dist.quotas.backend import QuotaBackend
from little_dist.quotas.limiter import (
    QuotaLimiter,
    QuotaTooSmall,
    QuotaWaitGivenBack,
    QuotaWaitTooLong,
    Reservation,
)
from little_dist.quotas.memory import MemoryQuotaBackend
from little_dist.quotas.redis_backend import RedisQuotaBackend
from little_dist.quotas.rules import (
    Amounts,
    CallIdentity,
    QuotaConfigError,
    QuotaRule,
    QuotaRules,
    key_fingerprint,
    parse_quotas,
)

__all__ = [
    "Amounts",
    "CallIdentity",
    "MemoryQuotaBackend",
    "QuotaBackend",
    "QuotaConfigError",
    "QuotaLimiter",
    "QuotaRule",
    "QuotaRules",
    "QuotaTooSmall",
    "QuotaWaitGivenBack",
    "QuotaWaitTooLong",
    "RedisQuotaBackend",
    "Reservation",
    "key_fingerprint",
    "parse_quotas",
]
