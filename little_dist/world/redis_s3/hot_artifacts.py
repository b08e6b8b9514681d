"""The Redis hot tier for small artifacts: one round trip per put or get, moved to S3 on archive.

Every step of a parallel branch writes its (usually tiny) output as an artifact; two S3 puts
per artifact (blob, manifest) would dominate a wide fan-out. So an artifact whose bytes fit
under the world's ``hot_artifact_limit`` is kept in Redis while its run is live, the way the
run's events are: one hash per artifact (``manifest``: the manifest's canonical JSON, the same
bytes the S3 manifest object holds; ``data``: the stored bytes) plus the artifact id in the
run's hot set. They ride inside the run's archive (:meth:`HotArtifacts.archived` gives them to
it, :mod:`~little_dist.world.redis_s3.archive`): a small run's archive is one S3 put, not one
blob and one manifest per artifact; the Redis keys expire only once the archive is stored.

The put script writes only if the artifact is absent (the first writer's manifest and
``createdAt`` win, as with S3) and only while the run is not sealed: once the archive has
sealed the run, it reads the run's hot set, so a later put must go to S3 instead or it would
never be archived. Once the run's keys have expired Redis keeps nothing of it, so a put for
a run without a stream in Redis asks S3 first (``has_archive``): an archived run's late
artifact goes to S3, where nothing needs to expire it.

The artifact's hash is named by the artifact id alone (a reader has only the ref), so the
script touches two cluster slots: like the signal stream, the hot tier wants a single Redis
server (``hot_artifact_limit=0`` on a cluster).

Bytes are kept per artifact, not content-addressed: two artifacts with the same small payload
hold two copies in Redis and in the archive.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import redis

from little_dist.errors import InvalidInputError
from little_dist.ids import artifact_ref
from little_dist.world.artifacts import payload_sha256
from little_dist.world.base import ArtifactCorruptError, ArtifactManifest
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import LuaScript, redis_errors, text

__all__ = [
    "DEFAULT_HOT_ARTIFACT_LIMIT",
    "PUT_HOT_ARTIFACT",
    "HotArtifacts",
    "HotPut",
    "QueuedHotPut",
    "parse_manifest",
]

DEFAULT_HOT_ARTIFACT_LIMIT = 16 * 1024
_PAGE = 500  # artifacts read per pipeline while archiving
_ENCODINGS = ("json", "utf-8", "binary")

PUT_HOT_ARTIFACT = """
-- KEYS: 1 the artifact's hash, 2 the run's hot set, 3 the run's archived marker, 4 the
-- run's events stream
-- ARGV: 1 manifest JSON, 2 the stored bytes, 3 artifact id, 4 '1': the run is known to have
-- no archive (S3 was asked)
-- Result: 1 stored; 0 the run is sealed and nothing was written (the caller uses S3); -1
-- the run has no stream and ARGV[4] is not '1' (archived and gone, or not started: the
-- caller asks S3); or the manifest JSON already stored under this id (the first writer's).
local existing = redis.call('HGET', KEYS[1], 'manifest')
if existing then
  return existing
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return 0
end
if ARGV[4] ~= '1' and redis.call('EXISTS', KEYS[4]) == 0 then
  return -1
end
redis.call('HSET', KEYS[1], 'manifest', ARGV[1], 'data', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1
"""

#: What :meth:`HotArtifacts.put` answers: True (stored), None (sealed run: use S3), or the
#: manifest JSON already stored under the id.
HotPut = bool | bytes | None


class HotArtifacts:
    """Small artifacts of live runs in Redis (see the module docstring). Thread-safe."""

    def __init__(
        self,
        client: redis.Redis,
        keys: KeyLayout,
        limit: int,
        has_archive: Callable[[str], bool],
    ) -> None:
        """``has_archive(run_id)``: whether S3 holds the run's archive."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInputError(
                f"hot_artifact_limit must be a whole number of bytes >= 0, got {limit!r}"
            )
        self.limit = limit
        self._redis = client
        self._keys = keys
        self._has_archive = has_archive
        # Put-if-absent by artifact id: a second run answers the stored manifest.
        self._put_script = LuaScript(client, PUT_HOT_ARTIFACT, idempotent=True)
        # Typed here once: redis-py leaves execute_command unannotated.
        self._execute: Callable[..., Any] = client.execute_command

    def _script_keys(self, manifest: ArtifactManifest) -> list[str]:
        keys = self._keys.run(manifest.run_id)
        return [
            self._keys.hot_artifact(manifest.artifact_id),
            keys.artifacts,
            keys.archived,
            keys.events,
        ]

    def accepts(self, size: int) -> bool:
        """Whether an artifact of ``size`` stored bytes belongs in this tier."""
        return size <= self.limit and self.limit > 0

    def put(self, manifest: ArtifactManifest, body: bytes, data: bytes) -> HotPut:
        """Store ``data`` and its manifest JSON ``body`` unless the id is taken or sealed."""
        keys, checked = self._script_keys(manifest), ""
        while True:
            with redis_errors(f"put of artifact {manifest.artifact_id}"):
                result = self._put_script(keys, [body, data, manifest.artifact_id, checked])
            if isinstance(result, bytes):
                return result
            if int(result) != -1 or checked:
                return True if int(result) == 1 else None
            # No log of the run in Redis: an archived run's (S3 then), or one not started.
            if self._has_archive(manifest.run_id):
                return None
            checked = "1"

    def queued_put(self, manifest: ArtifactManifest, body: bytes, data: bytes) -> QueuedHotPut:
        """:meth:`put`, to be queued on a pipeline ahead of other commands (an attempt's
        commit): same script, one round trip with the rest; for a run without a stream in
        Redis it answers None (S3), without asking S3 whether the run was archived."""
        return QueuedHotPut(
            self._put_script,
            self._script_keys(manifest),
            [body, data, manifest.artifact_id, ""],
        )

    def get(self, artifact_id: str) -> tuple[bytes | None, bytes | None] | None:
        """``(manifest JSON, data)`` of a hot artifact (a field may be missing if tampered
        with), or None if it is not in Redis."""
        with redis_errors(f"get of artifact {artifact_id}"):
            body, data = self._execute(
                "HMGET", self._keys.hot_artifact(artifact_id), "manifest", "data"
            )
        if body is None and data is None:
            return None
        return body, data

    def archived(self, run_id: str) -> tuple[list[str], Iterator[tuple[bytes, bytes]]]:
        """The hot artifacts of a sealed run, for its archive to carry: the artifact ids
        (sorted: archiving again writes the same bytes), and ``(manifest JSON, data)`` of
        each still in Redis, read a page at a time (memory stays bounded). An id whose hash
        is already gone was archived before (its keys expire only after the archive is
        stored). Bytes that do not match their manifest are refused."""
        run_set = self._keys.run(run_id).artifacts
        what = f"archive of the artifacts of {run_id}"
        with redis_errors(what):
            ids = sorted(text(member) for member in self._redis.smembers(run_set))

        def rows() -> Iterator[tuple[bytes, bytes]]:
            for start in range(0, len(ids), _PAGE):
                page = ids[start : start + _PAGE]
                with redis_errors(what):
                    pipe = self._redis.pipeline(transaction=False)
                    for artifact_id in page:
                        pipe.hmget(self._keys.hot_artifact(artifact_id), "manifest", "data")
                    found = pipe.execute()
                for artifact_id, (body, data) in zip(page, found, strict=True):
                    if body is None and data is None:
                        continue
                    _checked_sha256(artifact_id, body, data)
                    yield body, data

        return [run_set, *(self._keys.hot_artifact(artifact_id) for artifact_id in ids)], rows()


class QueuedHotPut:
    """A hot put queued on a pipeline (``queue``), and its answer once it ran (``done``):
    the :data:`HotPut` of :meth:`HotArtifacts.put`."""

    def __init__(self, script: LuaScript, keys: list[str], args: list[Any]) -> None:
        self._script = script
        self._keys = keys
        self._args = args
        self.answer: HotPut = None

    def queue(self, pipe: Any) -> None:
        self._script.queue(pipe, self._keys, self._args)

    def done(self, reply: Any) -> None:
        if isinstance(reply, Exception):
            raise reply
        self.answer = reply if isinstance(reply, bytes) else int(reply) == 1 or None


def _checked_sha256(artifact_id: str, body: bytes | None, data: bytes | None) -> str:
    """The hex sha256 the manifest names, once the stored bytes are checked against it."""
    ref = artifact_ref(artifact_id)
    if body is None or data is None:
        raise ArtifactCorruptError(ref, "its Redis hash lacks the manifest or the bytes")
    manifest = parse_manifest(ref, body)
    if manifest.artifact_id != artifact_id:
        raise ArtifactCorruptError(ref, "the manifest names another artifact")
    if payload_sha256(data) != manifest.sha256 or len(data) != manifest.size_bytes:
        raise ArtifactCorruptError(ref, "bytes in Redis do not match the manifest")
    return manifest.sha256.removeprefix("sha256:")


def parse_manifest(ref: str, body: bytes) -> ArtifactManifest:
    """A stored manifest JSON (Redis or S3), or :class:`ArtifactCorruptError` naming ``ref``."""
    try:
        manifest = ArtifactManifest.from_json(json.loads(body))
    except (ValueError, KeyError, TypeError) as error:
        raise ArtifactCorruptError(ref, f"malformed manifest: {error}") from error
    if manifest.encoding not in _ENCODINGS:
        raise ArtifactCorruptError(ref, f"unknown encoding {manifest.encoding!r}")
    return manifest
