"""Memory stores of a :class:`~little_dist.world.redis_s3.RedisS3World`: S3 blobs, a Redis index.

A file's bytes are an immutable S3 object named by their digest
(``<s3 prefix>memory/blobs/<sha256 hex>``, put-if-absent: writing it twice is harmless). Which
blob each path of a store holds now is a Redis hash per store (``<prefix>memory:<store>``,
field = path, value = ``{"v": version, "s": "sha256:..." or "" when deleted, "n": size}``).
S3 never holds a mutable index (its ``If-Match`` is not a safe compare-and-swap on every
S3-compatible server; see DESIGN.md).

:meth:`RedisS3MemoryStore.commit` uploads the new blobs first, then runs one Lua script that
compares every change's base version with the hash's and applies the change or keeps it
under its conflict path, atomically: two workers committing to one file are ordered by Redis,
and the later one's change, made from a version that is no longer current, is kept beside it.
A blob whose commit never ran is an unreferenced object, never a visible file.

A commit with a ``fence`` passes the fence's lease hash as a second key, and the same script
checks it as a fenced append of the event log does (token, holder, expiry by the Redis
server's clock, or the world's test clock): a lease lost or taken over refuses the whole
commit before any path is touched (:class:`~little_dist.errors.LeaseLostError`). The store's
hash and a run's lease are two cluster slots: like the signal stream and the hot tier, a
fenced memory commit wants a single Redis server.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import redis

from little_dist.errors import InvalidInputError, LeaseLostError
from little_dist.memory.store import (
    Applied,
    MemoryChange,
    MemoryEntry,
    MemoryNotFoundError,
    check_memory_path,
    check_store_id,
    conflict_path,
)
from little_dist.world.redis_s3.redis_calls import LuaScript, redis_errors
from little_dist.world.redis_s3.s3 import S3Objects

if TYPE_CHECKING:
    from little_dist.world.base import Fence

__all__ = ["RedisS3MemoryStore"]

# KEYS[1]: the store's hash, KEYS[2] the fence's lease hash when ARGV[2] is set. ARGV: n,
# the fence ('' or token, '@' and now in ms when the world has its own clock, '|' and the
# holder), then per change path, base, sha ("" = delete), size, conflict path. Returns per
# change {outcome, version, current}, or {'fenced'} (nothing written).
_COMMIT = """
local key = KEYS[1]
local n = tonumber(ARGV[1])
if ARGV[2] ~= '' then
  local token, now, holder = string.match(ARGV[2], '^(%d+)@?(%d*)|?(.*)$')
  now = tonumber(now)
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local lease = redis.call('HMGET', KEYS[2], 'token', 'exp', 'holder')
  if lease[1] ~= token or not lease[2] or tonumber(lease[2]) <= now
      or (holder ~= '' and lease[3] ~= holder) then
    return {'fenced'}
  end
end
local out = {}
local function now(path)
  local raw = redis.call('HGET', key, path)
  if not raw then return {v = 0, s = '', n = 0} end
  return cjson.decode(raw)
end
local function put(path, version, sha, size)
  redis.call('HSET', key, path, cjson.encode({v = version, s = sha, n = size}))
end
for i = 0, n - 1 do
  local at = 3 + i * 5
  local path, base, sha = ARGV[at], tonumber(ARGV[at + 1]), ARGV[at + 2]
  local size, kept = tonumber(ARGV[at + 3]), ARGV[at + 4]
  local cur = now(path)
  if cur.s == sha then
    out[#out + 1] = {'unchanged', cur.v, cur.v}
  elseif cur.v == base then
    put(path, cur.v + 1, sha, size)
    out[#out + 1] = {sha == '' and 'deleted' or 'written', cur.v + 1, cur.v}
  elseif sha == '' then
    out[#out + 1] = {'conflict-dropped', cur.v, cur.v}
  else
    local other = now(kept)
    if other.s == sha then
      out[#out + 1] = {'conflict', other.v, cur.v}
    else
      put(kept, other.v + 1, sha, size)
      out[#out + 1] = {'conflict', other.v + 1, cur.v}
    end
  end
end
return out
"""


class RedisS3MemoryStore:
    """The memory stores of one Redis and one bucket (see the module docstring).
    ``lease_key`` names the Redis hash of a lease (the World's layout) and ``now_ms`` the
    time leases are judged by (``""``: the Redis server's); without ``lease_key`` a fenced
    commit is refused."""

    def __init__(
        self,
        redis_client: redis.Redis,
        objects: S3Objects,
        *,
        key_prefix: str,
        s3_prefix: str,
        lease_key: Callable[[str], str] | None = None,
        now_ms: Callable[[], int | str] = lambda: "",
    ) -> None:
        self._redis = redis_client
        self._objects = objects
        self._key_prefix = key_prefix
        self._s3_prefix = s3_prefix
        self._lease_key = lease_key
        self._now_ms = now_ms
        self._commit = LuaScript(redis_client, _COMMIT, idempotent=True)

    def entries(self, store_id: str) -> Mapping[str, MemoryEntry]:
        with redis_errors(f"reading memory store {store_id}"):
            raw = self._redis.hgetall(self._key(store_id))
        found: dict[str, MemoryEntry] = {}
        for field, value in raw.items():
            path = field.decode() if isinstance(field, bytes) else str(field)
            data: dict[str, Any] = json.loads(value)
            sha = data.get("s") or None
            found[path] = MemoryEntry(path, int(data["v"]), sha, int(data.get("n", 0)))
        return found

    def read(self, store_id: str, entry: MemoryEntry) -> bytes:
        if entry.sha256 is None:
            raise MemoryNotFoundError(f"memory {store_id}: {entry.path!r} was deleted")
        data = self._objects.get(self._blob(entry.sha256))
        if data is None:
            raise MemoryNotFoundError(
                f"memory {store_id}: the bytes of {entry.path!r} ({entry.sha256}) are missing"
            )
        return data

    def commit(
        self,
        store_id: str,
        changes: Sequence[MemoryChange],
        *,
        writer: str,
        fence: Fence | None = None,
    ) -> list[Applied]:
        keys = [self._key(store_id)]
        args: list[str | int] = [len(changes), ""]
        if fence is not None:
            if self._lease_key is None:
                raise InvalidInputError(f"memory {store_id}: this store cannot check a fence")
            keys.append(self._lease_key(fence.key))
            now = self._now_ms()
            args[1] = (
                f"{fence.token}"
                + ("" if now == "" else f"@{now}")
                + ("" if fence.holder is None else f"|{fence.holder}")
            )
        shas: list[str | None] = []
        for change in changes:
            check_memory_path(change.path)
            sha = None
            if change.data is not None:
                sha = "sha256:" + hashlib.sha256(change.data).hexdigest()
                self._objects.put_if_absent(
                    self._blob(sha), change.data, "application/octet-stream"
                )
            shas.append(sha)
            size = 0 if change.data is None else len(change.data)
            args += [change.path, change.base, sha or "", size, conflict_path(change.path, writer)]
        with redis_errors(f"committing memory store {store_id}"):
            replies = self._commit(keys, args)
        if replies and replies[0] in (b"fenced", "fenced"):
            assert fence is not None
            raise LeaseLostError(
                f"memory {store_id}: lease {fence.key!r} is no longer held with token "
                f"{fence.token}; nothing was published"
            )
        applied = []
        for change, sha, reply in zip(changes, shas, replies, strict=True):
            outcome = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
            size = 0 if change.data is None else len(change.data)
            kept = conflict_path(change.path, writer) if outcome == "conflict" else None
            applied.append(
                Applied(change.path, outcome, int(reply[1]), int(reply[2]), sha, size, kept)  # type: ignore[arg-type]
            )
        return applied

    def _key(self, store_id: str) -> str:
        return f"{self._key_prefix}memory:{check_store_id(store_id)}"

    def _blob(self, sha: str) -> str:
        return f"{self._s3_prefix}memory/blobs/{sha.removeprefix('sha256:')}"
