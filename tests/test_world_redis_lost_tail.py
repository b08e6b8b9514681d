"""Redis loses the tail of its AOF (a host crash under ``appendfsync everysec``).

A private ``redis-server`` with AOF on is killed with SIGKILL and its AOF truncated to the
size it had before the last writes, then started again: the log, the lease counters and
every other key go back to that moment, as they do after a crash that lost the last second
of writes. What processes still hold from before must not be trusted:

* a :class:`RunTracker` that folded the lost events notices the log went back (shorter than
  what it folded, or another event at a sequence it folded) and rebuilds from the log;
* a fencing token handed out again (the counter went back too) does not let the holder
  that got it first, and lost it with the tail, commit under the new holder's lease.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.errors import LeaseLostError
from little_dist.events import EventInput
from little_dist.fleet.run_tracker import RunTracker
from little_dist.world.base import run_lease_key
from little_dist.world.redis_s3 import RedisS3World
from tests.conftest_services import S3Service
from tests.redis_server import RedisServer, start_redis_server

pytestmark = pytest.mark.integration

RUN = "run_lost_tail"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    started = start_redis_server(tmp_path / "redis", appendfsync="always")
    yield started
    started.stop()


@pytest.fixture
def world(server: RedisServer, s3_service: S3Service) -> Iterator[RedisS3World]:
    opened = RedisS3World.from_settings(
        server.url(),
        s3_service.endpoint,
        s3_service.bucket,
        access_key_id=s3_service.access_key_id,
        secret_access_key=s3_service.secret_access_key,
        s3_prefix=f"{s3_service.prefix}{uuid.uuid4().hex[:8]}/",
    )
    yield opened
    opened.close()


def _mark(server: RedisServer) -> int:
    """Where the AOF ends now (every write is fsynced: ``appendfsync always``)."""
    return server.aof_tail().stat().st_size


def _lose_tail(server: RedisServer, size: int) -> None:
    """Crash Redis and lose every write after ``size`` bytes of its AOF."""
    server.kill()
    with server.aof_tail().open("r+b") as aof:
        aof.truncate(size)
        os.fsync(aof.fileno())
    server.start()


def _scheduled(path: str) -> EventInput:
    return EventInput(type="StepScheduled", payload={"stepPath": path, "attempt": 1})


def _start() -> EventInput:
    return EventInput(
        type="RunStarted",
        occurrence_id="run-start",
        payload={"workflowVersionId": "uncompiled", "input": {}},
    )


def _steps(state: Any) -> list[str]:
    return sorted(state.steps)


def test_a_cached_tracker_rebuilds_when_the_log_is_shorter_than_it_folded(
    server: RedisServer, world: RedisS3World
) -> None:
    world.append_batch(RUN, [_start(), _scheduled("a"), _scheduled("b")])
    kept = _mark(server)
    world.append_batch(RUN, [_scheduled("c"), _scheduled("d")])
    tracker = RunTracker(world, RUN)
    assert _steps(tracker.catch_up()) == ["a", "b", "c", "d"]

    _lose_tail(server, kept)

    assert world.last_sequence(RUN) == 3
    state = tracker.catch_up()
    assert state.event_count == 3
    assert _steps(state) == ["a", "b"]


def test_a_cached_tracker_rebuilds_when_the_log_grew_back_with_other_events(
    server: RedisServer, world: RedisS3World
) -> None:
    world.append_batch(RUN, [_start(), _scheduled("a"), _scheduled("b")])
    kept = _mark(server)
    world.append_batch(RUN, [_scheduled("c"), _scheduled("d")])
    tracker = RunTracker(world, RUN)
    assert tracker.catch_up().event_count == 5

    _lose_tail(server, kept)
    # Others write on after the restart: sequences 4 and 5 again, other events, and a 6th.
    world.append_batch(RUN, [_scheduled("x"), _scheduled("y"), _scheduled("z")])

    state = tracker.catch_up()
    assert state.event_count == 6
    assert _steps(state) == ["a", "b", "x", "y", "z"]
    # From then on it reads on as usual.
    world.append(RUN, _scheduled("w"))
    assert _steps(tracker.catch_up()) == ["a", "b", "w", "x", "y", "z"]


def test_a_token_handed_out_again_does_not_let_its_first_holder_commit(
    server: RedisServer, world: RedisS3World
) -> None:
    world.append(RUN, _start())
    key = run_lease_key(RUN, "step:a")
    kept = _mark(server)
    first = world.acquire_lease(key, "worker-a", 30)
    assert first is not None

    _lose_tail(server, kept)  # the acquire is lost: the counter went back

    second = world.acquire_lease(key, "worker-b", 30)
    assert second is not None
    assert second.token == first.token  # the same number, another holder
    committed = world.append(RUN, _scheduled("b"), fence=second.fence)
    assert committed.sequence == 2
    with pytest.raises(LeaseLostError):
        world.append(RUN, _scheduled("a"), fence=first.fence)
    # Nor may its commit release the lease the token now belongs to.
    with pytest.raises(LeaseLostError):
        world.append_batch(RUN, [_scheduled("a")], fence=first.fence, release=True)
    assert world.renew_lease(second, 30).token == second.token
    assert [e.payload.get("stepPath") for e in world.list_events(RUN)] == [None, "b"]
