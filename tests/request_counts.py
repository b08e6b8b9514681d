"""Counting what a block of code asks of Redis and S3: the submit-cost tests' meter."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis.connection

from little_dist.world.redis_s3 import RedisS3World

__all__ = ["counted"]


@contextmanager
def counted(world: RedisS3World, *, any_thread: bool = False) -> Iterator[dict[str, int]]:
    """Redis round trips (packed sends) this thread (``any_thread``: every thread) and S3
    requests of ``world``'s client (any thread) make in the block."""
    counts = {"redis": 0, "s3": 0}
    me = threading.get_ident()
    send = redis.connection.AbstractConnection.send_packed_command

    def counting_send(self: Any, command: Any, check_health: bool = True) -> None:
        if any_thread or threading.get_ident() == me:
            counts["redis"] += 1
        send(self, command, check_health)

    def count_s3(**_: Any) -> None:
        counts["s3"] += 1

    events = world._s3._client.meta.events
    events.register("before-call.s3", count_s3)
    redis.connection.AbstractConnection.send_packed_command = counting_send  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        events.unregister("before-call.s3", count_s3)
