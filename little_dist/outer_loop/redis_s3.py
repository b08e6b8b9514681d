"""Outer-loop manifests of a :class:`~little_dist.world.redis_s3.RedisS3World`: Redis holds
the current one, S3 a copy of every revision.

``<prefix>outer-loop:{outerLoopId}`` is a hash: ``json`` (the manifest's stored text) and
``rev`` (its revision, 1 for the first write, one more per write: the etag). One Lua script
compares the caller's revision with the stored one and writes only on a match, so of two
writers that read the same revision exactly one lands (S3's ``If-Match`` is not a safe
compare-and-swap on every S3-compatible server; see DESIGN.md).

After a write lands, its text is mirrored to ``<s3 prefix>outer-loops/{outerLoopId}/
{rev:012d}-{sha256 hex of the text}.json``, put-if-absent: immutable, one object per
revision (named by its content too, so a Redis that lost a revision never makes two texts
claim one name), and the bucket keeps the loop's whole history beside the runs it archives.
A writer that dies between the two leaves that revision without its copy; the next
revision's is written as usual.
"""

from __future__ import annotations

import hashlib
from typing import Any

import redis

from little_dist.outer_loop.manifest import (
    OuterLoopManifest,
    manifest_text,
    parse_manifest_text,
    validate_outer_loop_id,
)
from little_dist.outer_loop.store import ManifestConflictError, StoredManifest
from little_dist.world.redis_s3.redis_calls import LuaScript, redis_errors
from little_dist.world.redis_s3.s3 import S3Objects

__all__ = ["RedisS3ManifestStore"]

# KEYS[1]: the loop's hash. ARGV: 1 expected revision ('' = none stored), 2 the new text.
# Returns the new revision, or {'conflict', current revision or ''}.
_WRITE = """
local current = redis.call('HGET', KEYS[1], 'rev')
if (current or '') ~= ARGV[1] then
  return {'conflict', current or ''}
end
local rev = tonumber(current or '0') + 1
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'rev', rev)
return rev
"""


class RedisS3ManifestStore:
    """The outer-loop manifests of one Redis and one bucket (see the module docstring)."""

    def __init__(
        self, redis_client: redis.Redis, objects: S3Objects, *, key_prefix: str, s3_prefix: str
    ) -> None:
        self._redis = redis_client
        self._objects = objects
        self._key_prefix = key_prefix
        self._s3_prefix = s3_prefix
        # Not idempotent: a write sent twice after a lost reply would meet its own revision.
        self._write = LuaScript(redis_client, _WRITE, idempotent=False)

    def read(self, outer_loop_id: str) -> StoredManifest | None:
        key = self._key(outer_loop_id)
        with redis_errors(f"reading outer loop {outer_loop_id}"):
            text, revision = self._redis.hmget(key, ["json", "rev"])
        if text is None or revision is None:
            return None
        manifest = parse_manifest_text(_text(text), f"outer loop {outer_loop_id} (Redis)")
        return StoredManifest(manifest, _text(revision))

    def write(self, manifest: OuterLoopManifest, *, expected: str | None) -> str:
        loop_id = manifest.outer_loop_id
        text = manifest_text(manifest)
        with redis_errors(f"writing outer loop {loop_id}"):
            reply = self._write([self._key(loop_id)], [expected or "", text])
        if isinstance(reply, list):
            raise ManifestConflictError(loop_id)
        revision = int(reply)
        body = text.encode("utf-8")
        self._objects.put_if_absent(
            self.mirror_key(loop_id, revision, body), body, "application/json"
        )
        return str(revision)

    def mirror_key(self, outer_loop_id: str, revision: int, body: bytes) -> str:
        """The S3 object that keeps revision ``revision`` (stored text ``body``) of the
        loop's manifest."""
        loop_id = validate_outer_loop_id(outer_loop_id)
        digest = hashlib.sha256(body).hexdigest()
        return f"{self._s3_prefix}outer-loops/{loop_id}/{revision:012d}-{digest}.json"

    def _key(self, outer_loop_id: str) -> str:
        return f"{self._key_prefix}outer-loop:{validate_outer_loop_id(outer_loop_id)}"


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
