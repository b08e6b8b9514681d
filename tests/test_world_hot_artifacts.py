"""RedisS3World's hot tier: small artifacts live in Redis until their run is archived.

Real Redis and a real S3 server (SeaweedFS ``weed mini``), as in test_world_redis_s3.py. What
S3 holds is checked by listing the bucket; what Redis holds by reading the keys directly.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import pytest
import redis

from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.events import EventInput
from little_dist.world.base import (
    ArtifactCorruptError,
    ArtifactInput,
    ArtifactManifest,
    ArtifactNotFoundError,
)
from little_dist.world.redis_s3 import RedisS3World
from little_dist.world.redis_s3.hot_artifacts import DEFAULT_HOT_ARTIFACT_LIMIT
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.s3 import S3Objects
from tests.conftest_services import S3Service
from tests.s3_server import s3_client
from tests.test_world_redis_s3 import _open, _with_query

pytestmark = pytest.mark.integration

RUN = "run_hot_artifacts"
LIMIT = 64  # small, so "large" artifacts stay cheap to write


@pytest.fixture
def spec(redis_url: str, redis_key_prefix: str, s3_service: S3Service) -> str:
    """A fresh world's spec (own Redis key prefix, own S3 prefix), without the limit."""
    name = uuid.uuid4().hex[:10]
    return _with_query(
        redis_url,
        key_prefix=f"{redis_key_prefix}{name}:",
        s3_prefix=f"{s3_service.prefix}{name}/",
    )


@pytest.fixture
def opener(spec: str, s3_service: S3Service) -> Iterator[Callable[..., RedisS3World]]:
    """Open worlds on ``spec`` with a given hot_artifact_limit (default LIMIT)."""
    opened: list[RedisS3World] = []

    def open_with(limit: int | str = LIMIT) -> RedisS3World:
        world = _open(_with_query(spec, hot_artifact_limit=str(limit)), s3_service)
        opened.append(world)
        return world

    yield open_with
    for world in opened:
        world.close()


@pytest.fixture
def world(opener: Callable[..., RedisS3World]) -> RedisS3World:
    return opener()


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=False)
    yield client
    client.close()


@pytest.fixture
def bucket(spec: str, s3_service: S3Service) -> Callable[[], set[str]]:
    """The object keys this world holds in S3 (without its S3 prefix)."""
    prefix = dict(parse_qsl(urlsplit(spec).query))["s3_prefix"]
    client = s3_client(s3_service.endpoint)

    def keys() -> set[str]:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=s3_service.bucket, Prefix=prefix
        )
        return {o["Key"].removeprefix(prefix) for p in pages for o in p.get("Contents", [])}

    return keys


def _layout(world: RedisS3World) -> KeyLayout:
    return world._keys


def _artifact(payload: Any, name: str = "out", run_id: str = RUN) -> ArtifactInput:
    return ArtifactInput(run_id=run_id, name=name, payload=payload, step_path="branch[0].s")


def _s3_keys(manifest: ArtifactManifest) -> set[str]:
    return {f"blobs/sha256/{manifest.sha256[7:]}", f"manifests/{manifest.artifact_id}.json"}


def _start_run(world: RedisS3World, run_id: str = RUN) -> None:
    world.append(run_id, EventInput(type="RunStarted", payload={}))


def _end_run(world: RedisS3World, run_id: str = RUN) -> None:
    # Only a run whose log holds its end is archived.
    world.append(run_id, EventInput(type="RunCompleted", occurrence_id="run-end", payload={}))


def test_a_small_artifact_stays_in_redis_until_the_run_is_archived(
    world: RedisS3World,
    raw: redis.Redis,
    bucket: Callable[[], set[str]],
    spec: str,
    s3_service: S3Service,
) -> None:
    _start_run(world)
    manifest = world.put_artifact(_artifact({"ok": True}))
    layout = _layout(world)
    hot_key = layout.hot_artifact(manifest.artifact_id)
    run_set = layout.run(RUN).artifacts

    assert bucket() == set()  # no S3 object at all yet
    assert raw.hget(hot_key, "data") == b'{"ok":true}'
    assert raw.hget(hot_key, "manifest") == canonical_json(manifest.to_json()).encode()
    assert raw.smembers(run_set) == {manifest.artifact_id.encode()}
    read = world.get_artifact(manifest.artifact_ref)
    assert (read.manifest, read.payload) == (manifest, {"ok": True})

    _end_run(world)
    assert world.archive_run(RUN, ttl_seconds=0) == 2
    # One S3 object: the archive carries the artifact (no blob, no manifest of its own).
    assert {"archives/" + RUN + ".ndjson"} == bucket()
    assert raw.exists(hot_key, run_set) == 0  # the hot keys are gone
    stored = S3Objects(s3_client(s3_service.endpoint), s3_service.bucket)
    archive = stored.get(layout.archive(RUN))
    assert archive is not None
    line = json.loads(archive.decode().splitlines()[-1])
    assert line["artifactManifest"] == canonical_json(manifest.to_json())  # createdAt kept
    # Read back from the run's archive, by this world and by a fresh one, given the run.
    assert world.get_artifact(manifest.artifact_ref, run_id=RUN) == read
    assert [e.type for e in world.list_events(RUN)] == ["RunStarted", "RunCompleted"]
    again = _open(spec, s3_service)
    try:
        assert again.get_artifact(manifest.artifact_ref, run_id=RUN) == read
        with pytest.raises(ArtifactNotFoundError):
            again.get_artifact(manifest.artifact_ref)  # the ref alone names no run
    finally:
        again.close()
    # Archiving again changes nothing.
    assert world.archive_run(RUN, ttl_seconds=0) == 2
    assert world.get_artifact(manifest.artifact_ref, run_id=RUN) == read


def test_archive_with_a_ttl_carries_the_artifacts_and_lets_the_hot_keys_expire(
    world: RedisS3World, raw: redis.Redis, bucket: Callable[[], set[str]]
) -> None:
    _start_run(world)
    small = [world.put_artifact(_artifact(i, name=f"n{i}")) for i in range(30)]
    shared = world.put_artifact(_artifact(0, name="same-bytes-as-n0"))
    _end_run(world)
    world.archive_run(RUN, ttl_seconds=60)
    layout = _layout(world)
    # The archive is the one S3 object: it carries every artifact.
    assert {f"archives/{RUN}.ndjson"} == bucket()
    for manifest in [*small, shared]:
        assert 0 < raw.pttl(layout.hot_artifact(manifest.artifact_id)) <= 60_000
        assert world.get_artifact(manifest.artifact_ref).manifest == manifest
    assert 0 < raw.pttl(layout.run(RUN).artifacts) <= 60_000
    # Once Redis has given the keys back, every one is read from the archive.
    raw.delete(layout.run(RUN).artifacts, *(layout.hot_artifact(m.artifact_id) for m in small))
    raw.delete(layout.hot_artifact(shared.artifact_id))
    for index, manifest in enumerate(small):
        read = world.get_artifact(manifest.artifact_ref, run_id=RUN)
        assert (read.manifest, read.payload) == (manifest, index)
    assert world.get_artifact(shared.artifact_ref, run_id=RUN).payload == 0


def test_a_large_artifact_goes_straight_to_s3(
    world: RedisS3World, raw: redis.Redis, bucket: Callable[[], set[str]]
) -> None:
    at_limit = world.put_artifact(_artifact(b"x" * LIMIT, name="at-limit"))
    over = world.put_artifact(_artifact(b"y" * (LIMIT + 1), name="over"))
    layout = _layout(world)
    assert raw.exists(layout.hot_artifact(at_limit.artifact_id)) == 1
    assert bucket() == _s3_keys(over)  # only the large one
    assert raw.exists(layout.hot_artifact(over.artifact_id)) == 0
    assert raw.smembers(layout.run(RUN).artifacts) == {at_limit.artifact_id.encode()}
    assert world.get_artifact(over.artifact_ref).payload == b"y" * (LIMIT + 1)


def test_the_first_writer_wins(opener: Callable[..., RedisS3World]) -> None:
    first, second = opener(), opener()
    artifact = _artifact({"score": 98})
    written = first.put_artifact(artifact)
    time.sleep(0.01)  # a later createdAt, were it written again
    assert second.put_artifact(artifact) == written
    # Racing writers all get the one manifest that was stored.
    racing = _artifact({"score": 99}, name="raced")
    results: list[ArtifactManifest] = []
    barrier = threading.Barrier(8)

    def put() -> None:
        barrier.wait()
        results.append(first.put_artifact(racing))

    threads = [threading.Thread(target=put) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and len({m.created_at for m in results}) == 1
    assert first.get_artifact(results[0].artifact_ref).manifest == results[0]


def test_an_existing_manifest_naming_other_bytes_is_refused(
    world: RedisS3World, raw: redis.Redis
) -> None:
    manifest = world.put_artifact(_artifact("text"))
    hot_key = _layout(world).hot_artifact(manifest.artifact_id)
    forged = {**manifest.to_json(), "sha256": "sha256:" + "0" * 64}
    raw.hset(hot_key, "manifest", canonical_json(forged))
    with pytest.raises(ArtifactCorruptError, match="names other bytes"):
        world.put_artifact(_artifact("text"))


def test_a_zero_limit_keeps_everything_on_s3(
    opener: Callable[..., RedisS3World], raw: redis.Redis, bucket: Callable[[], set[str]]
) -> None:
    s3_only = opener(0)
    manifest = s3_only.put_artifact(_artifact("tiny"))
    layout = _layout(s3_only)
    assert bucket() == _s3_keys(manifest)
    assert raw.exists(layout.hot_artifact(manifest.artifact_id), layout.run(RUN).artifacts) == 0
    assert s3_only.get_artifact(manifest.artifact_ref).payload == "tiny"


def test_every_world_reads_hot_artifacts_whatever_its_own_limit(
    opener: Callable[..., RedisS3World],
) -> None:
    writer, reader = opener(), opener(0)
    manifest = writer.put_artifact(_artifact([1, 2]))
    assert reader.get_artifact(manifest.artifact_ref).payload == [1, 2]
    # ...and archives them: the archiving world's limit does not matter either.
    _start_run(writer)
    _end_run(writer)
    reader.archive_run(RUN, ttl_seconds=0)
    assert writer.get_artifact(manifest.artifact_ref, run_id=RUN).payload == [1, 2]


@pytest.mark.parametrize(
    ("field", "value", "detail"),
    [
        ("data", b'{"ok":false}', "sha256"),
        ("manifest", b"{not json", "malformed manifest"),
    ],
)
def test_a_hot_read_checks_the_stored_bytes(
    world: RedisS3World, raw: redis.Redis, field: str, value: bytes, detail: str
) -> None:
    manifest = world.put_artifact(_artifact({"ok": True}))
    raw.hset(_layout(world).hot_artifact(manifest.artifact_id), field, value)
    with pytest.raises(ArtifactCorruptError, match=detail):
        world.get_artifact(manifest.artifact_ref)


def test_a_hot_read_checks_the_manifest_names_the_artifact(
    world: RedisS3World, raw: redis.Redis
) -> None:
    one = world.put_artifact(_artifact(1, name="one"))
    two = world.put_artifact(_artifact(2, name="two"))
    layout = _layout(world)
    raw.copy(
        layout.hot_artifact(one.artifact_id), layout.hot_artifact(two.artifact_id), replace=True
    )
    with pytest.raises(ArtifactCorruptError, match="another artifact"):
        world.get_artifact(two.artifact_ref)
    raw.hdel(layout.hot_artifact(one.artifact_id), "data")
    with pytest.raises(ArtifactCorruptError, match="lacks"):
        world.get_artifact(one.artifact_ref)


def test_an_archive_that_fails_expires_nothing(
    world: RedisS3World, raw: redis.Redis, bucket: Callable[[], set[str]]
) -> None:
    _start_run(world)
    good = world.put_artifact(_artifact("good", name="good"))
    bad = world.put_artifact(_artifact("bad", name="bad"))
    layout = _layout(world)
    raw.hset(layout.hot_artifact(bad.artifact_id), "data", b"tampered")
    _end_run(world)
    with pytest.raises(ArtifactCorruptError, match="do not match"):
        world.archive_run(RUN, ttl_seconds=0)
    # The log is sealed but no archive is stored; every hot key is still there, no TTL.
    run = layout.run(RUN)
    assert raw.exists(run.events, run.artifacts, layout.hot_artifact(good.artifact_id)) == 3
    assert raw.pttl(layout.hot_artifact(good.artifact_id)) == -1
    assert bucket() == set()
    # Repaired, the archive runs again and completes.
    raw.hset(layout.hot_artifact(bad.artifact_id), "data", b"bad")
    assert world.archive_run(RUN, ttl_seconds=0) == 2
    assert bucket() == {f"archives/{RUN}.ndjson"}
    assert raw.exists(run.events, run.artifacts, layout.hot_artifact(good.artifact_id)) == 0
    assert world.get_artifact(bad.artifact_ref, run_id=RUN).payload == "bad"


def test_artifacts_of_a_sealed_run_go_to_s3(
    world: RedisS3World, raw: redis.Redis, bucket: Callable[[], set[str]]
) -> None:
    """Once the archive has sealed the run it reads the hot set: later puts must skip it."""
    _start_run(world)
    early = world.put_artifact(_artifact("early", name="early"))
    _end_run(world)
    world.archive_run(RUN, ttl_seconds=60)  # hot keys kept for a minute
    late = world.put_artifact(_artifact("late", name="late"))
    layout = _layout(world)
    assert raw.exists(layout.hot_artifact(late.artifact_id)) == 0
    assert raw.smembers(layout.run(RUN).artifacts) == {early.artifact_id.encode()}
    assert _s3_keys(late) <= bucket()
    # Writing the early one again answers with the first manifest (hot, then from S3).
    assert world.put_artifact(_artifact("early", name="early")) == early
    raw.delete(layout.hot_artifact(early.artifact_id))  # as if its TTL had passed
    assert world.put_artifact(_artifact("early", name="early")) == early
    assert world.get_artifact(late.artifact_ref).payload == "late"


def test_the_limit_is_validated_and_defaults_to_16_kib(
    spec: str, s3_service: S3Service, opener: Callable[..., RedisS3World]
) -> None:
    assert DEFAULT_HOT_ARTIFACT_LIMIT == 16 * 1024
    default = _open(spec, s3_service)
    try:
        assert default._artifacts._hot is not None
        assert default._artifacts._hot.limit == DEFAULT_HOT_ARTIFACT_LIMIT
    finally:
        default.close()
    for bad in ("-1", "lots", "1.5"):
        with pytest.raises(InvalidInputError, match="hot_artifact_limit"):
            opener(bad)
    with pytest.raises(InvalidInputError, match="hot_artifact_limit"):
        RedisS3World(
            redis.Redis.from_url(urlunsplit(urlsplit(spec)._replace(query=""))),
            s3_client(s3_service.endpoint),
            s3_service.bucket,
            hot_artifact_limit=-5,
        )


def test_manifest_json_in_redis_matches_the_s3_object(
    world: RedisS3World, raw: redis.Redis
) -> None:
    manifest = world.put_artifact(_artifact("x"))
    stored = raw.hget(_layout(world).hot_artifact(manifest.artifact_id), "manifest")
    assert stored is not None
    assert ArtifactManifest.from_json(json.loads(stored)) == manifest


def test_a_commit_writes_its_small_output_artifact_in_the_append_round_trip(
    world: RedisS3World, bucket: Callable[[], set[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hot put is queued ahead of the append script in one pipeline: one round trip,
    # no S3 object, and the artifact is readable under the ref the events name.
    from little_dist.world.artifacts import artifact_ref_for
    from little_dist.world.redis_s3 import events as event_log

    world.append(RUN, EventInput(type="little.test.first", payload={}))  # the run is known
    before = bucket()
    trips: list[int] = []
    real = event_log.execute_pipeline

    def counted(pipe: Any, **options: Any) -> Any:
        trips.append(len(pipe.command_stack))
        return real(pipe, **options)

    monkeypatch.setattr(event_log, "execute_pipeline", counted)
    output = ArtifactInput(run_id=RUN, name="output", payload={"n": 1}, step_path="f[a].w")
    ref = artifact_ref_for(output)
    recorded = world.append_batch_with_artifacts(
        RUN,
        [EventInput(type="StepCompleted", payload={"outputRef": ref}, occurrence_id="end:x:1")],
        [output],
    )
    assert trips == [2]  # the put and the append, together
    assert recorded[0].payload["outputRef"] == ref
    assert world.get_artifact(ref).payload == {"n": 1}
    assert bucket() == before  # in Redis until the run is archived
    # An artifact over the hot limit still goes to S3 first, then the append.
    big = ArtifactInput(run_id=RUN, name="output", payload="x" * (2 * LIMIT), step_path="g")
    world.append_batch_with_artifacts(
        RUN, [EventInput(type="little.test.big", payload={"ref": artifact_ref_for(big)})], [big]
    )
    assert world.get_artifact(artifact_ref_for(big)).payload == "x" * (2 * LIMIT)
    assert len(bucket() - before) == 2  # its blob and its manifest


def test_a_small_output_of_an_archived_run_reads_back_from_its_archive(
    world: RedisS3World, raw: redis.Redis, bucket: Callable[[], set[str]]
) -> None:
    """A step's small output went to the hot tier; once the run is archived and Redis has
    given its keys back, hydrating the run's events reads it from the archive."""
    from little_dist.runtime import hydrate_events

    _start_run(world)
    manifest = world.put_artifact(_artifact({"answer": 42}))
    world.append(
        RUN,
        EventInput(
            type="StepCompleted",
            occurrence_id="step:a",
            payload={"stepPath": "a", "outputRef": manifest.artifact_ref},
        ),
    )
    _end_run(world)
    world.archive_run(RUN, ttl_seconds=0)
    assert bucket() == {f"archives/{RUN}.ndjson"}
    assert raw.exists(_layout(world).hot_artifact(manifest.artifact_id)) == 0
    hydrated = hydrate_events(world, world.list_events(RUN))
    outputs = [e["payload"]["output"] for e in hydrated if isinstance(e, dict)]
    assert outputs == [{"answer": 42}]


def test_a_late_artifact_of_an_archived_run_goes_to_s3_once_its_marker_is_gone(
    world: RedisS3World, raw: redis.Redis, bucket: Callable[[], set[str]]
) -> None:
    """A zombie's small output for a run archived minutes ago (its seal marker gone with its
    stream: Redis holds nothing of the run, S3 is asked) is not kept in Redis, where nothing
    would archive it or let it expire."""
    _start_run(world)
    _end_run(world)
    world.archive_run(RUN, ttl_seconds=0)
    layout = _layout(world)
    raw.delete(layout.run(RUN).archived)  # the seal marker expired
    late = world.put_artifact(_artifact({"late": True}))
    assert raw.exists(layout.hot_artifact(late.artifact_id), layout.run(RUN).artifacts) == 0
    assert _s3_keys(late) <= bucket()
