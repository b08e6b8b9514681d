"""Archives of RedisS3World: compared with what S3 holds, streamed, and forgotten in time.

* An archive that already exists in S3 with other content is refused with
  EventLogCorruptError (the same content again is fine: archiving is idempotent).
* The log is streamed to S3 a part at a time (a multipart upload, conditional on the key
  being absent), never built whole in memory.
* The run's ``:archived`` marker expires (``archive_marker_ttl``), and the run index keeps
  live runs apart from archived ones, which leave it after the same time: neither grows
  forever. A run Redis has forgotten is read from its archive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
import redis

from little_dist.errors import EventLogCorruptError, RunEndedError
from little_dist.events import EventInput
from little_dist.world.redis_s3 import RunSealedError
from little_dist.world.redis_s3 import archive as archive_module
from tests.conftest_services import S3Service
from tests.test_world_redis_s3 import _open, s3_env, world_spec

__all__ = ["s3_env", "world_spec"]  # fixtures, imported for pytest

pytestmark = pytest.mark.integration

RUN = "run_archive"


def _ev(
    event_type: str = "StepScheduled", occurrence_id: str | None = None, **payload: Any
) -> EventInput:
    return EventInput(type=event_type, payload=payload, occurrence_id=occurrence_id)


def _with(spec: str, **params: str) -> str:
    parts = urlsplit(spec)
    query = dict(parse_qsl(parts.query))
    query.update(params)
    return urlunsplit(parts._replace(query=urlencode(query)))


@pytest.fixture
def raw_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_an_archive_with_other_content_is_refused(
    world_spec: Callable[[], str], s3_env: S3Service
) -> None:
    spec = world_spec()
    first = _open(spec, s3_env)
    # Same S3 prefix, another Redis prefix: another log of the same run id.
    other = _open(
        _with(spec, key_prefix=f"{dict(parse_qsl(urlsplit(spec).query))['key_prefix']}b:"), s3_env
    )
    try:
        first.append_batch(RUN, [_ev("RunStarted", "run-start"), _ev("RunCompleted", "run-end")])
        assert first.archive_run(RUN, ttl_seconds=60) == 2
        assert first.archive_run(RUN, ttl_seconds=60) == 2  # the same content again: fine
        other.append_batch(RUN, [_ev("RunStarted", "run-start"), _ev("RunFailed", "run-end")])
        with pytest.raises(EventLogCorruptError, match="archive"):
            other.archive_run(RUN, ttl_seconds=60)
        # What S3 holds is the first log, untouched.
        reader = _open(spec, s3_env)
        try:
            first.archive_run(RUN, ttl_seconds=0)
            assert [e.type for e in reader.list_events(RUN)] == ["RunStarted", "RunCompleted"]
        finally:
            reader.close()
    finally:
        first.close()
        other.close()


def test_a_long_log_is_streamed_to_s3_in_parts(
    world_spec: Callable[[], str], s3_env: S3Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small parts (S3's minimum is 5 MiB, which this test would take long to write): the
    # archive is cut into several parts, each uploaded as it fills, and read back whole.
    monkeypatch.setattr(archive_module, "_PART_BYTES", 5 * 1024 * 1024)
    world = _open(world_spec(), s3_env)
    try:
        bulk = "x" * 4000
        batch = [_ev(stepPath=f"s{i}", bulk=bulk) for i in range(500)]
        for _ in range(6):
            world.append_batch(RUN, batch)
        world.append(RUN, _ev("RunCompleted", "run-end"))
        uploads: list[int] = []
        real_part = world._s3._client.upload_part

        def counted(**kwargs: Any) -> Any:
            uploads.append(len(kwargs["Body"]))
            return real_part(**kwargs)

        monkeypatch.setattr(world._s3._client, "upload_part", counted)
        written = world.list_events(RUN)
        assert world.archive_run(RUN, ttl_seconds=0) == 3001
        assert len(uploads) == 3 and max(uploads) == 5 * 1024 * 1024
        reader = _open(
            _with(
                world_spec(), key_prefix=world._keys.redis_prefix, s3_prefix=world._keys.s3_prefix
            ),
            s3_env,
        )
        try:
            assert reader.list_events(RUN) == written
        finally:
            reader.close()
        # Archiving again compares with the parts' whole: equal, so fine.
        assert world.archive_run(RUN, ttl_seconds=0) == 3001
    finally:
        world.close()


def test_an_archived_run_is_remembered_in_a_bucket_field_then_read_from_s3(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    """Once its keys are gone, an archived run is a field of a bucket hash (~40 bytes, not a
    key of its own): it still refuses a late writer and sends reads to S3; the bucket
    expires by generation, then only S3 knows the run."""
    spec = _with(world_spec(), archive_marker_ttl="3600")
    world = _open(spec, s3_env)
    late = _open(spec, s3_env)  # a process that never wrote to the run
    try:
        written = world.append_batch(
            RUN, [_ev("RunStarted", "run-start"), _ev("RunCompleted", "run-end")]
        )
        world.append("run_live", _ev("RunStarted", "run-start"))
        assert world.archive_run(RUN, ttl_seconds=0) == 2
        keys = world._keys
        marker = keys.run(RUN).archived
        assert 0 < raw_redis.pttl(marker) <= 10_000  # the seal marker goes with the stream
        buckets = world._archives.marks.keys_of(RUN)
        (bucket,) = [key for key in buckets if raw_redis.exists(key)]
        assert raw_redis.hget(bucket, RUN) == b"2"
        assert raw_redis.object("encoding", bucket) == b"listpack"
        assert 3600_000 < raw_redis.pttl(bucket) <= 7200_000  # one to two marker TTLs
        assert world.list_run_ids() == ["run_archive", "run_live"]
        assert world.list_unarchived_run_ids() == ["run_live"]
        assert raw_redis.zscore(keys.run_index, RUN) is None

        raw_redis.delete(marker)  # the seal marker expired: the bucket still knows the run
        with pytest.raises(RunSealedError):
            late.append(RUN, _ev(stepPath="late"))
        assert late.append(RUN, _ev("RunCompleted", "run-end")) == written[1]
        assert raw_redis.exists(keys.run(RUN).events) == 0  # no fresh log under the id
        assert late.last_sequence(RUN) == 2
        assert late.list_events(RUN) == written
        assert world.archive_run(RUN) == 2  # archiving again: idempotent
        assert world.list_run_ids() == ["run_archive", "run_live"]

        raw_redis.delete(*buckets)  # the bucket's generation expired: Redis forgot the run
        reader = _open(spec, s3_env)
        try:
            assert reader.list_events(RUN) == written
            assert reader.list_events(RUN, after=1) == written[1:]
            assert reader.last_sequence(RUN) == 2
            assert RUN not in reader.list_run_ids()
        finally:
            reader.close()
    finally:
        late.close()
        world.close()


def test_a_refused_append_to_an_archived_run_does_not_put_it_back_in_the_index(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    spec = world_spec()
    world = _open(spec, s3_env)
    late = _open(spec, s3_env)  # a process that never wrote to the run
    try:
        world.append_batch(RUN, [_ev("RunStarted", "run-start"), _ev("RunCompleted", "run-end")])
        world.archive_run(RUN, ttl_seconds=0)
        with pytest.raises(RunSealedError):
            late.append(RUN, _ev(stepPath="late"))
        assert world.list_unarchived_run_ids() == []
        assert raw_redis.zscore(world._keys.run_index, RUN) is None
    finally:
        world.close()
        late.close()


def test_a_late_commit_to_an_archived_run_keeps_its_usage_and_the_bounds_come_from_s3(
    world_spec: Callable[[], str], s3_env: S3Service
) -> None:
    world = _open(world_spec(), s3_env)
    try:
        start, _, end = world.append_batch(
            RUN,
            [_ev("RunStarted", "run-start"), _ev(stepPath="s"), _ev("RunFailed", "run-end")],
        )
        world.archive_run(RUN, ttl_seconds=0)  # the stream is gone: S3 holds the log
        assert world.first_and_last_events(RUN) == (start, end)
        response = _ev(
            "harness.model.responded",
            "model-responded:s:1:0",
            stepPath="s",
            response={"usage": {"inputTokens": 10, "outputTokens": 2}},
        )
        with pytest.raises(RunSealedError) as refused:
            world.append_batch(RUN, [response, _ev("StepCompleted", "end:s:1", stepPath="s")])
        assert isinstance(refused.value, RunEndedError)
        (late,) = world.late_events(RUN)
        assert (late.type, late.occurrence_id, late.payload) == (
            response.type,
            response.occurrence_id,
            response.payload,
        )
        assert world.last_sequence(RUN) == 3
    finally:
        world.close()
