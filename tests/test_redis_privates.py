"""The redis-py internals the Redis world relies on still exist (the package pins ``redis<9``
for them; a new major version must pass this before the pin moves).

``little_dist.world.redis_s3.redis_calls`` packs a thread's script calls with hiredis
itself when its connection does (``Connection._command_packer`` is a
``HiredisRespSerializer``), and checks an idle connection's socket (``Connection._sock``)
for a server that closed it. Without them it falls back to slower or less careful paths
silently; this test makes the loss loud instead.
"""

from __future__ import annotations

import pytest
import redis
from redis.connection import HiredisRespSerializer


@pytest.mark.integration
def test_a_connection_still_has_its_command_packer_and_socket(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    connection = client.connection_pool.get_connection()
    try:
        connection.connect()
        assert type(connection._command_packer) is HiredisRespSerializer
        assert connection._sock is not None
        from little_dist.world.redis_s3.redis_calls import _packs_with_hiredis

        assert _packs_with_hiredis(connection)
    finally:
        client.connection_pool.release(connection)
        client.close()


@pytest.mark.integration
def test_a_pipeline_sent_over_a_lane_is_packed_as_redis_py_packs_it(redis_url: str) -> None:
    """The lane packs a pipeline with hiredis, one call per command: the bytes are redis-py's
    own, for every kind of argument the world sends (and redis-py's way is taken for a
    two-word command name, which it splits)."""
    from little_dist.world.redis_s3 import redis_calls

    client = redis.Redis.from_url(redis_url)
    try:
        lane = redis_calls._lane_for(client.connection_pool)
        connection = redis_calls._lane_connection(client, lane)
        assert connection is not None and lane.pack is not None
        commands = [
            ("EVALSHA", "ab" * 20, 2, "k1", "k2", "é", b"\x00bytes", 7, -3, 2**70, 0.1),
            ("HSET", "h", "f", "x" * 20_000),
            ("EXISTS", b"k"),
        ]
        assert b"".join(redis_calls._packed(lane, connection, commands)) == b"".join(
            connection.pack_commands(commands)
        )
        split = [("CLIENT SETNAME", "little"), ("PING",)]
        assert redis_calls._packed(lane, connection, split) == connection.pack_commands(split)
        with client.pipeline(transaction=False) as pipe:
            pipe.set("little-test-packed", "é")
            pipe.get("little-test-packed")
            pipe.delete("little-test-packed")
            assert redis_calls.execute_pipeline(pipe) == [b"OK", "é".encode(), 1]  # raw replies
    finally:
        client.close()
