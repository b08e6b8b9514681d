"""How soon RedisS3World's followers see an append, on a real Redis.

Redis ends a blocking command's timeout on its own timer (every 1/hz seconds: 100 ms at the
default ``hz 10``), so a follower that paused with a short ``XREAD BLOCK`` got each event
up to 100 ms late. A follower blocked on the run's stream is woken by the append itself:
these tests time that, loosely (medians of several appends, bounds far above what a
healthy machine takes and far below Redis's timer).
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from little_dist.events import EventInput
from little_dist.world.redis_s3 import RedisS3World
from tests.conftest_services import S3Service

pytestmark = pytest.mark.integration

APPENDS = 8


def _open(redis_url: str, redis_key_prefix: str, s3_service: S3Service) -> RedisS3World:
    """A world of its own keys and objects on the test's Redis and S3."""
    name = uuid.uuid4().hex[:10]
    return RedisS3World.from_settings(
        redis_url,
        s3_service.endpoint,
        s3_service.bucket,
        access_key_id=s3_service.access_key_id,
        secret_access_key=s3_service.secret_access_key,
        key_prefix=f"{redis_key_prefix}{name}:",
        s3_prefix=f"{s3_service.prefix}{name}/",
    )


@pytest.fixture
def world(redis_url: str, redis_key_prefix: str, s3_service: S3Service) -> Iterator[RedisS3World]:
    opened = _open(redis_url, redis_key_prefix, s3_service)
    yield opened
    opened.close()


def _tick(index: int) -> EventInput:
    return EventInput(type="little.test.tick", payload={"tick": index})


def test_a_follower_gets_each_append_within_milliseconds_not_redis_timer_ticks(
    world: RedisS3World,
) -> None:
    run_id = "run_follow_soon"
    world.append(run_id, _tick(-1))
    appended: dict[int, float] = {}
    received: dict[int, float] = {}

    def write() -> None:
        for index in range(APPENDS):
            time.sleep(0.15)  # the follower is blocked again by then: a quiet run's append
            event = world.append(run_id, _tick(index))
            appended[event.sequence] = time.perf_counter()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for event in world.follow(run_id, after=1, timeout=10):
            received[event.sequence] = time.perf_counter()
            if len(received) == APPENDS:
                break
    finally:
        writer.join()
    assert sorted(received) == list(range(2, APPENDS + 2))
    delays_ms = [(received[seq] - appended[seq]) * 1000 for seq in received if seq in appended]
    # (A follower may read an event before the writer has noted its append's return.)
    assert statistics.median(max(0.0, d) for d in delays_ms) < 50, delays_ms


def test_followers_of_many_runs_each_get_an_append_within_milliseconds(
    world: RedisS3World,
) -> None:
    """Ten followers (threads) of ten runs: each append wakes its run's follower alone."""
    runs = [f"run_follow_many_{index}" for index in range(10)]
    for run_id in runs:
        world.append(run_id, _tick(-1))
    delays_ms: list[float] = []
    lock = threading.Lock()
    appended: dict[tuple[str, int], float] = {}
    ready = threading.Barrier(len(runs) + 1)

    def follow(run_id: str) -> None:
        follower = world.follow(run_id, after=1, timeout=10)
        ready.wait()
        for got, event in enumerate(follower, start=1):
            now = time.perf_counter()
            with lock:
                delays_ms.append((now - appended.get((run_id, event.sequence), now)) * 1000)
            if got == 3:
                return

    threads = [threading.Thread(target=follow, args=(run_id,)) for run_id in runs]
    for thread in threads:
        thread.start()
    ready.wait()
    for index in range(3):
        time.sleep(0.15)
        for run_id in runs:
            with lock:
                # Noted before the append: a delay measured here is never negative.
                appended[(run_id, index + 2)] = time.perf_counter()
            world.append(run_id, _tick(index))
    for thread in threads:
        thread.join(timeout=20)
    assert len(delays_ms) == 3 * len(runs)
    assert statistics.median(delays_ms) < 50, sorted(delays_ms)


def test_more_followers_than_a_default_redis_py_pool_holds_all_get_their_events(
    world: RedisS3World,
) -> None:
    """A blocked follow holds one of the world's Redis connections: 150 at once (a server's
    feeds of 150 watched runs) must not fail as redis-py's default pool of 100 would."""
    runs = [f"run_follow_pool_{index}" for index in range(150)]
    for run_id in runs:
        world.append(run_id, _tick(-1))
    got: dict[str, int] = {}
    errors: list[BaseException] = []
    ready = threading.Barrier(len(runs) + 1)

    def follow(run_id: str) -> None:
        follower = world.follow(run_id, after=1, timeout=20)
        ready.wait()
        try:
            for event in follower:
                got[run_id] = event.sequence
                return
        except Exception as exc:  # reported below: which and why
            errors.append(exc)

    threads = [threading.Thread(target=follow, args=(run_id,)) for run_id in runs]
    for thread in threads:
        thread.start()
    ready.wait()
    time.sleep(0.5)  # every follower blocked on its run's stream by now
    for run_id in runs:
        world.append(run_id, _tick(0))
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert got == dict.fromkeys(runs, 2)


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_follower_takes_each_append_from_the_read_that_woke_it_in_both_protocols(
    redis_url: str, redis_key_prefix: str, s3_service: S3Service, protocol: int
) -> None:
    # (redis-py 8 speaks RESP3 unless told: XREAD answers a map there, a list in RESP2)
    separator = "&" if "?" in redis_url else "?"
    world = _open(f"{redis_url}{separator}protocol={protocol}", redis_key_prefix, s3_service)
    run_id = "run_follow_protocol"
    try:
        world.append(run_id, _tick(-1))

        def write() -> None:
            for index in range(3):
                time.sleep(0.1)  # (each after the follower blocked again)
                world.append(run_id, _tick(index))

        writer = threading.Thread(target=write)
        writer.start()
        got = []
        for event in world.follow(run_id, timeout=5):
            got.append((event.sequence, event.payload["tick"]))
            if len(got) == 4:
                break
        writer.join()
    finally:
        world.close()
    assert got == [(1, -1), (2, 0), (3, 1), (4, 2)]
