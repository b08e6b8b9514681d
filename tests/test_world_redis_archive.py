"""Archives of RedisS3World: compared with what S3 holds, streamed, and forgotten in time.

* An archive that already exists in S3 with other content is refused with
  EventLogCorruptError (the same content again is fine: archiving is idempotent).
* The log is streamed to S3 a part at a time (a multipart upload, conditional on the key
  being absent), never built whole in memory.
* Once an archived run's keys have expired Redis holds nothing of it (no key, no byte) but
  its outcome, which expires a day later: its log is read from its archive, an append to it
  is refused (S3 is asked before a log is started under a run id Redis holds no log of),
  and a submission with its id does not start it again. The run index holds only runs not
  archived yet.
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
        # Only a start that wrongly vouches for the id (fresh: made up here) can write a
        # second log under it: an append asks S3 first and is answered from the archive.
        answered = other.append_batch(
            RUN, [_ev("RunStarted", "run-start"), _ev("RunFailed", "run-end")]
        )
        assert [e.type for e in answered] == ["RunStarted", "RunCompleted"]
        other.start_submission(
            RUN,
            "sha256:" + "0" * 64,
            [_ev("RunStarted", "run-start"), _ev("RunFailed", "run-end")],
            fresh=True,
        )
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


def _keys_of(raw_redis: redis.Redis, prefix: str) -> tuple[int, int]:
    """How many keys under ``prefix`` and their bytes (MEMORY USAGE)."""
    keys = list(raw_redis.scan_iter(match=f"{prefix}*", count=1000))
    return len(keys), sum(raw_redis.memory_usage(key) or 0 for key in keys)


def test_redis_holds_nothing_of_an_archived_run_once_its_keys_expire(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    """Not a key, not a byte: whatever the number of archived runs, Redis's share of them is
    zero once their keys have expired (S3 holds them); reads go to S3."""
    spec = world_spec()
    world = _open(spec, s3_env)
    prefix = world._keys.redis_prefix
    try:
        written = {}
        for index in range(20):
            run_id = f"run_gone{index}"
            written[run_id] = world.append_batch(
                run_id, [_ev("RunStarted", "run-start"), _ev("RunCompleted", "run-end")]
            )
        world.append("run_live", _ev("RunStarted", "run-start"))
        live_keys, live_bytes = _keys_of(raw_redis, prefix)
        for run_id in written:
            assert world.archive_run(run_id, ttl_seconds=1) == 2
        assert world.list_unarchived_run_ids() == ["run_live"]
        # The short TTL (the seal marker a little longer): expire it now rather than wait.
        for run_id in written:
            keys = world._keys.run(run_id)
            assert 0 < raw_redis.pttl(keys.events) <= 1000
            raw_redis.delete(keys.archived)
            raw_redis.delete(keys.events, keys.occurrences, keys.submitted, keys.ended)
        # What stays is each run's outcome (how it ended, a day longer: see
        # test_world_redis_outcomes); once it expires too, nothing.
        keys_left = list(raw_redis.scan_iter(match=f"{prefix}*", count=1000))
        outcomes = sorted(world._keys.run(run_id).outcome.encode() for run_id in written)
        assert sorted(key for key in keys_left if b"run_gone" in key) == outcomes
        assert all(0 < raw_redis.pttl(key) <= 24 * 3600 * 1000 for key in outcomes)
        raw_redis.delete(*outcomes)
        # Nothing else grew per archived run either (what is left is the live run's and
        # the shared keys: the run index, the stream of ends).
        count, size = _keys_of(raw_redis, prefix)
        assert count <= live_keys
        assert raw_redis.zrange(world._keys.run_index, 0, -1) == [b"run_live"]
        assert size <= live_bytes + 64  # (the index and the ends stream shrank or stayed)

        reader = _open(spec, s3_env)  # a process that never saw the runs
        try:
            for run_id, events in written.items():
                assert reader.list_events(run_id) == events
                assert reader.list_events(run_id, after=1) == events[1:]
                assert reader.last_sequence(run_id) == 2
            assert reader.list_run_ids() == sorted([*written, "run_live"])
            assert world.archive_run("run_gone0") == 2  # archiving again: idempotent
        finally:
            reader.close()
        assert _keys_of(raw_redis, prefix)[0] == count  # reads wrote nothing
    finally:
        world.close()


def test_an_append_to_an_archived_run_gone_from_redis_is_refused(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    spec = world_spec()
    world = _open(spec, s3_env)
    late = _open(spec, s3_env)  # a process that never wrote to the run
    try:
        written = world.append_batch(
            RUN, [_ev("RunStarted", "run-start"), _ev("RunCompleted", "run-end")]
        )
        world.archive_run(RUN, ttl_seconds=0)
        raw_redis.delete(world._keys.run(RUN).archived)  # the seal marker expired too
        with pytest.raises(RunSealedError, match=f"Run {RUN} is archived; its event log"):
            late.append(RUN, _ev(stepPath="late"))
        with pytest.raises(RunSealedError):  # a start too: an archived run never restarts
            late.append_batch(RUN, [_ev("RunStarted"), _ev("RunCompleted", "end-again")])
        # What the log recorded is answered (an append sent again after a lost reply).
        assert late.append(RUN, _ev("RunStarted", "run-start", again=True)) == written[0]
        assert late.append(RUN, _ev("RunCompleted", "run-end")) == written[1]
        assert raw_redis.exists(world._keys.run(RUN).events) == 0  # no fresh log
        left = list(raw_redis.scan_iter(match=f"{world._keys.redis_prefix}*{RUN}*"))
        assert left == [world._keys.run(RUN).outcome.encode()]  # (how it ended, for a day)
        assert raw_redis.zscore(world._keys.run_index, RUN) is None
        assert late.list_events(RUN) == written
    finally:
        late.close()
        world.close()


def test_a_new_run_id_given_by_its_caller_starts_after_s3_was_asked(
    world_spec: Callable[[], str], s3_env: S3Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = _open(world_spec(), s3_env)
    asked: list[str] = []
    real_get = world._s3.get

    def get(key: str) -> bytes | None:
        asked.append(key)
        return real_get(key)

    monkeypatch.setattr(world._s3, "get", get)
    try:
        (started,) = world.append_batch("run_given", [_ev("RunStarted", "run-start")])
        assert started.sequence == 1
        assert asked == [world._keys.archive("run_given")]
        world.append("run_given", _ev(stepPath="s"))  # the log is there: S3 is not asked
        _, recorded, new = world.start_submission(
            "run_made_up", "sha256:" + "1" * 64, [_ev("RunStarted", "run-start")], fresh=True
        )
        assert new and [e.sequence for e in recorded] == [1]
        assert asked == [world._keys.archive("run_given")]  # a made-up id: no S3 request
    finally:
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


def test_archiving_a_run_drops_what_the_process_kept_of_it(
    world_spec: Callable[[], str], s3_env: S3Service
) -> None:
    """A scheduler appends to every run but seldom its end: the runs it archives must not
    stay in its per-run cache (its memory grew with every run, up to the cache's cap)."""
    spec = world_spec()
    world, worker = _open(spec, s3_env), _open(spec, s3_env)
    try:
        run_ids = [f"run_kept{index}" for index in range(5)]
        for run_id in run_ids:
            world.append(run_id, _ev("RunStarted", "run-start"))
            worker.append(run_id, _ev("RunCompleted", "run-end"))  # the end: another's
        assert sorted(world._events._runs) == run_ids
        for run_id in run_ids:
            world.archive_run(run_id, ttl_seconds=0)
        assert not world._events._runs
    finally:
        worker.close()
        world.close()


def test_a_lease_taken_after_the_archive_keeps_the_run_counters_no_longer_than_its_log(
    world_spec: Callable[[], str], s3_env: S3Service, raw_redis: redis.Redis
) -> None:
    """A delayed task takes a run's lease after the run was archived: the run's token
    counters must still go with its log, not stay 30 days (bench/cost.py found one)."""
    world = _open(world_spec(), s3_env)
    try:
        world.append_batch(RUN, [_ev("RunStarted", "run-start"), _ev("RunCompleted", "run-end")])
        lease = world.acquire_lease(f"{{{RUN}}}:step:s", "worker-1", 30)
        assert lease is not None
        tokens = world._keys.run(RUN).tokens
        assert raw_redis.pttl(tokens) > 3600_000  # a live run's: long
        world.archive_run(RUN, ttl_seconds=60)
        assert 0 < raw_redis.pttl(tokens) <= 60_000
        late = world.acquire_lease(f"{{{RUN}}}:step:t", "worker-2", 30)
        assert late is not None and late.token == 1
        assert 0 < raw_redis.pttl(tokens) <= 60_000  # not 30 days again
    finally:
        world.close()
