"""RedisS3World on a real Redis and a real S3 server (SeaweedFS ``weed mini``).

It runs the same conformance suite as every world (including real ``spawn`` processes that
open it through ``open_world``), then what only this world has: archiving to S3, event ids
when the client's sequence guess is wrong, Redis server time for leases, the readiness
signal, and an append that timed out on the client but landed on the server.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import boto3
import pytest
import redis
from botocore.config import Config
from redis.backoff import NoBackoff
from redis.retry import Retry

from little_dist.canonical import canonical_json
from little_dist.errors import StorageUnavailableError
from little_dist.events import Event, EventInput
from little_dist.ids import event_id_for
from little_dist.world.base import ArtifactCorruptError, ArtifactInput, UndecodedEvent
from little_dist.world.factory import open_world
from little_dist.world.redis_s3 import RedisS3World, RunSealedError, lease_key_for
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.s3 import S3Objects
from tests.conftest_services import S3Service
from tests.s3_server import s3_client
from tests.world_suite import CrossProcessConformance, FakeClock, WorldConformance, WorldHandle

pytestmark = pytest.mark.integration

RUN = "run_redis_s3"


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query), *params.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture
def s3_env(s3_service: S3Service, monkeypatch: pytest.MonkeyPatch) -> S3Service:
    """The S3 settings ``open_world`` reads, also inherited by spawned processes."""
    monkeypatch.setenv("LITTLE_S3_ENDPOINT", s3_service.endpoint)
    monkeypatch.setenv("LITTLE_S3_BUCKET", s3_service.bucket)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_service.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_service.secret_access_key)
    monkeypatch.delenv("LITTLE_S3_REGION", raising=False)
    return s3_service


@pytest.fixture
def world_spec(redis_url: str, redis_key_prefix: str, s3_env: S3Service) -> Callable[[], str]:
    """Specs of fresh, empty worlds: each gets its own Redis key prefix and S3 prefix."""

    def make() -> str:
        name = uuid.uuid4().hex[:10]
        return _with_query(
            redis_url,
            key_prefix=f"{redis_key_prefix}{name}:",
            s3_prefix=f"{s3_env.prefix}{name}/",
        )

    return make


def _blob_counter(s3: S3Service, spec: str) -> Callable[[], int]:
    """Distinct stored byte strings: S3 blobs plus the small artifacts held in Redis.

    The hot tier keeps bytes per artifact and they become one blob when the run is archived,
    so bytes are counted by their sha256 across both tiers.
    """
    options = dict(parse_qsl(urlsplit(spec).query))
    s3_prefix, key_prefix = options["s3_prefix"], options["key_prefix"]
    client = s3_client(s3.endpoint)
    redis_url = urlunsplit(urlsplit(spec)._replace(query=""))

    def count() -> int:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=s3.bucket, Prefix=f"{s3_prefix}blobs/"
        )
        hashes = {
            obj["Key"].rsplit("/", 1)[-1] for page in pages for obj in page.get("Contents", [])
        }
        hot = redis.Redis.from_url(redis_url)
        try:
            for key in hot.scan_iter(match=f"{key_prefix}art:*", count=1000):
                manifest = hot.hget(key, "manifest")
                assert manifest is not None
                hashes.add(json.loads(manifest)["sha256"].removeprefix("sha256:"))
        finally:
            hot.close()
        return len(hashes)

    return count


def _open(spec: str, s3: S3Service, **options: Any) -> RedisS3World:
    return RedisS3World.from_url(
        spec,
        s3_endpoint=s3.endpoint,
        s3_bucket=s3.bucket,
        aws_access_key_id=s3.access_key_id,
        aws_secret_access_key=s3.secret_access_key,
        **options,
    )


class TestRedisS3World(WorldConformance, CrossProcessConformance):
    @pytest.fixture
    def make_world(
        self, world_spec: Callable[[], str], s3_env: S3Service
    ) -> Callable[[], WorldHandle]:
        def make() -> WorldHandle:
            spec = world_spec()
            # Lease expiry follows the fake clock here (passed to the scripts instead of
            # Redis TIME); test_leases_follow_redis_server_time covers the real clock.
            clock = FakeClock()
            world = _open(spec, s3_env, clock=clock)
            return WorldHandle(
                world=world,
                blob_count=_blob_counter(s3_env, spec),
                advance=clock.advance,
                spec=spec,
            )

        return make


# -- what only RedisS3World does ------------------------------------------------------------


@pytest.fixture
def world(world_spec: Callable[[], str], s3_env: S3Service) -> Iterator[RedisS3World]:
    opened = _open(world_spec(), s3_env)
    yield opened
    opened.close()


@pytest.fixture
def raw_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=False)
    yield client
    client.close()


def _keys(world: RedisS3World) -> KeyLayout:
    return world._keys


def _ev(
    event_type: str = "StepScheduled", occurrence_id: str | None = None, **payload: Any
) -> EventInput:
    return EventInput(type=event_type, payload=payload, occurrence_id=occurrence_id)


def test_spec_reaches_the_same_world(world_spec: Callable[[], str], s3_env: S3Service) -> None:
    spec = world_spec()
    first = open_world(spec)
    second = open_world(spec)
    try:
        assert isinstance(first, RedisS3World)
        written = first.append(RUN, _ev(stepPath="a"))
        assert second.list_events(RUN) == [written]
        other = open_world(world_spec())
        try:
            assert other.list_events(RUN) == []  # another prefix is another world
        finally:
            other.close()
    finally:
        first.close()
        second.close()


def test_archive_moves_the_log_to_s3_and_reads_fall_back_to_it(
    world: RedisS3World, raw_redis: redis.Redis, s3_env: S3Service
) -> None:
    written = [world.append(RUN, _ev("RunStarted", "occ-start", input={"q": "x"}))]
    written += world.append_batch(RUN, [_ev(stepPath=f"s{i}", n=i * 1.5) for i in range(5)])
    written.append(world.append(RUN, _ev("RunCompleted", "occ-end", ok=True)))
    keys = _keys(world).run(RUN)

    assert world.archive_run(RUN, ttl_seconds=0) == 7
    assert raw_redis.exists(keys.events, keys.occurrences) == 0  # deleted at once
    # The archive is NDJSON, one Event.to_json() a line.
    body = S3Objects(s3_client(s3_env.endpoint), s3_env.bucket).get(_keys(world).archive(RUN))
    assert body is not None
    lines = body.decode().splitlines()
    assert [Event.model_validate(json.loads(line)) for line in lines] == written

    # A fresh world (no cache) reads the run back from S3, identically.
    reader = _open(_reader_spec(world), s3_env)
    try:
        assert reader.list_events(RUN) == written
        assert reader.list_events(RUN, after=2, limit=3) == written[2:5]
        assert reader.last_sequence(RUN) == 7
        assert list(reader.follow(RUN, after=5, timeout=0.2)) == written[5:]
        assert RUN in reader.list_run_ids()
        # The log is closed: a new event is refused, a retried one resolves from the archive.
        with pytest.raises(RunSealedError):
            reader.append(RUN, _ev(stepPath="late"))
        assert reader.append(RUN, _ev("RunCompleted", "occ-end", ok=True)) == written[-1]
        # Archiving again is a no-op.
        assert reader.archive_run(RUN) == 7
    finally:
        reader.close()


def test_a_partial_read_parses_only_the_payloads_asked_for(
    world: RedisS3World, s3_env: S3Service
) -> None:
    # Harness traces a fold does not read come back from the stream unparsed, the events it
    # folds with their payloads parsed and no Event made (no id derived) until decode(); an
    # archived run's events are parsed from S3 anyway and come decoded.
    world.append(RUN, _ev("RunStarted", "occ-start", input={"q": "x"}))
    world.append_batch(
        RUN,
        [
            _ev("harness.tool_call.started", "tool:a:1:1", stepPath="a", args={"n": 1}),
            _ev("StepCompleted", "end:a:1", stepPath="a", output=[1, 2]),
        ],
    )
    wanted = frozenset({"RunStarted", "StepCompleted"})
    partly = world.list_events_partly(RUN, after=0, decode=wanted)
    assert all(isinstance(e, UndecodedEvent) for e in partly)
    assert [e.payload for e in partly] == [
        {"input": {"q": "x"}},
        None,
        {"stepPath": "a", "output": [1, 2]},
    ]
    completed = partly[2]
    assert isinstance(completed, UndecodedEvent)
    assert completed.envelope() == {
        "runId": RUN,
        "sequence": 3,
        "type": "StepCompleted",
        "payload": {"stepPath": "a", "output": [1, 2]},
        "recordedAt": world.list_events(RUN)[2].recorded_at,
    }
    assert completed.decode() == world.list_events(RUN)[2]
    trace = partly[1]
    assert isinstance(trace, UndecodedEvent)
    assert trace.envelope() == {
        "runId": RUN,
        "sequence": 2,
        "type": "harness.tool_call.started",
        "payload": {},
        "recordedAt": world.list_events(RUN)[1].recorded_at,
    }
    assert trace.decode() == world.list_events(RUN)[1]
    world.append(RUN, _ev("RunCompleted", "occ-end", ok=True))
    world.archive_run(RUN, ttl_seconds=0)
    reader = _open(_reader_spec(world), s3_env)
    try:
        archived = reader.list_events_partly(RUN, after=0, decode=wanted)
        assert archived == reader.list_events(RUN) and len(archived) == 4
    finally:
        reader.close()


def _reader_spec(world: RedisS3World) -> str:
    # The spec of an already-open world: rebuild it from its layout (tests only).
    keys = _keys(world)
    return _with_query(
        "redis://" + _redis_address(world), key_prefix=keys.redis_prefix, s3_prefix=keys.s3_prefix
    )


def _redis_address(world: RedisS3World) -> str:
    kwargs = world._redis.connection_pool.connection_kwargs
    return f"{kwargs['host']}:{kwargs['port']}/{kwargs['db']}"


def test_archive_with_a_ttl_keeps_redis_keys_until_they_expire(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    world.append(RUN, _ev("RunStarted", "occ-1"))
    lease = world.acquire_lease(f"{{{RUN}}}:step:a", "w1", 5)
    assert lease is not None
    world.release_lease(lease)
    world.append(RUN, _ev("RunFailed", "run-end"))
    assert world.archive_run(RUN, ttl_seconds=60) == 2
    keys = _keys(world).run(RUN)
    assert 0 < raw_redis.pttl(keys.events) <= 60_000
    assert 0 < raw_redis.pttl(keys.occurrences) <= 60_000
    # The end marker goes with the log (not a day later), and so do the lease counters.
    assert 0 < raw_redis.pttl(keys.ended) <= 60_000
    assert 0 < raw_redis.pttl(keys.tokens) <= 60_000
    # Sealed at once, even while the stream is still there.
    with pytest.raises(RunSealedError):
        world.append(RUN, _ev(stepPath="late"))
    assert world.append(RUN, _ev("RunStarted", "occ-1")).sequence == 1
    assert world.last_sequence(RUN) == 2


def test_an_archived_runs_keys_go_within_minutes_by_default(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    world = _open(world_spec(), s3_env)  # the default archive TTL
    try:
        world.append(RUN, _ev("RunStarted", "occ-1"))
        world.append(RUN, _ev("RunFailed", "run-end"))
        world.archive_run(RUN)
        keys = _keys(world).run(RUN)
        for key in (keys.events, keys.occurrences, keys.submitted, keys.ended):
            assert raw_redis.pttl(key) <= 300_000, key
    finally:
        world.close()


def test_a_run_this_process_ended_is_not_kept_in_its_run_memory(world: RedisS3World) -> None:
    # What the log keeps per run it appended to (its script keys) is for runs still going.
    world.append(RUN, _ev(stepPath="a"))
    assert RUN in world._events._runs
    world.append_batch(RUN, [_ev(stepPath="b"), _ev("RunCompleted", "run-end")])
    assert RUN not in world._events._runs
    # A repeat of an append (idempotent by occurrence) still works, and is forgotten again.
    (again,) = world.append_batch(RUN, [_ev("RunCompleted", "run-end")])
    assert again.sequence == 3
    assert RUN not in world._events._runs


def test_archiving_an_unknown_run_is_not_found(world: RedisS3World) -> None:
    from little_dist.world.base import RunNotFoundError

    with pytest.raises(RunNotFoundError):
        world.archive_run("run_never_written")


def test_a_run_whose_log_holds_no_end_is_not_sealed(world: RedisS3World) -> None:
    # The scheduler archives a run it saw end; if Redis then lost the end in a crash, the
    # run must stay open to finish again, not be sealed (and archived) unfinished.
    from little_dist.world.redis_s3 import RunNotEndedError

    world.append_batch(RUN, [_ev("RunStarted", "run-start"), _ev(stepPath="a")])
    with pytest.raises(RunNotEndedError, match="has not ended"):
        world.archive_run(RUN)
    assert world.append(RUN, _ev(stepPath="b")).sequence == 3  # still open
    world.append(RUN, _ev("RunCompleted"))  # an end without the engine's occurrence id
    assert world.archive_run(RUN, ttl_seconds=0) == 4


def test_ids_are_right_when_the_sequence_guess_is_wrong(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    spec = world_spec()
    a, b = _open(spec, s3_env), _open(spec, s3_env)
    try:
        a.append(RUN, _ev(stepPath="a0"))  # a now guesses 2 next
        b.append_batch(RUN, [_ev(stepPath="b0"), _ev(stepPath="b1")])  # b takes 2 and 3
        late = a.append_batch(RUN, [_ev(stepPath="a1"), _ev(stepPath="a2")])  # guessed 2, 3
        assert [e.sequence for e in late] == [4, 5]
        for event in a.list_events(RUN):
            assert event.event_id == event_id_for(
                RUN, event.sequence, event.type, event.payload, event.occurrence_id
            )
        assert late == b.list_events(RUN, after=3)
        assert a.append(RUN, _ev(stepPath="a3")).sequence == 6  # a guessed right this time
        # Ids hashed for a wrong guess are not stored (b guessed 1-2 for a fresh run, a 2-3);
        # those entries carry no id and it is derived on read. Right guesses are stored.
        stream = _keys(a).run(RUN).events
        entries: Any = raw_redis.xrange(stream)
        stored = {int(i.split(b"-")[0]): f.get(b"i") for i, f in entries}
        assert [s for s, event_id in sorted(stored.items()) if event_id is not None] == [1, 6]
        assert a.list_events(RUN) == b.list_events(RUN)
    finally:
        a.close()
        b.close()


def test_leases_follow_redis_server_time(world: RedisS3World) -> None:
    key = lease_key_for(RUN, "attempt:a")
    before = time.time()
    lease = world.acquire_lease(key, "w1", 0.4)
    assert lease is not None
    # expires_at is Redis server time (same machine here, so close to ours).
    assert before + 0.3 < lease.expires_at < time.time() + 1.0
    assert world.acquire_lease(key, "w2", 0.4) is None
    assert world.append(RUN, _ev(stepPath="a"), fence=lease.fence).sequence == 1
    time.sleep(0.6)
    taken = world.acquire_lease(key, "w2", 5)
    assert taken is not None and taken.token > lease.token
    from little_dist.errors import LeaseLostError

    with pytest.raises(LeaseLostError):
        world.append(RUN, _ev(stepPath="zombie"), fence=lease.fence)
    assert world.append(RUN, _ev(stepPath="b"), fence=taken.fence).sequence == 2


def test_a_follower_reads_a_busy_run_in_batches_and_wakes_on_its_end(
    world: RedisS3World, raw_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    events_key = _keys(world).run(RUN).events
    wakes: list[int] = []
    client = world._reads._raw
    real_pipeline = client.pipeline

    def counting(*args: Any, **options: Any) -> Any:
        pipe = real_pipeline(*args, **options)
        real_xread = pipe.xread

        def xread(streams: Any, **options: Any) -> Any:
            if events_key in streams:
                wakes.append(1)
            return real_xread(streams, **options)

        pipe.xread = xread
        return pipe

    monkeypatch.setattr(client, "pipeline", counting)
    world.append(RUN, _ev(stepPath="first"))

    def write() -> None:
        for index in range(200):
            world.append(RUN, _ev(stepPath=f"s{index}"))
        world.append(RUN, EventInput(type="RunCompleted", occurrence_id="run-end", payload={}))

    writer = threading.Thread(target=write)
    seen: list[Event] = []
    follower = world.follow(RUN, timeout=30)
    seen.append(next(follower))  # caught up: now it waits for appends
    writer.start()
    for event in follower:
        seen.append(event)
        if event.type == "RunCompleted":
            break
    writer.join()
    assert [e.sequence for e in seen] == list(range(1, 203))
    assert seen == world.list_events(RUN)
    # Not a wake-up per append: the follower lets a busy run's appends gather.
    assert len(wakes) < 50
    assert len(wakes) > 0
    # The end left its marker, a plain key which expires on its own, and its announcement
    # on the stream shared by every run's ends (capped, and gone soon after the last end).
    keys = _keys(world)
    assert raw_redis.type(keys.run(RUN).ended) == b"string"
    assert raw_redis.pttl(keys.run(RUN).ended) > 0
    assert raw_redis.xrange(keys.ends)[-1][1] == {b"run": RUN.encode()}
    assert 0 < raw_redis.pttl(keys.ends) <= 60_000


def test_wait_for_end_blocks_on_the_end_hint_and_trusts_only_the_log(
    world: RedisS3World, raw_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    client = world._reads._raw
    real_xrange = client.xrange

    def counting(name: Any, *args: Any, **options: Any) -> Any:
        reads.append(1)
        return real_xrange(name, *args, **options)

    monkeypatch.setattr(client, "xrange", counting)
    world.append(RUN, _ev(stepPath="first"))
    # An announcement with no end in the log (an end append that was refused): not the end.
    threading.Timer(0.1, lambda: raw_redis.xadd(_keys(world).ends, {"run": RUN})).start()
    started = time.monotonic()
    assert world.wait_for_end(RUN, timeout=0.5) is False
    assert time.monotonic() - started >= 0.5
    reads.clear()

    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(world.wait_for_end(RUN, timeout=30)))
    waiter.start()
    for index in range(300):  # a busy run: the waiter is not woken by these
        world.append(RUN, _ev(stepPath=f"s{index}"))
    time.sleep(0.2)
    assert woke == []
    world.append(RUN, EventInput(type="RunCompleted", occurrence_id="run-end", payload={}))
    waiter.join(10)
    assert woke == [True]
    # It read the log on its first look and once more on the end, not per append.
    assert len(reads) <= 3


def test_wait_for_end_finds_an_end_whose_hint_was_lost_and_an_archived_end(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    keys = _keys(world).run(RUN)
    world.append(RUN, _ev(stepPath="first"))
    woke: list[float] = []

    def wait() -> None:
        if world.wait_for_end(RUN, timeout=30):
            woke.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.1)
    world.append(RUN, EventInput(type="RunFailed", occurrence_id="run-end", payload={}))
    raw_redis.delete(keys.ended, _keys(world).ends)  # as if Redis had lost them
    lost = time.monotonic()
    waiter.join(15)
    assert woke, "the end was never found"
    assert woke[0] - lost < 5.0  # found by a look at the log, not by the hint

    assert world.archive_run(RUN, ttl_seconds=0) == 2
    assert raw_redis.exists(keys.events) == 0
    assert world.wait_for_end(RUN, timeout=5) is True


def test_pipelined_scripts_run_on_a_server_that_forgot_them(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    from little_dist.world.base import LeaseRequest

    # A restarted or flushed server answers NOSCRIPT: the script is loaded and sent again,
    # once (an append's first touch and a commit taking the next lease are pipelines).
    raw_redis.script_flush()
    first = world.append_batch(RUN, [_ev(stepPath="a"), _ev(stepPath="b")])
    assert [e.sequence for e in first] == [1, 2]
    raw_redis.script_flush()
    recorded, lease = world.append_batch_then_acquire(
        RUN,
        [_ev("StepCompleted", "end:a:1", stepPath="a")],
        LeaseRequest(f"{{{RUN}}}:step:b", "w1", 5),
    )
    assert [e.sequence for e in recorded] == [3]
    assert lease is not None and lease.token == 1
    assert world.acquire_lease(lease.key, "w2", 5) is None  # held: taken once, by w1
    assert [e.sequence for e in world.list_events(RUN)] == [1, 2, 3]


def test_a_runs_lease_tokens_keep_growing_across_the_counter_of_old(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    name = f"{{{RUN}}}:step:a"
    # A counter left by a version that counted each lease on its own key.
    raw_redis.set(_keys(world).lease(name)[1], 7)
    first = world.acquire_lease(name, "w1", 5)
    assert first is not None and first.token == 8
    world.release_lease(first)
    second = world.acquire_lease(name, "w2", 5)
    assert second is not None and second.token == 9
    assert raw_redis.exists(_keys(world).lease(name)[1]) == 0
    assert raw_redis.hget(_keys(world).run(RUN).tokens, name) == b"9"


def test_a_refused_append_leaves_the_lease_it_would_have_taken_free(world: RedisS3World) -> None:
    from little_dist.errors import LeaseLostError
    from little_dist.world.base import LeaseRequest

    fence = world.acquire_lease(f"{{{RUN}}}:step:a", "w1", 5)
    assert fence is not None
    world.release_lease(fence)
    with pytest.raises(LeaseLostError):
        world.append_batch_then_acquire(
            RUN, [_ev(stepPath="a")], LeaseRequest(f"{{{RUN}}}:step:b", "w1", 5), fence=fence.fence
        )
    assert world.list_events(RUN) == []
    assert world.acquire_lease(f"{{{RUN}}}:step:b", "w2", 5) is not None


def test_keys_of_a_run_and_its_leases_share_one_cluster_slot(world: RedisS3World) -> None:
    from redis.crc import key_slot

    layout = _keys(world)
    run = layout.run(RUN)
    lease, counter = layout.lease(lease_key_for(RUN, "step:draft"))
    slots = {
        key_slot(k.encode())
        for k in (run.events, run.occurrences, run.archived, run.ended, lease, counter)
    }
    assert len(slots) == 1
    # A run's lease counts its tokens in the run's hash, in the run's slot too.
    counted, _ = layout.lease_counter(lease_key_for(RUN, "step:draft"))
    assert counted == run.tokens
    # A lease name without a tag still keeps its hash and counter together.
    plain, plain_counter = layout.lease("scheduler")
    assert key_slot(plain.encode()) == key_slot(plain_counter.encode())


def test_appends_signal_the_scheduler_stream(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    spec = world_spec()
    signals = dict(parse_qsl(urlsplit(spec).query))["key_prefix"] + "signals"
    signalling = _open(_with_query(spec, signal_stream=signals), s3_env)
    try:
        signalling.append(RUN, _ev("RunStarted", "occ-1"))
        signalling.append_batch(
            "run_other", [_ev("StepCompleted", stepPath="a"), _ev("StepCompleted", stepPath="b")]
        )
        signalling.append(RUN, _ev("RunStarted", "occ-1"))  # already recorded: no signal
        # Attempt traces alone cannot make a step ready: recorded, no signal ...
        quiet = [_ev("StepAttemptStarted", stepPath="a"), _ev("harness.tool_call.started")]
        assert [e.sequence for e in signalling.append_batch(RUN, quiet)] == [2, 3]
        # ... until the commit, which signals with the batch's last sequence ...
        signalling.append_batch(RUN, [_ev("harness.tool_call.succeeded"), _ev("StepCompleted")])
        # ... unless its writer advances the run itself (a fast-path worker).
        quiet_commit = [_ev("StepCompleted", stepPath="b")]
        assert signalling.append_batch(RUN, quiet_commit, signal=False)[0].sequence == 6
        entries: Any = raw_redis.xrange(signals)
        assert [(f[b"run"], f[b"seq"]) for _, f in entries] == [
            (RUN.encode(), b"1"),
            (b"run_other", b"2"),
            (RUN.encode(), b"5"),
        ]
    finally:
        signalling.close()


def _busy_server(redis_url: str, seconds: float) -> threading.Thread:
    """Keep the Redis server busy (one long Lua script) for ``seconds``, in a thread."""
    client = redis.Redis.from_url(redis_url, socket_timeout=seconds + 10)
    busy = """
    local t = redis.call('TIME')
    local start = tonumber(t[1]) * 1000000 + tonumber(t[2])
    while true do
      t = redis.call('TIME')
      if tonumber(t[1]) * 1000000 + tonumber(t[2]) - start > tonumber(ARGV[1]) then
        return 1
      end
    end
    """

    def occupy() -> None:
        try:
            client.eval(busy, 0, int(seconds * 1_000_000))
        finally:
            client.close()

    thread = threading.Thread(target=occupy)
    thread.start()
    time.sleep(0.15)  # let the script start before the caller sends anything
    return thread


def test_an_append_that_timed_out_but_landed_is_recorded_once_when_retried(
    world_spec: Callable[[], str], s3_env: S3Service, redis_url: str
) -> None:
    """The real failure: the client gives up waiting, but Redis runs the append afterwards.

    A long Lua script keeps the server busy; the append (one EVALSHA, already on the wire)
    waits in the server's socket buffer while the client's 0.3 s read timeout fires. The
    world reports StorageUnavailableError, yet once the server is free the append runs. The
    caller retries with the same occurrence id and is handed the event that landed.
    """
    spec = world_spec()
    steady = _open(spec, s3_env)
    impatient_client = redis.Redis.from_url(
        urlunsplit(urlsplit(spec)._replace(query="")),
        socket_timeout=0.3,
        retry=Retry(NoBackoff(), 0),
    )
    keys = dict(parse_qsl(urlsplit(spec).query))
    impatient = RedisS3World(
        impatient_client,
        s3_client(s3_env.endpoint),
        s3_env.bucket,
        key_prefix=keys["key_prefix"],
        s3_prefix=keys["s3_prefix"],
    )
    try:
        impatient.append(RUN, _ev("RunStarted"))  # first touch: the next append is one call
        busy = _busy_server(redis_url, 1.0)
        step = _ev("StepCompleted", "occ-timeout", stepPath="a", output=42)
        with pytest.raises(StorageUnavailableError) as caught:
            impatient.append(RUN, step)
        assert isinstance(caught.value.__cause__, redis.exceptions.TimeoutError)
        busy.join()
        landed = steady.list_events(RUN)
        assert [e.occurrence_id for e in landed] == [None, "occ-timeout"]  # it did land
        retried = steady.append(RUN, step)
        assert retried == landed[1]
        assert steady.last_sequence(RUN) == 2
    finally:
        steady.close()
        impatient_client.close()


def test_redis_py_automatic_resends_after_a_timeout_land_once(
    world_spec: Callable[[], str], s3_env: S3Service, redis_url: str
) -> None:
    """redis-py's own default retry re-sends a timed-out EVALSHA; the occurrence id holds."""
    spec = world_spec()
    keys = dict(parse_qsl(urlsplit(spec).query))
    resending_client = redis.Redis.from_url(  # redis-py default: 3 re-sends on timeout
        urlunsplit(urlsplit(spec)._replace(query="")), socket_timeout=0.25
    )
    resending = RedisS3World(
        resending_client,
        s3_client(s3_env.endpoint),
        s3_env.bucket,
        key_prefix=keys["key_prefix"],
        s3_prefix=keys["s3_prefix"],
    )
    steady = _open(spec, s3_env)
    try:
        resending.append(RUN, _ev("RunStarted"))
        busy = _busy_server(redis_url, 0.6)
        step = _ev("StepCompleted", "occ-resent", stepPath="a")
        # Either a re-send's reply arrives or all time out; what matters is what the log holds.
        with contextlib.suppress(StorageUnavailableError):
            resending.append(RUN, step)
        busy.join()
        events = steady.list_events(RUN)
        assert [e.sequence for e in events] == [1, 2]
        assert [e.occurrence_id for e in events] == [None, "occ-resent"]
    finally:
        steady.close()
        resending_client.close()


def test_unreachable_services_raise_storage_unavailable(s3_env: S3Service) -> None:
    dead_redis = RedisS3World.from_settings(
        "redis://127.0.0.1:1/0",
        s3_env.endpoint,
        s3_env.bucket,
        access_key_id=s3_env.access_key_id,
        secret_access_key=s3_env.secret_access_key,
        socket_timeout=1.0,
    )
    try:
        for call in (
            lambda: dead_redis.append(RUN, _ev()),
            lambda: dead_redis.list_events(RUN),
            lambda: dead_redis.acquire_lease("k", "h", 1.0),
            lambda: dead_redis.register_version("wfver_0123456789abcdef", {"a": 1}),
            # Small artifacts are written to (and read from) Redis first.
            lambda: dead_redis.put_artifact(ArtifactInput(run_id=RUN, name="x", payload=1)),
            lambda: dead_redis.get_artifact("artifact://art_0123456789abcdef"),
        ):
            with pytest.raises(StorageUnavailableError) as caught:
                call()
            assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)
    finally:
        dead_redis.close()
    dead_s3 = RedisS3World(
        redis.Redis(),
        boto3.client(
            "s3",
            endpoint_url="http://127.0.0.1:1",
            region_name="us-east-1",
            aws_access_key_id="x",
            aws_secret_access_key="y",
            config=Config(retries={"max_attempts": 1}, connect_timeout=1),
        ),
        "nowhere",
        hot_artifact_limit=0,  # S3 only, else the artifact would land in the local Redis
    )
    with pytest.raises(StorageUnavailableError):
        dead_s3.put_artifact(ArtifactInput(run_id=RUN, name="x", payload=1))
    with pytest.raises(StorageUnavailableError):
        dead_s3.get_version("wfver_0123456789abcdef")


def test_missing_bucket_is_storage_unavailable(s3_env: S3Service) -> None:
    world = RedisS3World(redis.Redis(), s3_client(s3_env.endpoint), "no-such-bucket-here")
    with pytest.raises(StorageUnavailableError):
        world.get_version("wfver_0123456789abcdef")


def test_tampered_artifact_bytes_are_detected(
    world_spec: Callable[[], str], s3_env: S3Service
) -> None:
    # S3 only: a small artifact would be held in Redis (tests/test_world_hot_artifacts.py).
    world = _open(_with_query(world_spec(), hot_artifact_limit="0"), s3_env)
    try:
        manifest = world.put_artifact(ArtifactInput(run_id=RUN, name="out", payload={"v": 1}))
        client = s3_client(s3_env.endpoint)
        blob = _keys(world).blob(manifest.sha256[7:])
        client.delete_object(Bucket=s3_env.bucket, Key=blob)
        client.put_object(Bucket=s3_env.bucket, Key=blob, Body=b'{"v":2}')
        with pytest.raises(ArtifactCorruptError):
            world.get_artifact(manifest.artifact_ref)
    finally:
        world.close()


def test_an_in_process_run_on_the_redis_world_is_archived_when_it_finishes(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    from little_dist import define_workflow, run_workflow, tool
    from little_dist.events import EventInput
    from little_dist.world.redis_s3.archive import RunSealedError

    @tool
    def echo(text: str) -> dict[str, str]:
        """Echo the text."""
        return {"text": text}

    schema = {
        "type": "object",
        "required": ["text"],
        "properties": {"text": {"type": "string"}},
        "additionalProperties": False,
    }
    plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "echo.archive"},
        "input": {"schema": schema},
        "output": {"schema": schema},
        "permissions": {"tools": ["echo"]},
        "steps": [
            {
                "id": "echo",
                "uses": "tool.call",
                "with": {"tool": "echo", "args": {"text": "{{ input.text }}"}},
                "output": {"mode": "object", "schema": schema},
            }
        ],
    }
    workflow = define_workflow(
        id="echo.archive",
        description="Echo the input.",
        input=schema,
        output=schema,
        model="scripted/unused",
        tools=[echo],
        plan=plan,
    )
    result = run_workflow(workflow, {"text": "hi"}, world=world)
    assert result.output == {"text": "hi"}
    events = world.list_events(result.run_id)
    assert events[-1].type == "RunCompleted"
    # Sealed: the stream expires (archive TTL) and no event can be added any more...
    assert raw_redis.pttl(_keys(world).run(result.run_id).events) > 0
    with pytest.raises(RunSealedError):
        world.append(result.run_id, EventInput(type="little.test.late"))
    # ...and asking for the finished run again returns the recorded result, read back.
    again = run_workflow(workflow, {"text": "hi"}, world=world, run_id=result.run_id)
    assert again.output == {"text": "hi"} and again.status == "completed"


def test_entries_in_another_field_order_read_the_same(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    # The reader takes the append's own field layout by position; an entry written in any
    # other order (another version, a hand repair) is read by field name, with its id
    # derived from the stored fields when none was stored.
    world.append(RUN, _ev(stepPath="first"))
    stream = _keys(world).run(RUN).events
    payload = {"stepPath": "second"}
    raw_redis.xadd(
        stream,
        {"r": "2026-01-01T00:00:00.000Z", "o": "occ-2", "p": canonical_json(payload), "t": "X"},
        id="2-0",
    )
    raw_redis.xadd(
        stream,
        {"t": "Y", "p": "{}", "r": "2026-01-01T00:00:00.000Z", "x": "later field"},
        id="3-0",
    )
    first, second, third = world.list_events(RUN)
    assert first.payload == {"stepPath": "first"}
    assert (second.type, second.occurrence_id, second.payload) == ("X", "occ-2", payload)
    assert second.event_id == event_id_for(RUN, 2, "X", payload, "occ-2")
    assert (third.type, third.occurrence_id, third.payload) == ("Y", None, {})
    assert third.event_id == event_id_for(RUN, 3, "Y", {}, None)
    assert third.recorded_at == "2026-01-01T00:00:00.000Z"


def test_a_partial_read_asks_redis_only_for_the_ranges_around_what_the_reader_holds() -> None:
    from little_dist.world.redis_s3.entries import MAX_GAPS as _MAX_GAPS
    from little_dist.world.redis_s3.entries import gaps_around as _gaps

    assert _gaps(1, {3, 4, 6}) == [(2, 2), (5, 5), (7, None)]
    assert _gaps(0, {1, 2}) == [(3, None)]
    assert _gaps(5, {2, 3}) == [(6, None)]  # held before the read starts: nothing to leave
    assert _gaps(0, {10}) == [(1, 9), (11, None)]
    scattered = set(range(2, 2 * (_MAX_GAPS + 2), 2))
    assert _gaps(0, scattered) is None  # too many holes: one range, the held ones dropped


def test_scripts_are_packed_by_hiredis_directly_when_the_connection_would_use_it(
    world: RedisS3World,
) -> None:
    # The thread's own connection sends a script's call packed by hiredis itself (the bytes
    # redis-py's hiredis packer makes, without its per-argument pass); appends work as ever.
    import hiredis

    from little_dist.world.redis_s3 import redis_calls

    world.append(RUN, _ev("RunStarted", "occ-start"))
    recorded = world.append_batch(RUN, [_ev("StepScheduled", f"sched:{n}:1") for n in "abc"])
    pool = _events_client(world).connection_pool
    lane = redis_calls._lane_for(pool)
    assert lane.connection is not None and lane.pack is hiredis.pack_command
    assert [e.sequence for e in recorded] == [2, 3, 4]
    assert world.list_events(RUN)[1:] == recorded


def _events_client(world: RedisS3World) -> Any:
    return world._events._redis  # type: ignore[attr-defined]
