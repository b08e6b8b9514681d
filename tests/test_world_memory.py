"""MemoryWorld runs the world conformance suite (in one process: threads, no spawn)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from little_dist.world.base import World
from little_dist.world.in_process import MemoryWorld
from tests.world_suite import FakeClock, WorldConformance, WorldHandle


class TestMemoryWorld(WorldConformance):
    @pytest.fixture
    def make_world(self) -> Callable[[], WorldHandle]:
        def make() -> WorldHandle:
            clock = FakeClock()
            world = MemoryWorld(clock=clock)
            return WorldHandle(world=world, blob_count=world._blob_count, advance=clock.advance)

        return make


def test_memory_world_is_a_world() -> None:
    assert isinstance(MemoryWorld(), World)


def test_close_ends_a_follow_without_timeout() -> None:
    import threading
    import time

    world = MemoryWorld()
    threading.Timer(0.1, world.close).start()
    started = time.monotonic()
    assert list(world.follow("run_x")) == []
    assert time.monotonic() - started < 5
