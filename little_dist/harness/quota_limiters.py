"""Where a limiter comes from: the fleet's Redis, or this process's memory.

A fleet worker builds one :class:`~little_dist.quotas.limiter.QuotaLimiter` on the fleet's Redis
(:func:`fleet_limiter`) and gives it to its attempts (``Capabilities.quotas``). A model call
given none (``little run``, ``run_workflow`` in process) uses :func:`process_limiter`: the
rules ``LITTLE_QUOTAS`` holds now, over windows in this process's memory that every run of
the process shares (a quota belongs to the key, not to a run).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from little_dist.quotas.limiter import QuotaLimiter
from little_dist.quotas.memory import MemoryQuotaBackend
from little_dist.quotas.rules import parse_quotas

if TYPE_CHECKING:
    from little_dist.settings import QuotaSettings, Settings

__all__ = ["fleet_limiter", "process_limiter"]

_lock = threading.Lock()
# (rules text, max wait, lease) -> the limiter of this process for them.
_made: dict[tuple[str, float, float], QuotaLimiter] = {}


def process_limiter(settings: QuotaSettings | None = None) -> QuotaLimiter | None:
    """The in-memory limiter of the quota settings (default: the process environment's);
    ``None`` when ``LITTLE_QUOTAS`` is unset."""
    if settings is None:
        from little_dist.settings import load_quota_settings

        settings = load_quota_settings()
    if settings.quotas is None:
        return None
    key = (settings.quotas, settings.quota_max_wait, settings.quota_lease)
    with _lock:
        found = _made.get(key)
        if found is None:
            found = QuotaLimiter(
                parse_quotas(settings.quotas),
                MemoryQuotaBackend(),
                max_wait=settings.quota_max_wait,
                lease=settings.quota_lease,
            )
            _made[key] = found
        return found


def fleet_limiter(settings: Settings, client: Any | None) -> QuotaLimiter | None:
    """The limiter a fleet worker gives its attempts: on the fleet's Redis ``client`` (in
    memory when the world is not on Redis: ``None``); ``None`` when ``LITTLE_QUOTAS`` is
    unset."""
    if settings.quotas is None:
        return None
    from little_dist.quotas.daily import RedisDailyBackend
    from little_dist.quotas.redis_backend import RedisQuotaBackend

    if client is None:
        return process_limiter(settings)
    return QuotaLimiter(
        parse_quotas(settings.quotas),
        RedisQuotaBackend(client),
        max_wait=settings.quota_max_wait,
        lease=settings.quota_lease,
        daily=RedisDailyBackend(client),
        give_back_after=settings.quota_give_back_after,
    )
