"""Fleet-wide provider quotas: requests, tokens and concurrent calls per provider, model and
API key, shared by every worker.

* :mod:`.rules` (pure): ``LITTLE_QUOTAS`` parsed and checked; which rules a call falls under;
* :mod:`.backend`: the interface and the algorithm (reserve, settle, block), implemented by
  :mod:`.memory` (one process) and :mod:`.redis_backend` (one Lua script a call);
* :mod:`.limiter`: :class:`QuotaLimiter`, what a model call goes through
  (:func:`little_dist.harness.model_calls.call_model` is the one seam);
* :mod:`.estimate`: what a call reserves (litellm's token counter, its ``max_tokens``);
* :mod:`.process`: the limiter of a fleet worker (Redis) or of this process (memory).

How waits work and what a 429 does: ``docs/operations.md``, "Provider quotas".
"""

from __future__ import annotations

from little_dist.quotas.backend import QuotaBackend
from little_dist.quotas.estimate import call_identity, estimate_amounts
from little_dist.quotas.limiter import (
    QuotaLimiter,
    QuotaTooSmall,
    QuotaWaitTooLong,
    Reservation,
)
from little_dist.quotas.memory import MemoryQuotaBackend
from little_dist.quotas.process import fleet_limiter, process_limiter
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
    "QuotaWaitTooLong",
    "RedisQuotaBackend",
    "Reservation",
    "call_identity",
    "estimate_amounts",
    "fleet_limiter",
    "key_fingerprint",
    "parse_quotas",
    "process_limiter",
]
