"""What one submit costs the world (issue 24, "submitting is cheap").

A submit of a fresh run whose workflow version this process registered before is one
round trip to Redis and no S3 request: the input's claim and the run's start are recorded
in one atomic step (``RedisS3World.start_submission``), without reading the empty log
first. The semantics stay: the same run id twice is one run, another input is refused and
leaves the log as it was (see also tests/test_fleet_submit_race.py). A run id the caller
gives costs one look at S3 and a second round trip: Redis keeps nothing of an archived run,
so the archives are asked whether the run ran before; an archived run is never started
again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from little_dist.fleet.client import RunMismatchError, submit_run
from little_dist.world.redis_s3 import RedisS3World
from tests import workflows_for_tests as wf
from tests.conftest_services import S3Service
from tests.request_counts import counted
from tests.test_world_redis_s3 import _open, s3_env, world_spec

__all__ = ["s3_env", "world_spec"]  # fixtures, imported for pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def world(world_spec: Callable[[], str], s3_env: S3Service) -> Iterator[RedisS3World]:
    opened = _open(world_spec(), s3_env)
    yield opened
    opened.close()


def test_a_fresh_submit_of_a_registered_version_is_one_round_trip(world: RedisS3World) -> None:
    doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
    submit_run(world, doc, {"x": 1})  # registers the version
    with counted(world) as counts:
        run_id = submit_run(world, doc, {"x": 1})
    assert counts == {"redis": 1, "s3": 0}
    types = [event.type for event in world.list_events(run_id)]
    assert types == ["WorkflowVersionRegistered", "RunStarted"]
    # An id given by the caller: is there an archive of it? One S3 read, then the start.
    given = f"run_cheap_{uuid.uuid4().hex[:8]}"
    with counted(world) as counts:
        assert submit_run(world, doc, {"x": 1}, run_id=given) == given
    assert counts == {"redis": 2, "s3": 1}
    assert [event.type for event in world.list_events(given)] == types


def test_a_fixed_plan_submit_reads_nothing_back(world: RedisS3World) -> None:
    from tests.fleet_app import chain5

    submit_run(world, chain5, {"n": 1})
    with counted(world) as counts:
        run_id = submit_run(world, chain5, {"n": 1})
    assert counts == {"redis": 1, "s3": 0}
    assert [event.type for event in world.list_events(run_id)][-2:] == [
        "WorkflowVersionRegistered",
        "RunStarted",
    ]


def test_submitting_again_is_one_run_and_another_input_is_refused(world: RedisS3World) -> None:
    doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
    run_id = f"run_cheap_{uuid.uuid4().hex[:8]}"
    submit_run(world, doc, {"x": 1}, run_id=run_id)
    before = world.list_events(run_id)
    assert submit_run(world, doc, {"x": 1}, run_id=run_id) == run_id
    with pytest.raises(RunMismatchError, match="different input"):
        submit_run(world, doc, {"x": 2}, run_id=run_id)
    assert world.list_events(run_id) == before


def test_start_submission_appends_nothing_under_another_claim(world: RedisS3World) -> None:
    from little_dist.canonical import sha256_digest
    from little_dist.events import EventInput

    run_id = f"run_cheap_{uuid.uuid4().hex[:8]}"
    mine, theirs = sha256_digest({"x": 1}), sha256_digest({"x": 2})
    assert world.claim_submission(run_id, theirs) == theirs  # claimed, nothing written yet
    start = [EventInput(type="RunStarted", occurrence_id="run-start", payload={"input": 1})]
    assert world.start_submission(run_id, mine, start) == (theirs, [], False)
    assert world.list_events(run_id) == []
    claimed, recorded, new = world.start_submission(run_id, theirs, start)
    assert (claimed, [e.type for e in recorded], new) == (theirs, ["RunStarted"], True)
    again = world.start_submission(run_id, theirs, start)
    assert again[0] == theirs and again[1] == recorded and again[2] is False


def test_submit_runs_starts_a_batch_in_a_round_trip_per_chunk(world: RedisS3World) -> None:
    from little_dist.fleet.one_trip_starts import _SEND_EVERY
    from little_dist.fleet.submission import submit_runs
    from tests.fleet_app import chain5

    # The workflow's shared part is stored, the sending thread's connection opened.
    submit_runs(world, chain5, [{"n": 0}], run_ids=[f"run_many_first_{uuid.uuid4().hex[:6]}"])
    inputs = [{"n": n} for n in range(1, 2 * _SEND_EVERY + 1)]
    with counted(world, any_thread=True) as counts:
        run_ids = submit_runs(world, chain5, inputs)
    assert counts == {"redis": 2, "s3": 0}
    assert len(set(run_ids)) == len(inputs)
    for run_id, run_input in zip(run_ids, inputs, strict=True):
        started = [e for e in world.list_events(run_id) if e.type == "RunStarted"]
        assert [e.payload["input"] for e in started] == [run_input]
    # Again: the same runs (nothing new); one with another input is refused, the rest kept.
    assert submit_runs(world, chain5, inputs[:2], run_ids=run_ids[:2]) == run_ids[:2]
    before = world.list_events(run_ids[1])
    fresh = f"run_many_x_{uuid.uuid4().hex[:6]}"
    with pytest.raises(RunMismatchError, match=run_ids[1]):
        submit_runs(world, chain5, [{"n": 99}, {"n": 100}], run_ids=[fresh, run_ids[1]])
    assert world.list_events(run_ids[1]) == before
    assert [e.type for e in world.list_events(fresh)][-1] == "RunStarted"


def test_a_batch_writes_the_bytes_of_the_slow_path(
    world: RedisS3World,
    world_spec: Callable[[], str],
    s3_env: S3Service,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The starts a batch prints from templates are, byte for byte, the stream entries
    (ids, payloads, everything) the slow path's events are appended as, same ids, same
    clock."""
    from little_dist.fleet.run_starts import start_events as _start_events
    from little_dist.fleet.submission import submit_runs
    from little_dist.fleet.versions import split_version
    from little_dist.planner.fixed import fixed_plan_events
    from little_dist.world.redis_s3 import events as event_log
    from tests.fleet_app import chain5

    monkeypatch.setattr(event_log, "recorded_at_now", lambda: "2026-01-02T03:04:05.678Z")
    inputs: list[Any] = [{"n": 1}, {"n": 2.5, "z": [1, "x"], "é": {"😀": None}}, {"a": "\u0000"}]
    run_ids = [f"run_bytes_{n}_{uuid.uuid4().hex[:6]}" for n in range(len(inputs))]
    submit_runs(world, chain5, inputs, run_ids=run_ids)
    slow_world = _open(world_spec(), s3_env)
    try:
        for run_id, run_input in zip(run_ids, inputs, strict=True):
            planned = fixed_plan_events(chain5, run_input)
            assert planned is not None
            _, binding = split_version(planned.version, planned.shared_part)
            slow_world.append_batch(
                run_id, [*planned.events, *_start_events(planned.version, run_input, binding)]
            )
            fast = world._redis.xrange(world._keys.run(run_id).events)
            slow = slow_world._redis.xrange(slow_world._keys.run(run_id).events)
            assert len(fast) == 6
            assert fast == slow
    finally:
        slow_world.close()


def test_the_archive_of_a_small_run_is_one_s3_put_whatever_its_outputs(
    world: RedisS3World,
) -> None:
    from little_dist.events import EventInput
    from little_dist.world.base import ArtifactInput

    run_id = f"run_small_{uuid.uuid4().hex[:6]}"
    world.append(run_id, EventInput(type="RunStarted", occurrence_id="run-start", payload={}))
    refs = [
        world.put_artifact(ArtifactInput(run_id=run_id, name=f"out{n}", payload={"n": n}))
        for n in range(20)
    ]
    world.append(run_id, EventInput(type="RunFailed", occurrence_id="run-end", payload={}))
    with counted(world) as counts:
        world.archive_run(run_id)
    assert counts["s3"] == 1  # the archive, which carries the 20 outputs
    assert [world.get_artifact(m.artifact_ref, run_id=run_id).payload for m in refs] == [
        {"n": n} for n in range(20)
    ]


def test_a_run_archived_and_gone_from_redis_is_not_started_again(
    world: RedisS3World, s3_env: S3Service
) -> None:
    """Redis holds nothing of the run any more; a submit under its id (one or a batch) asks
    S3, finds the archive and starts nothing: the same input answers the id, another input
    is refused, and Redis still holds nothing of the run."""
    from little_dist.events import EventInput
    from little_dist.fleet.submission import submit_runs

    doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
    run_id = submit_run(world, doc, {"x": 1})
    end = EventInput(type="RunFailed", occurrence_id="run-end", payload={"error": "stop"})
    world.append(run_id, end)
    archived = world.list_events(run_id)
    world.archive_run(run_id, ttl_seconds=0)
    raw = world._redis
    raw.delete(world._keys.run(run_id).archived)  # its seal marker expired too
    raw.delete(world._keys.run(run_id).outcome)  # and its outcome, a day later
    prefix = world._keys.redis_prefix

    def held() -> list[bytes]:
        return list(raw.scan_iter(match=f"{prefix}*{run_id}*"))

    assert held() == []
    assert submit_run(world, doc, {"x": 1}, run_id=run_id) == run_id
    assert submit_runs(world, doc, [{"x": 1}], run_ids=[run_id]) == [run_id]
    with pytest.raises(RunMismatchError, match="different input"):
        submit_run(world, doc, {"x": 2}, run_id=run_id)
    with pytest.raises(RunMismatchError, match=run_id):
        submit_runs(world, doc, [{"x": 2}], run_ids=[run_id])
    assert held() == []  # no fresh log, no claim, no index entry
    assert raw.zscore(world._keys.run_index, run_id) is None
    assert world.list_events(run_id) == archived
    assert world.claim_submission(run_id, "sha256:" + "2" * 64) != "sha256:" + "2" * 64
