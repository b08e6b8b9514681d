"""``RedisS3World``: the fleet's world — Redis Streams for events and leases, S3 for the rest.

This class assembles the parts, each in its own module:

* :mod:`~little_dist.world.redis_s3.events`: a run's log is one Redis stream whose entry ids
  are the sequences; every append is one atomic Lua script (occurrence ids, archive marker,
  fence and expected sequence checked, then appended), one round trip;
* :mod:`~little_dist.world.redis_s3.leases`: leases with fencing tokens, on Redis time;
* :mod:`~little_dist.world.redis_s3.archive`: sealing a finished run and moving its log to S3;
* :mod:`~little_dist.world.redis_s3.versions`: workflow version documents and their index;
* :mod:`~little_dist.world.redis_s3.artifact_store`: content-addressed artifacts in S3;
* :mod:`~little_dist.world.redis_s3.hot_artifacts`: small artifacts of live runs in Redis
  (one round trip a put), copied to S3 when the run is archived;
* :mod:`~little_dist.world.redis_s3.keys` (key layout), :mod:`~little_dist.world.redis_s3.scripts`
  (the Lua), :mod:`~little_dist.world.redis_s3.redis_calls` (error translation, EVALSHA).

No redis or botocore exception leaves this class: connection failures and timeouts become
:class:`~little_dist.errors.StorageUnavailableError` (retryable), raised from the original.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError
from little_dist.events import Event, EventInput
from little_dist.ids import validate_run_id
from little_dist.world.artifacts import now_iso
from little_dist.world.base import (
    ArtifactInput,
    ArtifactManifest,
    ArtifactRead,
    Fence,
    LateEvent,
    Lease,
    LeaseRequest,
    UndecodedEvent,
)
from little_dist.world.defaults import PreparedEvent, check_submission
from little_dist.world.extras import SharedStorage
from little_dist.world.redis_s3.archive import (
    DEFAULT_ARCHIVE_TTL_SECONDS,
    RunArchives,
    RunNotEndedError,
    RunSealedError,
)
from little_dist.world.redis_s3.artifact_store import ArtifactStore
from little_dist.world.redis_s3.event_reads import EventReads
from little_dist.world.redis_s3.events import ClaimedError, EventLog, ScriptedTask
from little_dist.world.redis_s3.hot_artifacts import DEFAULT_HOT_ARTIFACT_LIMIT, HotArtifacts
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.late import LateRecords
from little_dist.world.redis_s3.leases import COUNTER_TTL_MS, LeaseStore
from little_dist.world.redis_s3.outcomes import OUTCOME_TTL_SECONDS, RunOutcomes
from little_dist.world.redis_s3.redis_calls import (
    LuaScript,
    ms,
    redis_address,
    redis_errors,
    text,
)
from little_dist.world.redis_s3.run_listing import RunListing
from little_dist.world.redis_s3.s3 import S3Objects
from little_dist.world.redis_s3.versions import VersionStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = [
    "DEFAULT_ARCHIVE_TTL_SECONDS",
    "DEFAULT_HOT_ARTIFACT_LIMIT",
    "RedisS3World",
    "RunNotEndedError",
    "RunSealedError",
]

#: The world's own options in a ``redis://`` world spec (taken out before redis-py sees it).
URL_OPTIONS = frozenset(
    {
        "key_prefix",
        "s3_prefix",
        "archive_ttl",
        "signal_stream",
        "hot_artifact_limit",
    }
)


class RedisS3World:
    """A :class:`~little_dist.world.base.World` on Redis (events, leases) and S3 (blobs).

    Takes ready clients (a redis-py client created with ``decode_responses=False`` and
    without automatic retries — ``retry=Retry(NoBackoff(), 0)`` — and a boto3 S3 client);
    :meth:`from_settings` builds both from URLs. redis-py's default re-sends a command that
    timed out, and an append that timed out may have landed: with an occurrence id the
    re-send is harmless, without one it would record the event twice. ``key_prefix`` namespaces
    every Redis key and ``s3_prefix`` every object key, so several worlds (or test sessions)
    can share one server and bucket. ``archive_ttl_seconds`` is how long a run's Redis keys
    outlive its archive (0: deleted at once), after which Redis holds nothing of the run:
    it is read from its S3 archive, and S3 is asked before a log is started under a run
    id this process did not make up, so an archived run is never started again or
    appended to (see :mod:`~little_dist.world.redis_s3.events`). ``signal_stream``, when
    set, names a Redis stream that every append writing a new event also appends
    ``run=<run id>, seq=<last>`` to, in the same atomic script (the scheduler's readiness
    signal; on a Redis cluster the signal stream lives in another slot, so use it with a
    single Redis server).

    ``hot_artifact_limit`` (bytes, default 16 KiB; 0 turns it off) is the largest artifact
    kept in Redis rather than S3 while its run is live: one round trip instead of two S3
    puts. :meth:`archive_run` copies the run's hot artifacts to S3 before their keys
    expire; reads look in Redis, then S3. The put script touches the artifact's key and the
    run's set, two cluster slots: like the signal stream, it wants a single Redis server.

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
        hot_artifact_limit: int = DEFAULT_HOT_ARTIFACT_LIMIT,
        clock: Callable[[], float] | None = None,
        owns_clients: bool = False,
        outcome_ttl_seconds: float = OUTCOME_TTL_SECONDS,
    ) -> None:
        self._redis = redis_client
        self._keys = KeyLayout(key_prefix, s3_prefix)
        self._s3 = S3Objects(s3_client, bucket)
        self._clock = clock
        self._owns_clients = owns_clients
        hot = HotArtifacts(
            redis_client,
            self._keys,
            hot_artifact_limit,
            has_archive=lambda run_id: self._archives.has_archive(run_id),
        )
        self._outcomes = RunOutcomes(redis_client, self._keys, outcome_ttl_seconds)
        self._archives = RunArchives(
            redis_client,
            self._s3,
            self._keys,
            archive_ttl_seconds,
            hot_artifacts=hot,
            outcomes=self._outcomes,
        )
        self._late = LateRecords(self._s3, self._keys)
        self._listing = RunListing(redis_client, self._keys, self._archives)
        self._events = EventLog(
            redis_client,
            self._keys,
            self._archives,
            self._late,
            self._listing,
            self._outcomes,
            signal_stream=signal_stream,
            signal_maxlen=signal_maxlen,
            now_ms=self._now_ms_arg,
        )
        self._reads = EventReads(
            redis_client,
            self._keys,
            self._archives,
            follow_block_ms=self._safe_block_ms(redis_client, follow_block_ms),
        )
        self._leases = LeaseStore(redis_client, self._keys, self._now_ms_arg)
        # Claimed once: sent again after a lost reply, it answers the hash it set.
        self._claim_script = LuaScript(redis_client, _CLAIM, idempotent=True)
        self._versions = VersionStore(redis_client, self._s3, self._keys)
        self._artifacts = ArtifactStore(self._s3, self._keys, hot, self._archives.artifact)

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
        hot_artifact_limit: int = DEFAULT_HOT_ARTIFACT_LIMIT,
        clock: Callable[[], float] | None = None,
    ) -> RedisS3World:
        """Build the clients from a ``redis://`` URL and an S3 endpoint (None: AWS)."""
        from little_dist.world.redis_s3.clients import redis_client_for, s3_client_for

        return cls(
            redis_client_for(redis_url, socket_timeout),
            s3_client_for(s3_endpoint, region, access_key_id, secret_access_key),
            bucket,
            key_prefix=key_prefix,
            s3_prefix=s3_prefix,
            archive_ttl_seconds=archive_ttl_seconds,
            signal_stream=signal_stream,
            hot_artifact_limit=hot_artifact_limit,
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
        before redis-py sees the URL: ``key_prefix``, ``s3_prefix``, ``archive_ttl``
        (seconds), ``signal_stream`` and ``hot_artifact_limit`` (bytes); e.g.
        ``redis://host:6379/0?key_prefix=tenant-a:``. A spec is then enough for another
        process to open the same world.
        """
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in URL_OPTIONS}
        redis_url = urlunsplit(
            parts._replace(query=urlencode([(k, v) for k, v in query if k not in URL_OPTIONS]))
        )
        try:
            archive_ttl = float(ours.get("archive_ttl", DEFAULT_ARCHIVE_TTL_SECONDS))
        except ValueError as error:
            raise InvalidInputError(f"archive_ttl in {url!r} must be a number") from error
        try:
            hot_limit = int(ours.get("hot_artifact_limit", DEFAULT_HOT_ARTIFACT_LIMIT))
        except ValueError as error:
            raise InvalidInputError(
                f"hot_artifact_limit in {url!r} must be a whole number of bytes"
            ) from error
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
            hot_artifact_limit=hot_limit,
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

    def _now_ms_arg(self) -> int | str:
        # Scripts read Redis TIME when given ""; a test clock is passed in milliseconds.
        return "" if self._clock is None else int(self._clock() * 1000)

    # -- events ---------------------------------------------------------------------------
    def append(
        self,
        run_id: str,
        event: EventInput,
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> Event:
        return self._events.append_batch(
            run_id, [event], expected_sequence=expected_sequence, fence=fence
        )[0]

    def append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> list[Event]:
        return self._events.append_batch(
            run_id,
            events,
            expected_sequence=expected_sequence,
            fence=fence,
            signal=signal,
            release=release,
        )

    def append_batch_then_acquire(
        self,
        run_id: str,
        events: Sequence[EventInput],
        lease: LeaseRequest,
        *,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> tuple[list[Event], Lease | None]:
        tail = self._leases.acquiring(lease)
        try:
            recorded = self._events.append_batch(
                run_id, events, fence=fence, signal=signal, release=release, then=tail
            )
        except BaseException:
            # The pipeline ran the acquire whatever the append answered: give it back.
            if tail.lease is not None:
                self.release_lease(tail.lease)
            raise
        return recorded, tail.lease

    def append_batch_with_artifacts(
        self,
        run_id: str,
        events: Sequence[EventInput],
        artifacts: Sequence[ArtifactInput],
        *,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> list[Event]:
        if not events:
            for artifact in artifacts:
                self.put_artifact(artifact)
            return self.append_batch(run_id, events, fence=fence, signal=signal, release=release)
        # Small artifacts' hot puts go ahead of the append in its pipeline (they run first:
        # an event never names an artifact not written); S3-bound ones are put now.
        staged = [s for s in map(self._artifacts.staged, artifacts) if s is not None]
        recorded = self._events.append_batch(
            run_id,
            events,
            fence=fence,
            signal=signal,
            release=release,
            before=[item.put for item in staged],
        )
        for item in staged:
            item.check()
        return recorded

    def last_sequence(self, run_id: str) -> int:
        return self._reads.last_sequence(run_id)

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        return self._reads.list_events(run_id, after=after, limit=limit)

    def list_events_partly(
        self,
        run_id: str,
        *,
        after: int,
        decode: frozenset[str],
        skip: Collection[int] = (),
    ) -> list[Event | UndecodedEvent]:
        read = self._reads.list_events_partly(run_id, after=after, decode=decode, skip=skip)
        if read:
            # The next append's guess of its sequence (see events.py) starts from what was
            # read: a worker catches up on other writers' events just before it appends.
            self._events.saw(run_id, read[-1].sequence)
        return read

    def follow_partly(
        self, run_id: str, *, after: int = 0, timeout: float | None = None, decode: frozenset[str]
    ) -> Iterator[Event | UndecodedEvent]:
        return self._reads.follow_partly(run_id, after=after, timeout=timeout, decode=decode)

    def follow(
        self, run_id: str, *, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        return self._reads.follow(run_id, after=after, timeout=timeout)

    def wait_for_end(self, run_id: str, *, timeout: float | None = None) -> bool:
        return self._reads.wait_for_end(run_id, timeout)

    def read_ends(self, after: str | None, block_ms: int) -> tuple[str, list[str]]:
        """The runs whose end was announced since ``after`` (see
        :meth:`~little_dist.world.redis_s3.watching.RunWatch.read_ends`): a worker's
        attempts of a run that ended are told to stop (:mod:`little_dist.fleet.end_watch`)."""
        return self._reads.read_ends(after, block_ms)

    def list_run_ids(self) -> list[str]:
        """Every run: not archived yet (the run index in Redis), or archived (the archives
        in S3, listed: one request a thousand runs)."""
        return self._listing.every()

    def first_and_last_events(self, run_id: str) -> tuple[Event, Event] | None:
        """Two stream entries in one round trip; a run whose stream is gone, from its S3
        archive (one get, cached)."""
        return self._reads.first_and_last_events(run_id)

    def late_events(self, run_id: str) -> list[LateEvent]:
        """The run's late record (``late/RUN_ID/`` in S3: one list call)."""
        return self._late.read(validate_run_id(run_id))

    def list_unarchived_run_ids(self) -> list[str]:
        """Runs whose archive has not completed (live, or ended and waiting for it): what the
        scheduler's active set is rebuilt from, at a cost that follows them, not history."""
        return self._listing.unarchived()

    # -- submissions ----------------------------------------------------------------------
    def claim_submission(self, run_id: str, input_hash: str) -> str:
        """See :meth:`~little_dist.world.base.World.claim_submission`. A run Redis holds no
        log of may be archived and gone from Redis: S3 is asked before the claim is
        written, and an archived run answers the hash of the input its archive records
        (nothing is written: Redis keeps nothing of an archived run)."""
        check_submission(run_id, input_hash)
        keys = self._keys.run(run_id)
        checked = ""
        while True:
            with redis_errors(f"submission of {run_id}"):
                # Sent again after a lost reply, it answers the hash it set.
                recorded = self._claim_script([keys.submitted, keys.events], [input_hash, checked])
            if recorded != 0:
                return input_hash if recorded == 1 else text(recorded)
            archived = self._archives.events(run_id, required=False)
            if archived is not None:
                return _input_hash_of(archived) or input_hash
            checked = "1"  # no archive: a new run

    def start_submission(
        self,
        run_id: str,
        input_hash: str,
        events: Sequence[EventInput | PreparedEvent],
        *,
        signal: bool = True,
        fresh: bool = False,
    ) -> tuple[str, list[Event], bool]:
        """:meth:`claim_submission` and the append of the run's first ``events``, in one
        atomic step and one round trip (what submitting a run needs when it knows what to
        record): ``(recorded hash, events, new)``. With another hash recorded nothing is
        appended (``[]``); ``new``: every event was appended now, none answered from the log
        (a submission made before, or an archived run's). ``fresh``: the caller made the run
        id up, so it cannot have an archive; otherwise a run Redis holds no log of costs a
        look at S3 first (an archived run is never started again)."""
        check_submission(run_id, input_hash)
        try:
            recorded, new = self._events.claim_and_append(
                run_id, input_hash, events, signal=signal, fresh=fresh
            )
        except ClaimedError as claimed:
            return claimed.recorded, [], False
        return input_hash, recorded, new

    def start_submissions(
        self,
        starts: Sequence[tuple[str, str, Sequence[EventInput | PreparedEvent]]],
        *,
        signal: bool = True,
        fresh: bool = False,
    ) -> list[str | None]:
        """:meth:`start_submission` for several runs ``(run id, input hash, events)`` in one
        round trip; per run ``None`` when its events were all appended now, else the hash
        recorded for it (another input's: nothing appended; its own: submitted before).
        ``fresh``: every run id was made up by the caller (see :meth:`start_submission`)."""
        for run_id, input_hash, _ in starts:
            check_submission(run_id, input_hash)
        return self._events.claim_and_append_many(starts, signal=signal, fresh=fresh)

    def start_and_send(
        self,
        run_id: str,
        input_hash: str,
        events: Sequence[EventInput | PreparedEvent],
        sends: Sequence[tuple[str, str, str, str, str]],
        *,
        holder: str,
        lease_ttl_seconds: float,
        active_runs: str,
        fresh: bool,
    ) -> int | str:
        """A submission's start and its first tasks, in one atomic step and one round trip,
        for a fleet whose scheduler (its set ``active_runs``) and broker share this world's
        Redis: the claim of ``input_hash``, the run added to ``active_runs``, ``events``
        appended onto an empty log, and per send ``(lease name, queue list, message, event
        channel, event)`` the lease taken for ``holder`` and, when won, the message pushed
        and its event published. The number of messages pushed; ``'exists'`` when the run
        has a log already (nothing appended: the caller reads it), ``'archived'``, or
        ``'absent'`` (no log and ``fresh`` false: S3 was not asked, see
        :meth:`start_submission`); nothing is written but the claim in those cases; ``'mismatch'``
        when another input's hash is recorded for the run (nothing written)."""
        check_submission(run_id, input_hash)
        tasks = []
        for lease_name, queue, message, topic, event in sends:
            lease_key, old_counter = self._keys.lease(lease_name)
            counter, counter_field = self._keys.lease_counter(lease_name)
            if counter != self._keys.run(run_id).tokens or not counter_field:
                raise InvalidInputError(f"lease {lease_name!r} is not a lease of run {run_id}")
            tasks.append(
                ScriptedTask(lease_key, old_counter, counter_field, queue, message, topic, event)
            )
        try:
            return self._events.start_and_send(
                run_id,
                input_hash,
                events,
                tasks,
                holder=holder,
                lease_ttl_ms=ms(lease_ttl_seconds),
                counter_ttl_ms=COUNTER_TTL_MS,
                active_runs=active_runs,
                now_ms=self._now_ms_arg(),
                fresh=fresh,
            )
        except ClaimedError:
            return "mismatch"

    def has_archive(self, run_id: str) -> bool:
        """Whether S3 holds the run's archive (one S3 read; what a start under a run id
        this process did not make up must know first)."""
        return self._archives.has_archive(validate_run_id(run_id))

    def redis_address(self) -> tuple[Any, ...]:
        """Where this world's Redis is: ``(host or socket path, port, db)``."""
        return redis_address(self._redis)

    # -- outcomes (what a Redis client alone reads; see .outcomes) -----------------------
    def outcome(self, run_id: str) -> dict[str, Any] | None:
        """How the run ended (``status``, ``payload``: its end's), or a refused submission
        under its id (``status: refused``); ``None`` before its end, or a day after its
        archive."""
        return self._outcomes.outcome(validate_run_id(run_id))

    def task_answer(self, task_id: str) -> dict[str, Any] | None:
        """The answer to the ``little.submit_run`` task ``task_id``: accepted (its run id)
        or refused (why); ``None`` before it was handled."""
        return self._outcomes.task(task_id)

    def record_refusal(
        self, task_id: str | None, run_id: str | None, cause: str, message: str
    ) -> bool:
        """Answer a refused submission (see :meth:`~.outcomes.RunOutcomes.record_refusal`):
        by its task id, and under ``run_id`` (a usable run id) when that id is nobody's
        run, an archived one included; whether it was recorded under the run id."""
        if run_id is not None:
            keys = self._keys.run(validate_run_id(run_id))
            with redis_errors(f"refusal of {run_id}"):
                known = self._redis.exists(keys.outcome, keys.events, keys.archived)
            if not known and self._archives.has_archive(run_id):
                run_id = None  # a run whose keys left Redis: only S3 knows it ran
        return self._outcomes.record_refusal(task_id, run_id, cause, message, recorded_at=now_iso())

    def record_acceptance(self, task_id: str | None, run_id: str) -> None:
        """Answer an accepted submission of ``run_id`` (a refusal left under the id goes)."""
        self._outcomes.record_acceptance(task_id, validate_run_id(run_id), recorded_at=now_iso())

    # -- archive --------------------------------------------------------------------------
    def archive_run(self, run_id: str, *, ttl_seconds: float | None = None) -> int:
        """Seal the run, write its whole log and its hot artifacts to S3, then let its Redis
        keys expire. Only a run whose log holds its end (``RunCompleted`` or ``RunFailed``)
        is sealed; another raises :class:`RunNotEndedError` and stays open (a process that
        saw the end asks after Redis lost it in a crash: the run must finish again).

        The archive is ``archives/<run_id>.ndjson``, one ``Event.to_json()`` a line, then
        one line per small artifact of the run held in Redis (its manifest and bytes), written
        put-if-absent in one S3 put for a small run. After sealing, appends of new
        events fail with :class:`RunSealedError` (already-recorded occurrence ids still
        resolve) and new artifacts of the run go straight to S3. Reads fall back to the
        archive (and to S3) once the Redis keys are gone. ``ttl_seconds`` (default: the
        world's ``archive_ttl_seconds``) is how long the Redis keys stay; 0 deletes them now.
        Idempotent; returns the run's last sequence.
        """
        last = self._archives.archive(run_id, ttl_seconds, self._reads.stream_events)
        self._events.forget(run_id)  # (the scheduler's cache holds no finished run)
        return last

    # -- artifacts ------------------------------------------------------------------------
    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        return self._artifacts.put(artifact)

    def get_artifact(self, ref: str, *, run_id: str | None = None) -> ArtifactRead:
        return self._artifacts.get(ref, run_id=run_id)

    # -- leases ---------------------------------------------------------------------------
    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        return self._leases.acquire(key, holder, ttl_seconds)

    def acquire_leases(self, requests: Sequence[LeaseRequest]) -> list[Lease | None]:
        return self._leases.acquire_many(requests)

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        return self._leases.renew(lease, ttl_seconds)

    def release_lease(self, lease: Lease) -> None:
        self._leases.release(lease)

    # -- workflow versions ----------------------------------------------------------------
    def register_version(self, version_id: str, document: dict[str, Any]) -> None:
        self._versions.register(version_id, document)

    def put_version_part(self, body: str) -> str:
        """Store what versions share (see :mod:`little_dist.fleet.versions`) by digest,
        once per process; the digest (``sha256:`` + hex)."""
        return self._versions.put_part(body)

    def get_version_part(self, ref: str) -> str:
        """The shared version part ``ref`` names (:class:`VersionNotFoundError` if none)."""
        return self._versions.get_part(ref)

    def get_version(self, version_id: str) -> dict[str, Any]:
        return self._versions.get(version_id)

    def index_version(self, definition_hash: str, version_id: str) -> None:
        self._versions.index(definition_hash, version_id)

    def indexed_versions(self, definition_hash: str) -> list[str]:
        return self._versions.indexed(definition_hash)

    def shared_storage(self) -> SharedStorage:
        """This world's clients and names, for the stores that live beside it (agent memory:
        :mod:`little_dist.memory.redis_s3`; outer-loop manifests:
        :mod:`little_dist.outer_loop.redis_s3`)."""
        return SharedStorage(
            self._redis,
            self._s3,
            key_prefix=self._keys.redis_prefix,
            s3_prefix=self._keys.s3_prefix,
            lease_key=lambda name: self._keys.lease(name)[0],
            now_ms=self._now_ms_arg,
        )

    def close(self) -> None:
        """Close the clients if :meth:`from_settings` created them; borrowed ones stay open."""
        if self._owns_clients:
            with redis_errors("close"):
                self._redis.close()
            self._s3.close()


#: A submission's claim (SET NX GET of the run's ``submitted`` key), unless Redis holds no
#: log of the run and ARGV[2] is not '1' (S3 not asked yet): then 0, nothing written.
_CLAIM = """
-- KEYS: 1 the run's submitted key, 2 its stream. ARGV: 1 the input hash,
-- 2 '1' when S3 holds no archive of the run. Result: 1 claimed now, the hash recorded
-- before, or 0 (ask S3).
local claimed = redis.call('GET', KEYS[1])
if claimed then
  return claimed
end
if ARGV[2] ~= '1' and redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""

#: The events whose payload's ``input`` is what a run was submitted with.
_INPUT_EVENTS = frozenset({"RunStarted", "little.run.submitted"})


def _input_hash_of(events: Sequence[Event]) -> str | None:
    """The hash of the input an archived run was submitted with (as a submission claims
    it), if its log records one."""
    for event in events:
        if event.type in _INPUT_EVENTS and "input" in event.payload:
            return sha256_digest(event.payload["input"])
    return None
