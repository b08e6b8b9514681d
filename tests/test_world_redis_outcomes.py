"""A run's outcome in Redis (``little_dist/world/redis_s3/outcomes.py``): what a watcher with
only a Redis client reads once the run is over, for a day after its archive.

* A run's end writes ``{prefix}{RUN}:outcome``: its status, its end's payload as the log has
  it, when it ended; the first end the log holds (a second one, refused, changes nothing).
* Its archive writes it again, to stay a day after; it outlives the log in Redis.
* Bounded: an end too large to keep keeps its ``outputRef`` and its error's gist.
* A refused submission is answered by its task id, and recorded under its run id only while
  the id is nobody's run (a live run, an archived one, one gone from Redis but in S3:
  untouched); an accepted one is answered by its task id and removes a refusal left under
  its run id; the end of the run replaces one anyway.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from little_dist.errors import RunEndedError
from little_dist.events import EventInput
from little_dist.world.redis_s3 import RedisS3World
from little_dist.world.redis_s3.outcomes import OUTCOME_TTL_SECONDS, PAYLOAD_LIMIT
from tests.conftest_services import S3Service
from tests.test_world_redis_s3 import _open, s3_env, world_spec

__all__ = ["s3_env", "world_spec"]  # fixtures, imported for pytest

pytestmark = pytest.mark.integration

RUN = "run_outcome"
DAY_MS = OUTCOME_TTL_SECONDS * 1000


def _ev(
    event_type: str = "StepScheduled", occurrence_id: str | None = None, **payload: Any
) -> EventInput:
    return EventInput(type=event_type, payload=payload, occurrence_id=occurrence_id)


@pytest.fixture
def raw_redis(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def world(world_spec: Callable[[], str], s3_env: S3Service) -> Iterator[RedisS3World]:
    opened = _open(world_spec(), s3_env)
    yield opened
    opened.close()


def _raw_outcome(raw: redis.Redis, world: RedisS3World, run_id: str = RUN) -> bytes | None:
    value: bytes | None = raw.get(world._keys.run(run_id).outcome)
    return value


def test_a_run_end_writes_its_outcome_and_a_second_end_changes_nothing(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    world.append(RUN, _ev("RunStarted", "run-start", input={"x": 1}))
    assert world.outcome(RUN) is None
    end = world.append(
        RUN, _ev("RunCompleted", "run-end", output={"n": 2, "text": "é"}, workflowVersionId="w")
    )
    found = world.outcome(RUN)
    assert found == {
        "status": "completed",
        "runId": RUN,
        "endedAt": end.recorded_at,
        "sequence": 2,
        "payload": {"output": {"n": 2, "text": "é"}, "workflowVersionId": "w"},
    }
    # The first member is the status, always (what a script tells a refusal by).
    raw = _raw_outcome(raw_redis, world)
    assert raw is not None and raw.startswith(b'{"status":"completed",')
    assert 0 < raw_redis.pttl(world._keys.run(RUN).outcome) <= DAY_MS
    with pytest.raises(RunEndedError):
        world.append(RUN, _ev("RunFailed", "another-end", error={"message": "late"}))
    assert world.outcome(RUN) == found


def test_a_failed_run_names_its_cause_and_the_archive_keeps_the_outcome_a_day(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    error = {"name": "StepFailed", "causeCode": "tool_error", "message": "the tool broke"}
    world.append_batch(
        RUN, [_ev("RunStarted", "run-start"), _ev("RunFailed", "run-end", error=error)]
    )
    raw_redis.pexpire(world._keys.run(RUN).outcome, 5_000)  # (as if written long ago)
    assert world.archive_run(RUN, ttl_seconds=0) == 2
    assert raw_redis.exists(world._keys.run(RUN).events) == 0  # the log left Redis
    found = world.outcome(RUN)
    assert found is not None and found["status"] == "failed"
    assert found["payload"]["error"] == error
    # Written again by the archive: a day from now.
    assert DAY_MS - 60_000 < raw_redis.pttl(world._keys.run(RUN).outcome) <= DAY_MS


def test_an_end_too_large_keeps_its_reference_and_the_start_of_its_message(
    world: RedisS3World,
) -> None:
    ref = "artifact://art_0123456789abcdef"
    world.append_batch(
        "run_big_ok",
        [
            _ev("RunStarted", "run-start"),
            _ev("RunCompleted", "run-end", output="x" * PAYLOAD_LIMIT, outputRef=ref),
        ],
    )
    big = world.outcome("run_big_ok")
    assert big is not None and big["payload"] == {"outputRef": ref, "truncated": True}
    message = "a" + "é" * 3000  # cut at 4,096 bytes: inside a character, so before it
    world.append_batch(
        "run_big_failed",
        [
            _ev("RunStarted", "run-start"),
            _ev(
                "RunFailed",
                "run-end",
                error={"name": "E", "causeCode": "internal", "message": message, "n": 1},
                bulk="y" * PAYLOAD_LIMIT,
            ),
        ],
    )
    failed = world.outcome("run_big_failed")
    assert failed is not None
    assert failed["payload"] == {
        "error": {"name": "E", "causeCode": "internal", "message": "a" + "é" * 2047},
        "truncated": True,
    }


def test_a_refusal_is_kept_by_task_and_under_a_free_run_id_only(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    assert world.record_refusal("task-1", "run_free", "invalid_input", "input /x: bad") is True
    by_task = world.task_answer("task-1")
    assert by_task is not None and by_task == world.outcome("run_free")
    assert list(by_task) == ["status", "runId", "taskId", "endedAt", "payload"]
    assert by_task["payload"]["error"] == {
        "name": "SubmissionRefused",
        "causeCode": "invalid_input",
        "message": "input /x: bad",
    }
    assert 0 < raw_redis.pttl(world._keys.task("task-1")) <= DAY_MS
    # Announced on the stream of ends, which waiters block on.
    announced = raw_redis.xrange(world._keys.ends)
    assert announced[-1][1] == {b"run": b"run_free", b"task": b"task-1"}
    # A later refusal under the same free id replaces it.
    assert world.record_refusal("task-2", "run_free", "invalid_workflow", "bad") is True
    assert world.outcome("run_free")["taskId"] == "task-2"  # type: ignore[index]
    # Without a usable run id: by task only.
    assert world.record_refusal("task-3", None, "invalid_run_id", "no") is False
    assert world.task_answer("task-3")["runId"] is None  # type: ignore[index]

    # A live run's id: its record is the run's, untouched.
    world.append(RUN, _ev("RunStarted", "run-start"))
    assert world.record_refusal("task-4", RUN, "run_id_taken", "taken") is False
    assert world.outcome(RUN) is None
    assert world.task_answer("task-4")["runId"] == RUN  # type: ignore[index]
    # An ended run's outcome is not replaced, nor, once archived and gone, its archive's.
    world.append(RUN, _ev("RunCompleted", "run-end", output=1))
    world.archive_run(RUN, ttl_seconds=0)
    raw_redis.delete(world._keys.run(RUN).archived)
    assert world.record_refusal("task-5", RUN, "run_id_taken", "taken") is False
    assert world.outcome(RUN)["status"] == "completed"  # type: ignore[index]
    raw_redis.delete(world._keys.run(RUN).outcome)  # (a day later: only S3 knows the run)
    assert world.record_refusal("task-6", RUN, "run_id_taken", "taken") is False
    assert world.outcome(RUN) is None


def test_an_acceptance_removes_a_refusal_left_under_its_id_and_an_end_replaces_one(
    world: RedisS3World, raw_redis: redis.Redis
) -> None:
    world.record_refusal("task-1", "run_later", "invalid_input", "bad")
    world.record_acceptance("task-2", "run_later")
    assert world.outcome("run_later") is None
    assert world.task_answer("task-1")["status"] == "refused"  # type: ignore[index]
    accepted = world.task_answer("task-2")
    assert accepted is not None
    assert list(accepted) == ["status", "runId", "taskId", "acceptedAt"]
    assert accepted["status"] == "accepted" and accepted["runId"] == "run_later"
    assert raw_redis.xrange(world._keys.ends)[-1][1] == {b"run": b"run_later", b"task": b"task-2"}
    world.record_refusal("task-3", "run_later", "invalid_input", "bad")
    world.append_batch(
        "run_later", [_ev("RunStarted", "run-start"), _ev("RunCompleted", "run-end", output=3)]
    )
    assert world.outcome("run_later")["status"] == "completed"  # type: ignore[index]
    world.record_acceptance("task-4", "run_later")  # (a retry of the finished run)
    assert json.loads(json.dumps(world.outcome("run_later")))["payload"] == {"output": 3}


def test_the_ends_a_worker_follows_are_runs_ends_not_answers_to_submissions(
    world: RedisS3World,
) -> None:
    # A refusal under a live run's id (another input under a taken id) is announced on the
    # stream of ends for its sender; a worker that took it for the run's end cancelled the
    # run's attempt in flight (the model call abandoned: the run failed "cancelled").
    after, _ = world.read_ends(None, 1)
    world.append_batch(RUN, [_ev("RunStarted", "run-start")])
    assert world.record_refusal("task-9", RUN, "run_id_taken", "another input") is False
    world.record_acceptance("task-10", RUN)
    world.append_batch("run_other", [_ev("RunStarted", "run-start"), _ev("RunFailed", "run-end")])
    _, ended = world.read_ends(after, 100)
    assert RUN not in ended and set(ended) == {"run_other"}
