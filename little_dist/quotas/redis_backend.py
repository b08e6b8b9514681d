"""The Redis quota backend: the algorithm of :mod:`.backend` for every worker of a fleet.

Each call is one Lua script, one round trip, atomic across every rule it falls under (a
reservation takes from all of them or from none). Time is Redis's (``TIME``), so workers on
hosts with different clocks share one window. Per rule, four keys under one hash tag
(``{little:quota}``, one cluster slot): ``:f`` the calls in flight (a sorted set scored by
when their lease ends), ``:s`` the settled ones (scored by when they ended), ``:h`` the sums
of both (``r`` requests, ``i`` input, ``o`` output tokens) and ``:b`` when a 429 stops
blocking it. Entries are ``id|requests|input|output``.

Why a script of our own: the ``limits`` library's Redis strategies hit and test one counter
at a time, with no way to give back what a call did not use; a call here reserves an
estimate on several rules at once and settles it with the real usage after the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from little_dist.errors import StorageUnavailableError
from little_dist.quotas.backend import member
from little_dist.quotas.rules import Amounts, QuotaRule

__all__ = ["KEY_PREFIX", "RedisQuotaBackend"]

KEY_PREFIX: Final = "{little:quota}:"

_PRELUDE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function parse(entry)
  local r, i, o = string.match(entry, '|(%d+)|(%d+)|(%d+)$')
  return tonumber(r), tonumber(i), tonumber(o)
end
local function prune(f, s, h, period)
  local dr, di, dout = 0, 0, 0
  for _, key in ipairs({f, s}) do
    local gone = redis.call('ZRANGEBYSCORE', key, '-inf', now - period)
    for _, entry in ipairs(gone) do
      local r, i, o = parse(entry)
      dr, di, dout = dr + r, di + i, dout + o
    end
    if #gone > 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period) end
  end
  if dr > 0 then redis.call('HINCRBY', h, 'r', -dr) end
  if di > 0 then redis.call('HINCRBY', h, 'i', -di) end
  if dout > 0 then redis.call('HINCRBY', h, 'o', -dout) end
end
local function keep(f, s, h, b, seconds)
  local ms = math.ceil(seconds * 1000)
  for _, key in ipairs({f, s, h, b}) do redis.call('PEXPIRE', key, ms) end
end
"""

# ARGV: entry, requests, input, output, lease, then per rule: period, requests, tokens,
# input, output, concurrent (-1: no limit). Returns "0" or the seconds to wait.
_RESERVE: Final = (
    _PRELUDE
    + """
local entry, lease = ARGV[1], tonumber(ARGV[5])
local nr, ni, no = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local rules = #KEYS / 4
local wait = 0
for n = 0, rules - 1 do
  local f, s, h, b = KEYS[4*n+1], KEYS[4*n+2], KEYS[4*n+3], KEYS[4*n+4]
  local a = 6 + 6 * n
  local period = tonumber(ARGV[a])
  local poll = math.min(math.max(period / 100, 0.01), 0.25)
  prune(f, s, h, period)
  local blocked = tonumber(redis.call('GET', b) or '0')
  if blocked > now then wait = math.max(wait, blocked - now) end
  local concurrent = tonumber(ARGV[a+5])
  if concurrent >= 0 and redis.call('ZCARD', f) + 1 > concurrent then
    wait = math.max(wait, poll)
  end
  local sums = redis.call('HMGET', h, 'r', 'i', 'o')
  local sr, si, so = tonumber(sums[1] or '0'), tonumber(sums[2] or '0'), tonumber(sums[3] or '0')
  local checks = {
    {tonumber(ARGV[a+1]), sr + nr, 1}, {tonumber(ARGV[a+2]), si + so + ni + no, 4},
    {tonumber(ARGV[a+3]), si + ni, 2}, {tonumber(ARGV[a+4]), so + no, 3}}
  local settled = nil
  for _, check in ipairs(checks) do
    local limit, total, which = check[1], check[2], check[3]
    if limit >= 0 and total > limit then
      local excess, freed, till = total - limit, 0, nil
      settled = settled or redis.call('ZRANGE', s, 0, -1, 'WITHSCORES')
      for k = 1, #settled, 2 do
        local r, i, o = parse(settled[k])
        local amount = ({r, i, o, i + o})[which]
        freed = freed + amount
        if freed >= excess then till = tonumber(settled[k+1]) + period - now break end
      end
      wait = math.max(wait, till or poll)
    end
  end
end
if wait > 0 then return tostring(wait) end
for n = 0, rules - 1 do
  local f, s, h, b = KEYS[4*n+1], KEYS[4*n+2], KEYS[4*n+3], KEYS[4*n+4]
  redis.call('ZADD', f, now + lease, entry)
  redis.call('HINCRBY', h, 'r', nr)
  redis.call('HINCRBY', h, 'i', ni)
  redis.call('HINCRBY', h, 'o', no)
  keep(f, s, h, b, lease + tonumber(ARGV[6 + 6 * n]))
end
return '0'
"""
)

# ARGV: old entry, new entry, then per rule its period. A reservation no longer in flight
# (its lease ran out and it left the window) is not counted again.
_SETTLE: Final = (
    _PRELUDE
    + """
local old, new = ARGV[1], ARGV[2]
local orr, oi, oo = parse(old)
local nr, ni, no = parse(new)
for n = 0, #KEYS / 4 - 1 do
  local f, s, h, b = KEYS[4*n+1], KEYS[4*n+2], KEYS[4*n+3], KEYS[4*n+4]
  local period = tonumber(ARGV[3 + n])
  if redis.call('ZREM', f, old) == 1 then
    redis.call('ZADD', s, now, new)
    redis.call('HINCRBY', h, 'r', nr - orr)
    redis.call('HINCRBY', h, 'i', ni - oi)
    redis.call('HINCRBY', h, 'o', no - oo)
    if redis.call('PTTL', s) < period * 1000 then keep(f, s, h, b, period * 2) end
  end
end
return 1
"""
)

# ARGV: seconds, then per rule its period.
_BLOCK: Final = (
    _PRELUDE
    + """
local till = now + tonumber(ARGV[1])
for n = 0, #KEYS / 4 - 1 do
  local b = KEYS[4*n+4]
  if tonumber(redis.call('GET', b) or '0') < till then
    redis.call('SET', b, tostring(till), 'PX', math.ceil(tonumber(ARGV[1]) * 1000) + 1000)
  end
end
return 1
"""
)


def _keys(rules: Sequence[QuotaRule]) -> list[str]:
    return [
        KEY_PREFIX + rule.name + suffix for rule in rules for suffix in (":f", ":s", ":h", ":b")
    ]


def _limit(value: int | None) -> int:
    return -1 if value is None else value


class RedisQuotaBackend:
    """Quota windows in Redis, shared by every process that uses the same server."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._block = client.register_script(_BLOCK)

    def _run(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        import redis

        try:
            return script(keys=keys, args=args)
        except redis.RedisError as exc:
            raise StorageUnavailableError(f"quota store (Redis) failed: {exc}") from exc

    def reserve(
        self, rules: Sequence[QuotaRule], reservation_id: str, amounts: Amounts, lease: float
    ) -> float:
        args: list[Any] = [
            member(reservation_id, amounts),
            amounts.requests,
            amounts.input_tokens,
            amounts.output_tokens,
            lease,
        ]
        for rule in rules:
            args += [
                rule.period,
                _limit(rule.requests),
                _limit(rule.tokens),
                _limit(rule.input_tokens),
                _limit(rule.output_tokens),
                _limit(rule.concurrent),
            ]
        return float(self._run(self._reserve, _keys(rules), args))

    def settle(
        self,
        rules: Sequence[QuotaRule],
        reservation_id: str,
        reserved: Amounts,
        used: Amounts,
    ) -> None:
        args: list[Any] = [member(reservation_id, reserved), member(reservation_id, used)]
        args += [rule.period for rule in rules]
        self._run(self._settle, _keys(rules), args)

    def block(self, rules: Sequence[QuotaRule], seconds: float) -> None:
        self._run(self._block, _keys(rules), [seconds, *(rule.period for rule in rules)])
