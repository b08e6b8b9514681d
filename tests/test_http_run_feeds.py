"""The SSE watchers of one server process share one reader per run (:mod:`little_dist.http.
run_feeds`): every watcher gets every event once, in order, whenever it joined and from
whichever ``Last-Event-ID``; the run's log is followed once per wake, not once per watcher;
a feed stops with its run's end or its last watcher, and a reader's error reaches every
watcher. On the in-memory world (the feed is the server's, not the world's)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import aclosing
from typing import Any

import pytest

from little_dist.errors import StorageUnavailableError
from little_dist.events import EventInput
from little_dist.http.event_stream import Watchers, sse_events
from little_dist.world.in_process import MemoryWorld

RUN = "run_feeds"


class CountingWorld:
    """The in-memory world, counting follows (and failing them once told to)."""

    def __init__(self) -> None:
        self.world = MemoryWorld()
        self.follows = 0
        self.reads = 0
        self.fail: Exception | None = None

    def list_events(self, run_id: str, **options: Any) -> list[Any]:
        self.reads += 1
        return self.world.list_events(run_id, **options)

    def follow(self, run_id: str, **options: Any) -> Iterator[Any]:
        self.follows += 1
        if self.fail is not None:
            raise self.fail
        return self.world.follow(run_id, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.world, name)


def _tick(index: int) -> EventInput:
    return EventInput(type="little.test.tick", payload={"tick": index})


def _end() -> EventInput:
    return EventInput(type="RunCompleted", occurrence_id="run-end", payload={"output": {}})


async def _ids(world: Any, after: int, watchers: Watchers, stop_after: int = 0) -> list[int]:
    """The sequences a watcher got after ``after`` (till the end, or ``stop_after`` of them)."""
    got: list[int] = []
    async with aclosing(sse_events(world, RUN, after, watchers)) as stream:
        async for text in stream:  # (one write may hold several events)
            for line in text.split("\n"):
                if line.startswith("id: "):
                    got.append(int(line[4:]))
            if stop_after and len(got) >= stop_after:
                break
    return got


async def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def _append_later(world: Any, events: list[EventInput], pause: float = 0.01) -> threading.Thread:
    def write() -> None:
        for event in events:
            time.sleep(pause)
            world.append(RUN, event)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_fifty_watchers_of_a_run_get_every_event_once_in_order_from_one_reader() -> None:
    world = CountingWorld()
    world.append(RUN, _tick(0))

    async def main() -> list[list[int]]:
        watchers = Watchers(keepalive_s=5)
        tasks = [asyncio.create_task(_ids(world, 1, watchers)) for _ in range(50)]
        await _until(lambda: watchers.feeds.watching(RUN) == 50)
        assert len(watchers.feeds) == 1
        writer = _append_later(world, [*(_tick(i) for i in range(1, 21)), _end()])
        got = await asyncio.gather(*tasks)
        await asyncio.to_thread(writer.join)
        await _until(lambda: len(watchers.feeds) == 0)  # it stopped with the run's end
        return got

    got = asyncio.run(main())
    assert all(ids == list(range(2, 23)) for ids in got), got[0]
    # One reader: a follow per wake (21 appends), not one per watcher and append (1,050).
    assert world.follows <= 30
    # The first watcher looked whether the run had ended at its Last-Event-ID; the other 49
    # joined the feed where it was and read nothing themselves.
    assert world.reads == 1


def test_only_a_watcher_exactly_where_the_feed_is_skips_its_own_reads() -> None:
    world = CountingWorld()
    for index in range(3):
        world.append(RUN, _tick(index))

    async def main() -> list[bool]:
        watchers = Watchers(keepalive_s=5)
        first = asyncio.create_task(_ids(world, 3, watchers, stop_after=1))
        await _until(lambda: watchers.feeds.watching(RUN) == 1)
        behind = [watchers.feeds.behind(RUN, after) for after in (2, 3, 4)]
        world.append(RUN, _tick(3))
        assert await first == [4]
        return behind

    # Behind the feed: the gap is read; ahead of it: the run may have ended there, unknown
    # to the feed. Only at the feed's place is nothing to read.
    assert asyncio.run(main()) == [True, False, True]
    assert Watchers().feeds.behind(RUN, 0)  # no feed: always read


def test_a_watcher_resuming_behind_a_running_feed_gets_the_gap_then_the_rest_once() -> None:
    world = CountingWorld()
    for index in range(3):
        world.append(RUN, _tick(index))

    async def main() -> tuple[list[int], list[int], list[int]]:
        watchers = Watchers(keepalive_s=5)
        first = asyncio.create_task(_ids(world, 0, watchers))
        await _until(lambda: watchers.feeds.watching(RUN) == 1)
        writer = _append_later(world, [_tick(3), _tick(4)])
        await asyncio.to_thread(writer.join)
        feed = next(iter(watchers.feeds._feeds.values()))
        await _until(lambda: feed.last == 5)  # the feed is past what the next ones resume at
        resumed = [asyncio.create_task(_ids(world, after, watchers)) for after in (1, 4)]
        await _until(lambda: watchers.feeds.watching(RUN) == 3)
        assert len(watchers.feeds) == 1  # they joined the running feed
        writer = _append_later(world, [_tick(5), _tick(6), _end()])
        got = await asyncio.gather(first, *resumed)
        await asyncio.to_thread(writer.join)
        return got[0], got[1], got[2]

    first, from_one, from_four = asyncio.run(main())
    assert first == list(range(1, 9))
    assert from_one == list(range(2, 9))
    assert from_four == list(range(5, 9))


def test_a_feed_stops_when_its_last_watcher_leaves_and_quiet_streams_get_keepalives() -> None:
    world = CountingWorld()
    world.append(RUN, _tick(0))

    async def main() -> list[str]:
        watchers = Watchers(keepalive_s=0.2)
        texts: list[str] = []
        async with aclosing(sse_events(world, RUN, 0, watchers)) as stream:
            async for text in stream:
                texts.append(text)
                if len(texts) == 3:  # the event, then two keep-alives of a quiet run
                    break
        assert watchers.open == 0
        await _until(lambda: len(watchers.feeds) == 0)  # after its current wait
        return texts

    texts = asyncio.run(main())
    assert texts[0].startswith("id: 1\nevent: little.test.tick\n")
    assert texts[1:] == [": keep-alive\n\n", ": keep-alive\n\n"]


def test_a_readers_error_reaches_every_watcher_of_the_run() -> None:
    world = CountingWorld()
    world.append(RUN, _tick(0))
    world.fail = StorageUnavailableError("Redis is gone")

    async def main() -> list[BaseException | list[int]]:
        watchers = Watchers(keepalive_s=5)
        tasks = [asyncio.create_task(_ids(world, 1, watchers)) for _ in range(3)]
        got = await asyncio.gather(*tasks, return_exceptions=True)
        assert len(watchers.feeds) == 0 and watchers.open == 0
        return got

    got = asyncio.run(main())
    assert len(got) == 3
    for outcome in got:
        assert isinstance(outcome, StorageUnavailableError)
        assert "Redis is gone" in str(outcome)


@pytest.mark.parametrize("after", [0, 2])
def test_a_watcher_of_an_ended_run_gets_the_rest_and_stops(after: int) -> None:
    world = CountingWorld()
    world.append(RUN, _tick(0))
    world.append(RUN, _tick(1))
    world.append(RUN, _end())

    async def main() -> list[int]:
        watchers = Watchers(keepalive_s=5)
        return await asyncio.wait_for(_ids(world, after, watchers), 10)

    assert asyncio.run(main()) == list(range(after + 1, 4))


def test_what_came_while_a_watcher_was_busy_goes_out_as_one_write() -> None:
    world = CountingWorld()
    world.append(RUN, _tick(0))

    async def main() -> list[str]:
        watchers = Watchers(keepalive_s=5)
        async with aclosing(sse_events(world, RUN, 0, watchers)) as stream:
            first = await anext(stream)  # (the stream now waits at its yield: a slow client)
            feed = next(iter(watchers.feeds._feeds.values()))
            for index in range(1, 4):
                world.append(RUN, _tick(index))
            await _until(lambda: feed.last == 4)
            world.append(RUN, _end())
            return [first, await anext(stream), await anext(stream)]

    first, three, end = asyncio.run(main())
    assert first.startswith("id: 1\n")
    assert [line for line in three.split("\n") if line.startswith("id: ")] == [
        "id: 2",
        "id: 3",
        "id: 4",
    ]
    assert end.startswith("id: 5\nevent: RunCompleted\n")
