"""Archiving a finished run: seal its Redis stream, write the whole log to S3, expire the keys.

Streams are never trimmed, so a run's stream is its whole log until it is archived. The
archive is ``archives/<run_id>.ndjson``, one ``Event.to_json()`` a line, written
put-if-absent and streamed: read from Redis a page at a time and uploaded a part at a time
(:meth:`~little_dist.world.redis_s3.s3.S3Objects.put_stream_if_absent`), so a long log is
never held whole in memory. An archive already in S3 (an earlier or concurrent archive of
the run) must hold the same bytes: its digest is compared with the log's, and another
content raises :class:`~little_dist.errors.EventLogCorruptError` (a run id whose log was
written twice, e.g. after Redis forgot the run), leaving S3 as it was.
Sealing (the run's ``archived`` marker, set by one script) comes first: from
then on appends of new events fail with :class:`RunSealedError`, already-recorded occurrence
ids still resolve, and reads fall back to the archive once the stream has expired.

Nothing of a run's log stays in Redis: its stream, occurrence index, submission claim, end
marker and lease token counters expire ``ttl_seconds`` (default five minutes) after the
archive, its seal marker a little later, and it leaves the run index at once. What stays is
its outcome (:mod:`~little_dist.world.redis_s3.outcomes`: how it ended, bounded in size),
written again by the archive and kept a day after it, so that a watcher with only a Redis
client learns how a run ended after its log left Redis; then Redis holds not a byte of the
run, however many runs the fleet has archived: a run without a stream is read from S3, and
no append starts a log under its id without first asking S3 whether it was archived
(:mod:`~little_dist.world.redis_s3.events`).

The run's small artifacts held in Redis (the hot tier, see
:mod:`~little_dist.world.redis_s3.hot_artifacts`) ride inside the archive, after the events:
one line each, ``{"artifactManifest": <the manifest's JSON>, "data": <base64 bytes>}``, in
artifact id order (archiving again writes the same bytes). A small run's archive is one S3
put however many steps wrote an output. Their keys expire with the stream's, in the same
transaction: nothing leaves Redis before the archive holds it, so an archive that fails
half-way is simply run again. Once the keys are gone, :meth:`RunArchives.artifact` reads an
artifact from its run's archive (cached, as the events are).
"""

from __future__ import annotations

import base64
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

import redis

from little_dist.errors import (
    ConflictError,
    EventLogCorruptError,
    InvalidInputError,
    RunEndedError,
)
from little_dist.events import Event
from little_dist.ids import artifact_ref, validate_run_id
from little_dist.world.base import RunNotFoundError
from little_dist.world.redis_s3 import scripts
from little_dist.world.redis_s3.hot_artifacts import HotArtifacts, parse_manifest
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.outcomes import RunOutcomes
from little_dist.world.redis_s3.redis_calls import LuaScript, redis_errors
from little_dist.world.redis_s3.s3 import S3Objects

__all__ = [
    "DEFAULT_ARCHIVE_TTL_SECONDS",
    "RunArchives",
    "RunNotEndedError",
    "RunSealedError",
    "StreamReader",
]

DEFAULT_ARCHIVE_TTL_SECONDS = 300
_CACHE_SIZE = 32
_PAGE = 1000
_KEYS_PER_COMMAND = 1000
#: How much longer than the run's stream its seal marker stays.
_MARKER_MARGIN_MS = 10_000
#: What the seal script answers for a log that holds no end.
_NOT_ENDED = -2
#: The archive's upload part (S3 takes 5 MiB at least): what archiving holds in memory.
_PART_BYTES = 8 * 1024 * 1024

#: ``(run_id, after, limit)`` -> the stream's events after ``after`` (at most ``limit``).
StreamReader = Callable[[str, int, int | None], list[Event]]


class RunSealedError(RunEndedError):
    """The run was archived: its log is closed and no new event can be appended (only a run
    that has ended is archived)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.args = (f"Run {run_id} is archived; its event log accepts no new events",)


class RunNotEndedError(ConflictError):
    """The run's log holds no end (RunCompleted or RunFailed): it is not sealed. An archive
    asked for by a process that saw the end, which Redis then lost in a crash."""

    retryable: ClassVar[bool] = False

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"Run {run_id} has not ended: its log holds no RunCompleted or RunFailed, so it is "
            "not archived"
        )
        self.run_id = run_id


class RunArchives:
    """Archives in S3: written by :meth:`archive`, read (and cached) by :meth:`events`."""

    def __init__(
        self,
        client: redis.Redis,
        objects: S3Objects,
        keys: KeyLayout,
        ttl_seconds: float,
        hot_artifacts: HotArtifacts | None = None,
        outcomes: RunOutcomes | None = None,
    ) -> None:
        if ttl_seconds < 0:
            raise InvalidInputError("archive_ttl_seconds must be >= 0")
        self._redis = client
        self._s3 = objects
        self._keys = keys
        self._ttl = ttl_seconds
        self._hot = hot_artifacts
        self._outcomes = outcomes
        # A second seal answers the sequence the first one stored.
        self._seal_script = LuaScript(client, scripts.SEAL_RUN, idempotent=True)
        # Archives are immutable, so a cached one never goes stale.
        self._cache: OrderedDict[str, _Archived] = OrderedDict()
        self._cache_lock = threading.Lock()

    def archive(self, run_id: str, ttl_seconds: float | None, read_stream: StreamReader) -> int:
        """Seal, write and expire (see the module docstring); returns the last sequence.

        ``ttl_seconds`` (default: the world's) is how long the Redis keys stay; 0 deletes
        them now. Idempotent.
        """
        validate_run_id(run_id)
        ttl = self._ttl if ttl_seconds is None else ttl_seconds
        if ttl < 0:
            raise InvalidInputError("ttl_seconds must be >= 0")
        keys = self._keys.run(run_id)
        with redis_errors(f"archive of {run_id}"):
            last = int(self._seal_script([keys.events, keys.archived, keys.occurrences], [run_id]))
        if last == _NOT_ENDED:
            raise RunNotEndedError(run_id)
        if last < 0:
            # Nothing in Redis: archived before and gone from Redis since, or never written.
            archived = self.events(run_id, required=False)
            if not archived:
                raise RunNotFoundError(run_id)
            return archived[-1].sequence
        expiring = [keys.events, keys.occurrences, keys.submitted, keys.ended, keys.tokens]
        # Sealed above, so no artifact joins the run's hot set any more: they all ride in.
        hot_keys, artifacts = self._hot.archived(run_id) if self._hot else ([], iter(()))
        expiring += hot_keys
        first = read_stream(run_id, 0, _PAGE)
        if first:
            self._upload(run_id, last, first, read_stream, artifacts)
        else:
            # The stream is already gone: only a finished earlier archive can explain that.
            self.events(run_id, required=True)
        if self._outcomes is not None:
            # Its outcome, from the sealed log (the end's own write may have been lost):
            # kept a day from now, long after the log left Redis.
            self._outcomes.record_end(run_id)
        # The run's seal marker outlives its stream a little (it refuses new events while
        # the stream is there); once both are gone, S3 alone says the run was archived.
        with redis_errors(f"archive of {run_id}"):
            pipe = self._redis.pipeline(transaction=True)
            if ttl == 0:
                for start in range(0, len(expiring), _KEYS_PER_COMMAND):
                    pipe.delete(*expiring[start : start + _KEYS_PER_COMMAND])
            else:
                ttl_ms = max(1, int(ttl * 1000))
                for key in expiring:
                    pipe.pexpire(key, ttl_ms)
            pipe.pexpire(keys.archived, max(1, int(ttl * 1000)) + _MARKER_MARGIN_MS)
            pipe.zrem(self._keys.run_index, run_id)
            pipe.execute()
        return last

    def _upload(
        self,
        run_id: str,
        last: int,
        first: list[Event],
        read_stream: StreamReader,
        artifacts: Iterator[tuple[bytes, bytes]],
    ) -> None:
        """Stream the sealed log (``last`` events, ``first`` its first page) and then the
        hot ``artifacts`` (manifest JSON, bytes) to S3; compare it with the archive already
        there, if any."""

        def lines() -> Iterator[bytes]:
            page, count, after = first, 0, 0
            while page:
                yield "".join(
                    json.dumps(e.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"
                    for e in page
                ).encode("utf-8")
                count += len(page)
                after = page[-1].sequence
                if count >= last:
                    break
                page = read_stream(run_id, after, _PAGE)
            if count != last or after != last:
                # Raised inside the upload: it is aborted, nothing is stored.
                raise EventLogCorruptError(
                    f"Run {run_id} was sealed at sequence {last} but its stream holds "
                    f"{count} events"
                )
            for body, data in artifacts:
                line = {
                    _MANIFEST_FIELD: body.decode("utf-8"),
                    _DATA_FIELD: base64.b64encode(data).decode("ascii"),
                }
                yield (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode()

        key = self._keys.archive(run_id)
        put = self._s3.put_stream_if_absent(key, lines(), "application/x-ndjson", _PART_BYTES)
        if put.stored:
            return
        existing = self._s3.digest(key)
        if existing != put.digest:
            raise EventLogCorruptError(
                f"Run {run_id}: its archive in S3 ({key}) holds another log than the one "
                f"in Redis ({existing.size if existing else 0} bytes vs {put.digest.size}); "
                "both are kept as they are"
            )

    def archived_run_ids(self) -> list[str]:
        """Every run S3 holds an archive of (one list request a thousand runs)."""
        prefix = self._keys.archive("")[: -len(_ARCHIVE_SUFFIX)]
        return [
            key[len(prefix) : -len(_ARCHIVE_SUFFIX)]
            for key in self._s3.list_keys(prefix)
            if key.endswith(_ARCHIVE_SUFFIX)
        ]

    def has_archive(self, run_id: str) -> bool:
        """Whether S3 holds the run's archive (read and cached when it does)."""
        return self._archived(run_id) is not None

    def events(self, run_id: str, *, required: bool) -> list[Event] | None:
        """The archived log of ``run_id``; None if it has none (an error if ``required``)."""
        archived = self._archived(run_id)
        if archived is None:
            if required:
                raise EventLogCorruptError(
                    f"Run {run_id} is sealed and its stream is gone, but it has no archive"
                )
            return None
        return archived.events

    def artifact(self, run_id: str, artifact_id: str) -> tuple[bytes, bytes] | None:
        """``(manifest JSON, data)`` of an artifact the archive of ``run_id`` carries (a hot
        one when the run was archived); None without an archive or the artifact in it."""
        archived = self._archived(run_id)
        return None if archived is None else archived.artifacts.get(artifact_id)

    def _archived(self, run_id: str) -> _Archived | None:
        with self._cache_lock:
            cached = self._cache.get(run_id)
            if cached is not None:
                self._cache.move_to_end(run_id)
                return cached
        body = self._s3.get(self._keys.archive(run_id))
        if body is None:
            return None
        archived = _Archived([], {})
        for line in body.decode("utf-8").splitlines():
            record = json.loads(line)
            manifest = record.get(_MANIFEST_FIELD) if "sequence" not in record else None
            if isinstance(manifest, str):
                artifact_id = _artifact_id(manifest)
                data = base64.b64decode(record[_DATA_FIELD])
                archived.artifacts[artifact_id] = (manifest.encode("utf-8"), data)
            else:
                archived.events.append(Event.model_validate(record))
        with self._cache_lock:
            self._cache[run_id] = archived
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return archived


_ARCHIVE_SUFFIX = ".ndjson"

#: The fields of an artifact's line in an archive (see the module docstring).
_MANIFEST_FIELD = "artifactManifest"
_DATA_FIELD = "data"


@dataclass(frozen=True)
class _Archived:
    """A run's archive read back: its events and the artifacts it carries by id."""

    events: list[Event]
    artifacts: dict[str, tuple[bytes, bytes]]


def _artifact_id(manifest: str) -> str:
    """The artifact id a manifest line of an archive names."""
    try:
        artifact_id = json.loads(manifest)["artifactId"]
    except (ValueError, KeyError, TypeError) as error:
        raise EventLogCorruptError(f"An archive's artifact line is malformed: {error}") from error
    if not isinstance(artifact_id, str):
        raise EventLogCorruptError("An archive's artifact line names no artifact id")
    parse_manifest(artifact_ref(artifact_id), manifest.encode("utf-8"))
    return artifact_id
