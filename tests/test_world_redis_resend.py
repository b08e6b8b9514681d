"""A Lua call whose reply was lost is sent again only when it is idempotent by construction.

The reply is lost for real: the command runs on a real Redis, then reading its answer fails
as a reset connection would (the connection is dropped). An append of an event without an
occurrence id must then not be sent again (it would be recorded twice): the caller gets a
StorageUnavailableError that says the append may have landed. An append whose events all
carry occurrence ids is sent again and answers the recorded events.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from little_dist.errors import StorageUnavailableError
from little_dist.events import EventInput
from little_dist.world.redis_s3 import RedisS3World
from little_dist.world.redis_s3.redis_calls import LuaScript
from tests.conftest_services import S3Service
from tests.test_world_redis_s3 import _open, s3_env, world_spec

__all__ = ["s3_env", "world_spec"]  # fixtures, imported for pytest

RUN = "run_resend"


@pytest.fixture
def world(world_spec: Callable[[], str], s3_env: S3Service) -> Iterator[RedisS3World]:
    opened = _open(world_spec(), s3_env)
    yield opened
    opened.close()


def _lose_next_reply(world: RedisS3World) -> None:
    """The next reply read on this thread's script connection is read, then lost."""
    script: LuaScript = world._events._append_script
    connection: Any = script._lane.connection
    assert connection is not None, "make one call on this thread first"
    real = connection.read_response

    def read_then_lose(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        connection.read_response = real
        raise redis.exceptions.ConnectionError("Connection reset by peer (test)")

    connection.read_response = read_then_lose


def _ev(occurrence_id: str | None = None, **payload: Any) -> EventInput:
    return EventInput(type="StepScheduled", payload=payload, occurrence_id=occurrence_id)


@pytest.mark.integration
def test_an_append_without_occurrence_ids_is_not_sent_again(world: RedisS3World) -> None:
    world.append(RUN, _ev("first", stepPath="a"))
    _lose_next_reply(world)
    with pytest.raises(StorageUnavailableError, match="may have been applied"):
        world.append(RUN, _ev(stepPath="b"))
    # It ran once; nothing sent it again.
    assert [e.payload["stepPath"] for e in world.list_events(RUN)] == ["a", "b"]


@pytest.mark.integration
def test_a_first_append_in_a_pipeline_is_not_sent_again(world: RedisS3World) -> None:
    world.append(RUN, _ev("x", stepPath="x"))  # another process started the run
    world._events._runs.clear()  # this one never wrote to it: its first append is piped
    _lose_next_reply(world)
    with pytest.raises(StorageUnavailableError, match="may have been applied"):
        world.append_batch(RUN, [_ev(stepPath="a"), _ev(stepPath="b")])
    assert [e.payload["stepPath"] for e in world.list_events(RUN)] == ["x", "a", "b"]


@pytest.mark.integration
def test_an_append_with_occurrence_ids_is_sent_again(world: RedisS3World) -> None:
    world.append(RUN, _ev("first", stepPath="a"))
    _lose_next_reply(world)
    recorded = world.append_batch(RUN, [_ev("b", stepPath="b"), _ev("c", stepPath="c")])
    assert [e.sequence for e in recorded] == [2, 3]
    assert [e.payload["stepPath"] for e in world.list_events(RUN)] == ["a", "b", "c"]


@pytest.mark.integration
def test_a_lease_acquire_whose_reply_was_lost_is_sent_again_and_keeps_its_token(
    world: RedisS3World,
) -> None:
    world.append(RUN, _ev("first", stepPath="a"))  # opens the connection
    first = world.acquire_lease("{run_resend}:step:a", "holder-1", 30)
    assert first is not None
    world.release_lease(first)
    _lose_next_reply(world)
    again = world.acquire_lease("{run_resend}:step:a", "holder-2", 30)
    # The lost call ran (token 2) and its second run found the lease its own.
    assert again is not None and again.token == first.token + 1


def test_each_script_says_whether_it_may_be_sent_again() -> None:
    # Unit: no server needed (the client connects lazily).
    from unittest.mock import MagicMock

    client = redis.Redis(host="127.0.0.1", port=1)
    world = RedisS3World(client, MagicMock(), "bucket")
    assert world._events._append_script.idempotent is False  # decided per call
    assert world._leases._acquire.idempotent is True
    assert world._leases._renew.idempotent is True
    assert world._leases._release.idempotent is True
    assert world._archives._seal_script.idempotent is True
    assert world._versions._index_script.idempotent is True
    assert world._artifacts._hot._put_script.idempotent is True


@pytest.mark.integration
def test_threads_that_end_give_their_script_connection_back(world: RedisS3World) -> None:
    # Each thread sends scripts over a connection of its own, taken from the world's pool
    # (100 connections in redis-py 8): a thread that ends must give it back, or short-lived
    # threads (a thread pool per run, per benchmark round) exhaust the pool and every call
    # fails with "Too many connections".
    pool = world._redis.connection_pool
    errors: list[Exception] = []

    def one(index: int) -> None:
        try:
            world.append(RUN, _ev(stepPath=f"t{index}"))
        except Exception as error:
            errors.append(error)

    for index in range(pool.max_connections + 20):
        thread = threading.Thread(target=one, args=(index,))
        thread.start()
        thread.join()
    assert errors == []
    assert world.last_sequence(RUN) == pool.max_connections + 20
    assert len(pool._in_use_connections) <= 2
