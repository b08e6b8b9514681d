"""``RedisS3World``: the fleet's world — Redis Streams for events and leases, S3 for the rest.

Events of a run are one Redis stream whose entry ids are ``<sequence>-0``, so a stream id is
the event's sequence and ``XLEN`` is the run's last sequence (streams are never trimmed: a
finished run is archived to S3 whole, then its keys expire). Every append, single or batch,
is one Lua script that checks occurrence ids, the archive marker, the fence and the expected
sequence, then appends: atomic, one round trip.

Event ids hash the sequence (:func:`little_dist.ids.event_id_for`), which Lua cannot do. The
client guesses the next sequence (cached per run), hashes the ids for that guess and sends
them along; the script assigns the true sequence atomically and keeps a sent id only where
the guess was right. Where it was wrong (another writer got in first) the entry is stored
without an id and the id is derived from the stored fields when read: same value either way,
no retry, no lost atomicity. With one writer per run, the common case, every id is stored.

Leases are Redis hashes (holder, token, expiry in Redis server milliseconds) with a PEXPIRE;
fencing tokens come from ``INCR`` on a per-lease counter, so they only grow. A fenced append
checks the lease in the same script; on a Redis cluster the lease must then live in the run's
slot: build its name with :func:`~little_dist.world.redis_s3.keys.lease_key_for`.

Artifacts, manifests, workflow-version documents and archived logs are immutable S3 objects
written put-if-absent; the only compare-and-set (a version id claimed by one document) is a
Redis ``SET NX``, because S3 ``If-Match`` is not race-safe on every S3 store.

The version index (definition hash -> version ids, oldest first) is one Redis list per
definition, under its own hash tag; a Lua script appends an id only when it is absent.

No redis or botocore exception leaves this class: connection failures and timeouts become
:class:`~little_dist.errors.StorageUnavailableError` (retryable), raised from the original.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from little_dist.canonical import canonical_json, sha256_hex_text
from little_dist.errors import (
    ConflictError,
    EventLogCorruptError,
    InvalidInputError,
    LeaseLostError,
    StorageUnavailableError,
)
from little_dist.events import Event, EventInput
from little_dist.ids import event_id_for, validate_run_id
from little_dist.world.artifacts import now_iso
from little_dist.world.base import (
    ArtifactInput,
    ArtifactManifest,
    ArtifactRead,
    Fence,
    Lease,
    PreparedEvent,
    RunNotFoundError,
    SequenceConflictError,
    VersionNotFoundError,
    check_event_window,
    check_lease_request,
    prepare_events,
    validate_definition_hash,
    validate_version_id,
)
from little_dist.world.redis_s3 import scripts
from little_dist.world.redis_s3.artifact_store import ArtifactStore
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.s3 import S3Objects

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["DEFAULT_ARCHIVE_TTL_SECONDS", "RedisS3World", "RunSealedError"]

DEFAULT_ARCHIVE_TTL_SECONDS = 7 * 24 * 3600
_LEASE_COUNTER_TTL_SECONDS = 30 * 24 * 3600
_GUESS_CACHE_SIZE = 50_000
_ARCHIVE_CACHE_SIZE = 32
_PAGE = 1000
# The version index of one definition: a list, appended once per version id (LPOS, Redis 6.0.6+).
_INDEX_VERSION = """
if not redis.call('LPOS', KEYS[1], ARGV[1]) then
  redis.call('RPUSH', KEYS[1], ARGV[1])
end
return 1
"""
_URL_OPTIONS = frozenset({"key_prefix", "s3_prefix", "archive_ttl", "signal_stream"})


class RunSealedError(ConflictError):
    """The run was archived: its log is closed and no new event can be appended."""

    retryable: ClassVar[bool] = False

    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run {run_id} is archived; its event log accepts no new events")
        self.run_id = run_id


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _text(value: object) -> str:
    # The client is built with decode_responses=False: replies are bytes.
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class RedisS3World:
    """A :class:`~little_dist.world.base.World` on Redis (events, leases) and S3 (blobs).

    Takes ready clients (a redis-py client created with ``decode_responses=False`` and
    without automatic retries — ``retry=Retry(NoBackoff(), 0)`` — and a boto3 S3 client);
    :meth:`from_settings` builds both from URLs. redis-py's default re-sends a command that
    timed out, and an append that timed out may have landed: with an occurrence id the
    re-send is harmless, without one it would record the event twice. ``key_prefix`` namespaces
    every Redis key and ``s3_prefix`` every object key, so several worlds (or test sessions)
    can share one server and bucket. ``archive_ttl_seconds`` is how long a run's Redis keys
    outlive its archive (0: deleted at once). ``signal_stream``, when set, names a Redis
    stream that every append writing a new event also appends ``run=<run id>`` to, in the
    same atomic script (the scheduler's readiness signal; on a Redis cluster the signal
    stream lives in another slot, so use it with a single Redis server).

    Lease expiry is judged by the Redis server's clock, so the clocks of the machines that
    hold leases do not matter; ``clock`` (epoch seconds) replaces it, for tests that expire
    leases without sleeping. ``recordedAt`` is stamped from the writer's clock.
    """

    def __init__(
        self,
        redis_client: redis.Redis,
        s3_client: S3Client,
        bucket: str,
        *,
        key_prefix: str = "little:",
        s3_prefix: str = "",
        archive_ttl_seconds: float = DEFAULT_ARCHIVE_TTL_SECONDS,
        signal_stream: str | None = None,
        signal_maxlen: int = 100_000,
        follow_block_ms: int = 1000,
        clock: Callable[[], float] | None = None,
        owns_clients: bool = False,
    ) -> None:
        if archive_ttl_seconds < 0:
            raise InvalidInputError("archive_ttl_seconds must be >= 0")
        self._redis = redis_client
        self._keys = KeyLayout(key_prefix, s3_prefix)
        self._s3 = S3Objects(s3_client, bucket)
        self._artifacts = ArtifactStore(self._s3, self._keys)
        self._archive_ttl = archive_ttl_seconds
        self._signal_stream = signal_stream
        self._signal_maxlen = signal_maxlen
        self._follow_block_ms = self._safe_block_ms(redis_client, follow_block_ms)
        self._clock = clock
        self._owns_clients = owns_clients
        self._append_script: Script = redis_client.register_script(scripts.APPEND)
        self._seal_script: Script = redis_client.register_script(scripts.SEAL_RUN)
        self._acquire_script: Script = redis_client.register_script(scripts.ACQUIRE_LEASE)
        self._renew_script: Script = redis_client.register_script(scripts.RENEW_LEASE)
        self._release_script: Script = redis_client.register_script(scripts.RELEASE_LEASE)
        self._index_script: Script = redis_client.register_script(_INDEX_VERSION)
        # run id -> last sequence this process saw; only a guess, never trusted for order.
        self._last_seen: dict[str, int] = {}
        self._archives: OrderedDict[str, list[Event]] = OrderedDict()
        self._archives_lock = threading.Lock()

    @classmethod
    def from_settings(
        cls,
        redis_url: str,
        s3_endpoint: str | None,
        bucket: str,
        *,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        region: str = "us-east-1",
        socket_timeout: float = 10.0,
        key_prefix: str = "little:",
        s3_prefix: str = "",
        archive_ttl_seconds: float = DEFAULT_ARCHIVE_TTL_SECONDS,
        signal_stream: str | None = None,
        clock: Callable[[], float] | None = None,
    ) -> RedisS3World:
        """Build the clients from a ``redis://`` URL and an S3 endpoint (None: AWS)."""
        import boto3
        from botocore.config import Config

        redis_client = redis.Redis.from_url(
            redis_url,
            decode_responses=False,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            health_check_interval=30,
            # redis-py >= 6 re-sends a timed-out command by default; a timed-out append may
            # have landed, and without an occurrence id a re-send would record it twice.
            # Failures surface as StorageUnavailableError and the caller decides.
            retry=Retry(NoBackoff(), 0),
        )
        s3_client = boto3.client(
            "s3",
            endpoint_url=s3_endpoint,
            region_name=region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=Config(
                retries={"mode": "standard"},
                # boto3 >= 1.36 checksums by default; some S3-compatible stores reject them.
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                s3={"addressing_style": "path"},
            ),
        )
        return cls(
            redis_client,
            s3_client,
            bucket,
            key_prefix=key_prefix,
            s3_prefix=s3_prefix,
            archive_ttl_seconds=archive_ttl_seconds,
            signal_stream=signal_stream,
            clock=clock,
            owns_clients=True,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        s3_endpoint: str | None,
        s3_bucket: str,
        s3_region: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        clock: Callable[[], float] | None = None,
    ) -> RedisS3World:
        """A world from a world spec (``open_world``): a Redis URL plus S3 settings.

        The URL may carry this world's own options as query parameters, which are taken out
        before redis-py sees the URL: ``key_prefix``, ``s3_prefix``, ``archive_ttl`` (seconds)
        and ``signal_stream``; e.g. ``redis://host:6379/0?key_prefix=tenant-a:``. A spec is
        then enough for another process to open the same world.
        """
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in _URL_OPTIONS}
        redis_url = urlunsplit(
            parts._replace(query=urlencode([(k, v) for k, v in query if k not in _URL_OPTIONS]))
        )
        try:
            archive_ttl = float(ours.get("archive_ttl", DEFAULT_ARCHIVE_TTL_SECONDS))
        except ValueError as error:
            raise InvalidInputError(f"archive_ttl in {url!r} must be a number") from error
        return cls.from_settings(
            redis_url,
            s3_endpoint,
            s3_bucket,
            access_key_id=aws_access_key_id,
            secret_access_key=aws_secret_access_key,
            region=s3_region or "us-east-1",
            key_prefix=ours.get("key_prefix", "little:"),
            s3_prefix=ours.get("s3_prefix", ""),
            archive_ttl_seconds=archive_ttl,
            signal_stream=ours.get("signal_stream") or None,
            clock=clock,
        )

    @staticmethod
    def _safe_block_ms(client: redis.Redis, block_ms: int) -> int:
        # XREAD BLOCK must return before the socket read times out, or a quiet follow()
        # would look like a dead server.
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        if isinstance(timeout, int | float) and timeout > 0:
            block_ms = min(block_ms, int(timeout * 1000) - 250)
        return max(block_ms, 10)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise StorageUnavailableError(f"Redis unreachable during {what}: {exc}") from exc
        except redis.exceptions.RedisError as exc:
            raise StorageUnavailableError(f"Redis failed during {what}: {exc}") from exc

    # -- events ---------------------------------------------------------------------------
    def append(
        self,
        run_id: str,
        event: EventInput,
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> Event:
        return self.append_batch(run_id, [event], expected_sequence=expected_sequence, fence=fence)[
            0
        ]

    def append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> list[Event]:
        validate_run_id(run_id)
        prepared = prepare_events(events)
        if not prepared:
            return []
        if expected_sequence is not None and expected_sequence < 0:
            raise InvalidInputError(f"expected_sequence must be >= 0, got {expected_sequence}")
        keys = self._keys.run(run_id)
        first_touch = run_id not in self._last_seen
        guess = (
            expected_sequence if expected_sequence is not None else self._last_seen.get(run_id, 0)
        ) + 1
        recorded_at = now_iso()
        args: list[str | int] = [
            "" if expected_sequence is None else expected_sequence,
            "" if fence is None else fence.token,
            guess,
            run_id if self._signal_stream else "",
            self._signal_maxlen,
            self._now_ms_arg(),
        ]
        guessed_ids: list[str] = []
        for index, item in enumerate(prepared):
            event_id = event_id_for(
                run_id, guess + index, item.type, item.payload, item.occurrence_id
            )
            guessed_ids.append(event_id)
            args += [item.type, item.payload_json, item.occurrence_id or "", recorded_at, event_id]
        script_keys = [keys.events, keys.occurrences, keys.archived]
        if fence is not None:
            script_keys.append(self._keys.lease(fence.key)[0])
        if self._signal_stream:
            script_keys.append(self._signal_stream)
        with self._errors(f"append to {run_id}"):
            if first_touch:
                # The run index lives outside the run's slot; it rides in the same round trip.
                pipe = self._redis.pipeline(transaction=False)
                self._append_script(keys=script_keys, args=args, client=pipe)
                pipe.zadd(self._keys.run_index, {run_id: time.time()}, nx=True)
                result = pipe.execute()[0]
            else:
                result = self._append_script(keys=script_keys, args=args)
        status = result[0]
        if status == b"conflict":
            actual = int(result[1])
            self._remember(run_id, actual)
            assert expected_sequence is not None
            raise SequenceConflictError(run_id, expected_sequence, actual)
        if status == b"fenced":
            assert fence is not None
            raise LeaseLostError(f"Lease {fence.key!r} is no longer held with token {fence.token}")
        if status == b"archived":
            return self._recorded_in_archive(run_id, prepared)
        if status == b"new":  # the common case: all appended, input i at last + 1 + i
            last = int(result[1])
            result = [b"ok", last, [(b"n", last + 1 + i, ()) for i in range(len(prepared))]]
        return self._decode_append(run_id, prepared, guess, guessed_ids, recorded_at, result)

    def _decode_append(
        self,
        run_id: str,
        prepared: list[PreparedEvent],
        guess: int,
        guessed_ids: list[str],
        recorded_at: str,
        result: list[Any],
    ) -> list[Event]:
        out: list[Event] = []
        last = int(result[1])
        for index, (kind, number, fields) in enumerate(result[2]):
            sequence = int(number)
            if kind == b"n":
                item = prepared[index]
                if sequence == guess + index:
                    event_id = guessed_ids[index]
                else:
                    event_id = event_id_for(
                        run_id, sequence, item.type, item.payload, item.occurrence_id
                    )
                out.append(
                    Event(
                        event_id=event_id,
                        run_id=run_id,
                        sequence=sequence,
                        type=item.type,
                        occurrence_id=item.occurrence_id,
                        recorded_at=recorded_at,
                        payload=item.payload,
                    )
                )
                last = max(last, sequence)
            elif kind == b"e":
                flat = dict(zip(fields[::2], fields[1::2], strict=True))
                out.append(self._decode_entry(run_id, sequence, flat))
            else:  # b"d": the same occurrence id as an earlier input of this batch
                out.append(out[sequence - 1])
        self._remember(run_id, last)
        return out

    def _remember(self, run_id: str, last: int) -> None:
        if len(self._last_seen) >= _GUESS_CACHE_SIZE:
            self._last_seen.clear()
        self._last_seen[run_id] = last

    def _now_ms_arg(self) -> int | str:
        return "" if self._clock is None else int(self._clock() * 1000)

    def _recorded_in_archive(self, run_id: str, prepared: list[PreparedEvent]) -> list[Event]:
        """An append to a sealed run succeeds only if every input is already recorded."""
        archived = self._archived_events(run_id, required=False)
        if archived is None:
            raise RunSealedError(run_id)
        by_occurrence = {e.occurrence_id: e for e in archived if e.occurrence_id is not None}
        found = [
            by_occurrence.get(item.occurrence_id)
            for item in prepared
            if item.occurrence_id is not None
        ]
        recorded = [e for e in found if e is not None]
        if len(recorded) != len(prepared):
            raise RunSealedError(run_id)
        return recorded

    def _decode_entry(self, run_id: str, sequence: int, fields: dict[bytes, bytes]) -> Event:
        event_type = _text(fields[b"t"])
        payload = json.loads(fields[b"p"])
        occurrence = fields.get(b"o")
        occurrence_id = _text(occurrence) if occurrence is not None else None
        stored_id = fields.get(b"i")
        event_id = (
            _text(stored_id)
            if stored_id is not None
            else event_id_for(run_id, sequence, event_type, payload, occurrence_id)
        )
        return Event(
            event_id=event_id,
            run_id=run_id,
            sequence=sequence,
            type=event_type,
            occurrence_id=occurrence_id,
            recorded_at=_text(fields[b"r"]),
            payload=payload,
        )

    def _decode_entries(self, run_id: str, entries: list[Any]) -> list[Event]:
        return [
            self._decode_entry(run_id, int(entry_id.split(b"-", 1)[0]), fields)
            for entry_id, fields in entries
        ]

    def _stream_events(self, run_id: str, after: int, limit: int | None) -> list[Event]:
        with self._errors(f"read of {run_id}"):
            entries = self._redis.xrange(
                self._keys.run(run_id).events, min=f"{after + 1}-0", max="+", count=limit
            )
        return self._decode_entries(run_id, entries or [])

    def _stream_gone_but_sealed(self, run_id: str) -> bool:
        keys = self._keys.run(run_id)
        with self._errors(f"read of {run_id}"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.exists(keys.events)
            pipe.exists(keys.archived)
            stream_exists, sealed = pipe.execute()
        return not stream_exists and bool(sealed)

    def last_sequence(self, run_id: str) -> int:
        validate_run_id(run_id)
        keys = self._keys.run(run_id)
        with self._errors(f"read of {run_id}"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.xlen(keys.events)
            pipe.get(keys.archived)
            length, sealed = pipe.execute()
        # A sealed run takes no more events; the marker holds its last sequence for good.
        return int(sealed) if sealed is not None else int(length)

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        validate_run_id(run_id)
        check_event_window(after, limit)
        if limit == 0:
            return []
        events = self._stream_events(run_id, after, limit)
        if events or not self._stream_gone_but_sealed(run_id):
            return events
        archived = self._archived_events(run_id, required=True) or []
        tail = [e for e in archived if e.sequence > after]
        return tail if limit is None else tail[:limit]

    def follow(
        self, run_id: str, *, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        validate_run_id(run_id)
        check_event_window(after, None)
        return self._follow(run_id, after, timeout)

    def _follow(self, run_id: str, after: int, timeout: float | None) -> Iterator[Event]:
        stream = self._keys.run(run_id).events
        last = after
        deadline = None if timeout is None else time.monotonic() + timeout
        # Catch up first (from the archive if the stream is gone), then block on the stream.
        backlog = self.list_events(run_id, after=last)
        while True:
            for event in backlog:
                yield event
                last = event.sequence
            if backlog and timeout is not None:
                deadline = time.monotonic() + timeout
            block_ms = self._follow_block_ms
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                block_ms = max(1, min(block_ms, int(remaining * 1000)))
            with self._errors(f"follow of {run_id}"):
                reply: Any = self._redis.xread({stream: f"{last}-0"}, count=_PAGE, block=block_ms)
            if reply:
                backlog = self._decode_entries(run_id, reply[0][1])
            elif self._stream_gone_but_sealed(run_id):
                # Archived (and expired) while we waited: the archive has the rest.
                backlog = self.list_events(run_id, after=last)
            else:
                backlog = []

    def list_run_ids(self) -> list[str]:
        with self._errors("listing runs"):
            members = self._redis.zrange(self._keys.run_index, 0, -1)
            run_ids = [_text(m) for m in members]
            pipe = self._redis.pipeline(transaction=False)
            for run_id in run_ids:
                keys = self._keys.run(run_id)
                pipe.exists(keys.events, keys.archived)
            present = pipe.execute() if run_ids else []
        # The index is written beside a run's first append, even one that was refused.
        return sorted(run_id for run_id, count in zip(run_ids, present, strict=True) if count)

    # -- archive --------------------------------------------------------------------------
    def archive_run(self, run_id: str, *, ttl_seconds: float | None = None) -> int:
        """Seal the run, write its whole log to S3, then let its Redis keys expire.

        The archive is ``archives/<run_id>.ndjson``, one ``Event.to_json()`` a line, written
        put-if-absent. After sealing, appends of new events fail with
        :class:`RunSealedError` (already-recorded occurrence ids still resolve). Reads fall
        back to the archive once the stream is gone. ``ttl_seconds`` (default: the world's
        ``archive_ttl_seconds``) is how long the Redis keys stay; 0 deletes them now.
        Idempotent; returns the run's last sequence.
        """
        validate_run_id(run_id)
        ttl = self._archive_ttl if ttl_seconds is None else ttl_seconds
        if ttl < 0:
            raise InvalidInputError("ttl_seconds must be >= 0")
        keys = self._keys.run(run_id)
        with self._errors(f"archive of {run_id}"):
            last = int(self._seal_script(keys=[keys.events, keys.archived]))
        if last < 0:
            raise RunNotFoundError(run_id)
        events: list[Event] = []
        while len(events) < last:
            page = self._stream_events(run_id, events[-1].sequence if events else 0, _PAGE)
            if not page:
                break
            events += page
        if events:
            if len(events) != last or events[-1].sequence != last:
                raise EventLogCorruptError(
                    f"Run {run_id} was sealed at sequence {last} but its stream holds "
                    f"{len(events)} events"
                )
            body = "".join(
                json.dumps(e.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"
                for e in events
            )
            self._s3.put_if_absent(
                self._keys.archive(run_id), body.encode("utf-8"), "application/x-ndjson"
            )
        else:
            # The stream is already gone: only a finished earlier archive can explain that.
            self._archived_events(run_id, required=True)
        with self._errors(f"archive of {run_id}"):
            pipe = self._redis.pipeline(transaction=True)
            if ttl == 0:
                pipe.delete(keys.events, keys.occurrences)
            else:
                ttl_ms = max(1, int(ttl * 1000))
                pipe.pexpire(keys.events, ttl_ms)
                pipe.pexpire(keys.occurrences, ttl_ms)
            pipe.execute()
        return last

    def _archived_events(self, run_id: str, *, required: bool) -> list[Event] | None:
        with self._archives_lock:
            cached = self._archives.get(run_id)
            if cached is not None:
                self._archives.move_to_end(run_id)
                return cached
        body = self._s3.get(self._keys.archive(run_id))
        if body is None:
            if required:
                raise EventLogCorruptError(
                    f"Run {run_id} is sealed and its stream is gone, but it has no archive"
                )
            return None
        events = [
            Event.model_validate(json.loads(line)) for line in body.decode("utf-8").splitlines()
        ]
        with self._archives_lock:
            self._archives[run_id] = events
            while len(self._archives) > _ARCHIVE_CACHE_SIZE:
                self._archives.popitem(last=False)
        return events

    # -- artifacts ------------------------------------------------------------------------
    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        return self._artifacts.put(artifact)

    def get_artifact(self, ref: str) -> ArtifactRead:
        return self._artifacts.get(ref)

    # -- leases ---------------------------------------------------------------------------
    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        check_lease_request(key, holder, ttl_seconds)
        lease_key, counter_key = self._keys.lease(key)
        with self._errors(f"acquire of lease {key!r}"):
            reply = self._acquire_script(
                keys=[lease_key, counter_key],
                args=[
                    holder,
                    _ms(ttl_seconds),
                    _LEASE_COUNTER_TTL_SECONDS * 1000,
                    self._now_ms_arg(),
                ],
            )
        if reply is None:
            return None
        token, expires_ms = reply
        return Lease(key=key, holder=holder, token=int(token), expires_at=int(expires_ms) / 1000)

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        check_lease_request(lease.key, lease.holder, ttl_seconds)
        lease_key, _ = self._keys.lease(lease.key)
        with self._errors(f"renewal of lease {lease.key!r}"):
            reply = self._renew_script(
                keys=[lease_key],
                args=[lease.holder, lease.token, _ms(ttl_seconds), self._now_ms_arg()],
            )
        if reply is None:
            raise LeaseLostError(f"Lease {lease.key!r} is no longer held with token {lease.token}")
        return Lease(lease.key, lease.holder, lease.token, int(reply) / 1000)

    def release_lease(self, lease: Lease) -> None:
        lease_key, _ = self._keys.lease(lease.key)
        with self._errors(f"release of lease {lease.key!r}"):
            self._release_script(keys=[lease_key], args=[lease.holder, lease.token])

    # -- workflow versions ----------------------------------------------------------------
    def register_version(self, version_id: str, document: dict[str, Any]) -> None:
        validate_version_id(version_id)
        if not isinstance(document, dict):
            raise InvalidInputError(f"A workflow version document must be an object: {version_id}")
        text = canonical_json(document)
        digest = sha256_hex_text(text)
        key = self._keys.version(version_id)
        with self._errors(f"registration of version {version_id}"):
            # The claim is the compare-and-set (S3 If-Match is not race-safe everywhere);
            # S3 then only ever receives the winning document.
            claimed = self._redis.set(key, digest, nx=True)
            current = None if claimed else self._redis.get(key)
        if current is not None and _text(current) != digest:
            raise ConflictError(
                f"Workflow version {version_id} is already registered with a different document"
            )
        self._s3.put_if_absent(
            self._keys.version_document(version_id), text.encode("utf-8"), "application/json"
        )

    def get_version(self, version_id: str) -> dict[str, Any]:
        validate_version_id(version_id)
        body = self._s3.get(self._keys.version_document(version_id))
        if body is None:
            raise VersionNotFoundError(version_id)
        document: dict[str, Any] = json.loads(body)
        return document

    def _version_index_key(self, definition_hash: str) -> str:
        # Its own hash tag: the index of one definition lives in one cluster slot.
        return f"{self._keys.redis_prefix}version-index:{{{definition_hash}}}"

    def index_version(self, definition_hash: str, version_id: str) -> None:
        validate_definition_hash(definition_hash)
        validate_version_id(version_id)
        with self._errors(f"indexing of version {version_id}"):
            self._index_script(keys=[self._version_index_key(definition_hash)], args=[version_id])

    def indexed_versions(self, definition_hash: str) -> list[str]:
        validate_definition_hash(definition_hash)
        with self._errors("reading the version index"):
            members = self._redis.lrange(self._version_index_key(definition_hash), 0, -1)
        return [_text(member) for member in members]

    def close(self) -> None:
        """Close the clients if :meth:`from_settings` created them; borrowed ones stay open."""
        if self._owns_clients:
            with self._errors("close"):
                self._redis.close()
            self._s3.close()
