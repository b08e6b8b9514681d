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
