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
from collections.abc import Iterator

import pytest

from little_dist.events import EventInput
from little_dist.world.redis_s3 import RedisS3World
from tests.conftest_services import S3Service, open_redis_s3_world

pytestmark = pytest.mark.integration

APPENDS = 8


def _open(redis_url: str, redis_key_prefix: str, s3_service: S3Service) -> RedisS3World:
    """A world of its own keys and objects on the test's Redis and S3."""
    world: RedisS3World = open_redis_s3_world(redis_url, redis_key_prefix, s3_service)
    return world


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


def test_a_lingering_follower_reads_its_run_s_end_at_once(
    world: RedisS3World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower woken again soon after a read waits out a linger before reading more (a
    busy run's appends are read in batches); an end announced meanwhile cuts it short. With
    a linger of seconds, the end still arrives within a fraction of one."""
    from little_dist.world.redis_s3 import watching

    monkeypatch.setattr(watching, "_FOLLOW_LINGER_S", 5.0)
    run_id = "run_follow_linger"
    world.append(run_id, _tick(-1))
    ended_at: list[float] = []

    def write() -> None:
        time.sleep(0.2)  # the follower read the first tick, and blocks on the stream
        world.append(run_id, _tick(0))  # wakes it within the linger: it lingers
        time.sleep(0.3)
        ended_at.append(time.perf_counter())
        world.append(run_id, EventInput(type="RunCompleted", payload={"output": {}}))

    writer = threading.Thread(target=write)
    writer.start()
    got: list[tuple[str, float]] = []
    try:
        for event in world.follow(run_id, timeout=10):
            got.append((event.type, time.perf_counter()))
            if event.type == "RunCompleted":
                break
    finally:
        writer.join()
    assert [kind for kind, _ in got] == ["little.test.tick", "little.test.tick", "RunCompleted"]
    late_s = got[-1][1] - ended_at[0]
    assert late_s < 1.0, late_s


def test_another_run_s_end_does_not_cut_a_follower_s_linger_short(
    world: RedisS3World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The linger wakes on every run's end, and lingers on for what is left when the end
    is another run's: the follower reads its run's next append in one batch after it."""
    from little_dist.world.redis_s3 import watching

    monkeypatch.setattr(watching, "_FOLLOW_LINGER_S", 1.0)
    run_id, other = "run_follow_linger_own", "run_follow_linger_other"
    world.append(run_id, _tick(-1))
    world.append(other, _tick(-1))
    woke: list[float] = []

    def write() -> None:
        time.sleep(0.2)
        world.append(run_id, _tick(0))  # the follower lingers from here
        time.sleep(0.1)
        world.append(other, EventInput(type="RunCompleted", payload={"output": {}}))
        world.append(run_id, _tick(1))

    writer = threading.Thread(target=write)
    writer.start()
    started = time.perf_counter()
    try:
        for event in world.follow(run_id, timeout=10):
            woke.append(time.perf_counter() - started)
            if event.sequence == 3:
                break
    finally:
        writer.join()
    # The second tick came with the read after the linger (a second after the catch-up
    # read), not at the other run's end (0.3 s in).
    assert woke[-1] > 0.8, woke


def test_the_linger_counts_an_end_announced_since_the_read_that_woke_the_follower(
    world: RedisS3World,
) -> None:
    """The read that wakes a follower also notes where the stream of runs' ends is: an end
    announced between that read and the linger's block still cuts the linger short."""
    watch = world._reads._watch  # (the follower's part of the world)
    ends = world._reads._keys.ends
    run_id = "run_follow_linger_anchor"
    world.append(run_id, _tick(0))
    newest = world._reads._raw.xrevrange(ends, count=1)
    before = newest[0][0].decode() if newest else "0-0"
    world.append(run_id, EventInput(type="RunCompleted", payload={"output": {}}))
    started = time.perf_counter()
    watch._linger(run_id, 5.0, before)
    assert time.perf_counter() - started < 1.0
    # From after that announcement, the linger runs its course (another run's end aside).
    after = world._reads._raw.xrevrange(ends, count=1)[0][0].decode()
    started = time.perf_counter()
    watch._linger(run_id, 0.3, after)
    assert time.perf_counter() - started >= 0.29
