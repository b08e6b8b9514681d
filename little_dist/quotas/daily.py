"""Daily dollar ceilings per provider / model / API key, for a whole fleet.

``LITTLE_QUOTAS`` may hold, beside its rate ``rules``, ``daily`` ceilings::

    {"daily": [{"name": "openai-main-day", "provider": "openai", "key": "3f1c...",
                "usd": 50}]}

``provider``, ``model`` and ``key`` choose the calls as a rule's do
(:mod:`.rules`); ``usd`` is what all the calls a ceiling matches may cost in one UTC day,
whichever run, worker or process makes them. Before a call is sent its worst case (the
prompt's tokens and its output limit, priced as ``little report`` prices) is reserved
against every ceiling it falls under, atomically (all or none); after the call its priced
usage replaces the reservation (nothing, when the call failed). A call that would pass a
ceiling is not sent (the harness fails its step with ``daily_budget_exceeded``). A
reservation whose worker died before it settled stays counted at its worst case for its
day. The day is the worker's UTC date when the call is reserved; a ceiling's count of a
day is kept for two days.

Two backends, one rule: :class:`MemoryDailyBackend` (one process) and
:class:`RedisDailyBackend` (every worker of a fleet, one Lua script a reservation).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Final, Protocol

from little_dist.errors import StorageUnavailableError

__all__ = [
    "DailyBackend",
    "DailyCeiling",
    "MemoryDailyBackend",
    "RedisDailyBackend",
    "parse_daily",
]

#: A day's counts live this long in Redis (seconds): the day, and one more for late settles.
_KEEP_SECONDS: Final = 2 * 86400
_KEYS: Final = {"name", "provider", "model", "key", "usd"}


@dataclass(frozen=True)
class DailyCeiling:
    """What the calls it matches may cost in one UTC day, in dollars."""

    name: str
    usd: float
    provider: str = "*"
    model: str = "*"
    key: str = "*"

    def matches(self, call: Any) -> bool:
        return (
            fnmatchcase(call.provider, self.provider)
            and fnmatchcase(call.model, self.model)
            and fnmatchcase(call.key, self.key)
        )


def parse_daily(item: Any, index: int, error: type[Exception]) -> DailyCeiling:
    """``daily[index]`` of ``LITTLE_QUOTAS`` checked; ``error`` (one line) when unusable."""
    where = f"daily[{index}]"
    if not isinstance(item, Mapping):
        raise error(f"{where}: expected an object")
    unknown = set(item) - _KEYS
    if unknown:
        raise error(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    selectors: dict[str, str] = {}
    for field in ("provider", "model", "key"):
        value = item.get(field, "*")
        if not isinstance(value, str) or not value:
            raise error(f"{where}.{field}: expected a non-empty string")
        selectors[field] = value
    usd = item.get("usd")
    if isinstance(usd, bool) or not isinstance(usd, int | float) or not 0 < usd < 1e12:
        raise error(f"{where}.usd: expected a positive number of dollars, got {usd!r}")
    name = item.get("name", f"{selectors['provider']}/{selectors['model']}/{selectors['key']}/day")
    from little_dist.quotas.rules import _NAME

    if not isinstance(name, str) or not _NAME.match(name):
        raise error(
            f"{where}.name: expected letters, digits, '*', '.', '_', ':', '/' or '-', got {name!r}"
        )
    return DailyCeiling(name=name, usd=float(usd), **selectors)


class DailyBackend(Protocol):
    def reserve(
        self, ceilings: Sequence[DailyCeiling], day: str, reservation_id: str, usd: float
    ) -> DailyCeiling | None:
        """Take ``usd`` from every ceiling's count of ``day`` and return ``None``, or take
        nothing and return the (first) ceiling it would pass."""
        ...

    def settle(
        self, ceilings: Sequence[DailyCeiling], day: str, reservation_id: str, usd: float
    ) -> None:
        """Replace the reservation by what the call cost (once: a second settle is a no-op)."""
        ...

    def spent(self, ceiling: DailyCeiling, day: str) -> float:
        """What ``ceiling`` counts for ``day`` (settled and held)."""
        ...


class MemoryDailyBackend:
    """Daily counts in this process's memory (threads share them)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str, str], float] = {}

    def reserve(
        self, ceilings: Sequence[DailyCeiling], day: str, reservation_id: str, usd: float
    ) -> DailyCeiling | None:
        with self._lock:
            for ceiling in ceilings:
                if self._totals.get((ceiling.name, day), 0.0) + usd > ceiling.usd:
                    return ceiling
            for ceiling in ceilings:
                key = (ceiling.name, day)
                self._totals[key] = self._totals.get(key, 0.0) + usd
                self._held[(ceiling.name, day, reservation_id)] = usd
            return None

    def settle(
        self, ceilings: Sequence[DailyCeiling], day: str, reservation_id: str, usd: float
    ) -> None:
        with self._lock:
            for ceiling in ceilings:
                held = self._held.pop((ceiling.name, day, reservation_id), None)
                if held is not None:
                    key = (ceiling.name, day)
                    self._totals[key] = self._totals.get(key, 0.0) + usd - held

    def spent(self, ceiling: DailyCeiling, day: str) -> float:
        with self._lock:
            return self._totals.get((ceiling.name, day), 0.0)


# KEYS: one hash per ceiling (field "t": the day's total; "h:{id}": a held reservation).
# ARGV: id, usd, keep seconds, then each ceiling's usd. Returns 0, or the index (1-based)
# of the ceiling the reservation would pass.
_RESERVE: Final = """
local id, usd, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for n = 1, #KEYS do
  local total = tonumber(redis.call('HGET', KEYS[n], 't') or '0')
  if total + usd > tonumber(ARGV[3 + n]) then return n end
end
for n = 1, #KEYS do
  redis.call('HINCRBYFLOAT', KEYS[n], 't', usd)
  redis.call('HSET', KEYS[n], 'h:' .. id, usd)
  redis.call('EXPIRE', KEYS[n], keep)
end
return 0
"""

# ARGV: id, usd. A reservation settled before (or never made) changes nothing.
_SETTLE: Final = """
local id, usd = ARGV[1], tonumber(ARGV[2])
for n = 1, #KEYS do
  local held = redis.call('HGET', KEYS[n], 'h:' .. id)
  if held then
    redis.call('HDEL', KEYS[n], 'h:' .. id)
    redis.call('HINCRBYFLOAT', KEYS[n], 't', usd - tonumber(held))
  end
end
return 1
"""


def _key(ceiling: DailyCeiling, day: str) -> str:
    from little_dist.quotas.redis_backend import KEY_PREFIX

    return f"{KEY_PREFIX}day:{ceiling.name}:{day}"


class RedisDailyBackend:
    """Daily counts in Redis, shared by every process that uses the same server."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        import redis

        try:
            return script(keys=keys, args=args)
        except redis.RedisError as exc:
            raise StorageUnavailableError(f"quota store (Redis) failed: {exc}") from exc

    def reserve(
        self, ceilings: Sequence[DailyCeiling], day: str, reservation_id: str, usd: float
    ) -> DailyCeiling | None:
        keys = [_key(ceiling, day) for ceiling in ceilings]
        args: list[Any] = [reservation_id, repr(usd), _KEEP_SECONDS]
        args += [repr(ceiling.usd) for ceiling in ceilings]
        passed = int(self._run(self._reserve, keys, args))
        return ceilings[passed - 1] if passed else None

    def settle(
        self, ceilings: Sequence[DailyCeiling], day: str, reservation_id: str, usd: float
    ) -> None:
        keys = [_key(ceiling, day) for ceiling in ceilings]
        self._run(self._settle, keys, [reservation_id, repr(usd)])

    def spent(self, ceiling: DailyCeiling, day: str) -> float:
        import redis

        try:
            value = self._client.hget(_key(ceiling, day), "t")
        except redis.RedisError as exc:
            raise StorageUnavailableError(f"quota store (Redis) failed: {exc}") from exc
        return float(value) if value is not None else 0.0
