"""A run's events as Server-Sent Events (``GET /v1/runs/{id}/events``).

Each event is one SSE message: ``id`` its sequence, ``event`` its type, ``data`` its
envelope's JSON (as ``little events --json`` prints it). A client that reconnects with
``Last-Event-ID: N`` gets the events after ``N``: the sequence is contiguous per run, so it
loses and repeats nothing. The stream ends after the run's end event (at once for a
reconnect whose last event was the end); a live run's events come as they are appended
(``World.follow`` on the run's Redis stream), an archived run's from its S3 archive
(the world reads wherever the log is). A quiet run gets a comment line now and then, so
proxies keep the connection and a gone client is noticed.

With ``Accept: application/x-ndjson`` the events come as NDJSON instead (one envelope a
line, as ``little events --json``): what the log holds now, not followed; for a finished
run, its whole log (from its archive once Redis has let go of it).

The world's reads block, so they run in worker threads under limits of their own
(:class:`Watchers`): in the server's default pool (40 threads) forty waits on quiet runs
would keep every other request waiting for one. A live run is followed once per process
however many watch it (:mod:`.run_feeds`): one thread (of at most :data:`WATCHER_THREADS`)
waits for its next append and each event is read and formatted once for all its watchers;
a stream's own short reads (its start, a catch-up) have threads apart from those.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Final

from anyio import CapacityLimiter, to_thread

from little_dist.events import RUN_END_EVENT_TYPES, Event
from little_dist.http.run_feeds import Inbox, RunFeeds
from little_dist.world.base import World

__all__ = [
    "KEEPALIVE_S",
    "WATCHER_THREADS",
    "Watchers",
    "format_event",
    "ndjson_events",
    "sse_events",
]

#: Longest a quiet stream goes without sending anything (a comment line).
KEEPALIVE_S: Final = 10.0
_BATCH: Final = 500
#: Runs followed at once (a thread each, for as long as they are watched); the feeds of
#: more wait for one of them to end or lose its last watcher.
WATCHER_THREADS: Final = 1000
#: The streams' short reads in threads at once (a stream's start, a catch-up): apart from
#: the feeds', so that runs watched by the thousand never keep a new watcher from starting.
_READ_THREADS: Final = 40


def format_event(event: Event) -> str:
    data = json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.sequence}\nevent: {event.type}\ndata: {data}\n\n"


class Watchers:
    """The thread limits of one server's event streams (made in its event loop, on first
    use) and the feeds of the runs they watch."""

    def __init__(self, threads: int = WATCHER_THREADS, keepalive_s: float = KEEPALIVE_S) -> None:
        self._threads = threads
        self._limiter: CapacityLimiter | None = None
        self._feed_limiter: CapacityLimiter | None = None
        self.keepalive_s = keepalive_s
        self.feeds = RunFeeds(format_event, keepalive_s)
        #: SSE streams open now (``/metrics``: ``little_api_sse_watchers``); changed only in
        #: the server's event loop.
        self.open = 0

    @property
    def limiter(self) -> CapacityLimiter:
        """The short reads' threads."""
        if self._limiter is None:
            self._limiter = CapacityLimiter(_READ_THREADS)
        return self._limiter

    @property
    def feed_limiter(self) -> CapacityLimiter:
        """The feeds' threads (one per run followed)."""
        if self._feed_limiter is None:
            self._feed_limiter = CapacityLimiter(self._threads)
        return self._feed_limiter


def _page(world: World, run_id: str, after: int) -> list[Event]:
    return world.list_events(run_id, after=after, limit=_BATCH)


def ended_at(world: World, run_id: str, sequence: int) -> bool:
    """Whether the event at ``sequence`` is the run's end."""
    if sequence <= 0:
        return False
    found = world.list_events(run_id, after=sequence - 1, limit=1)
    return bool(found) and found[0].type in RUN_END_EVENT_TYPES


async def sse_events(
    world: World, run_id: str, after: int, watchers: Watchers
) -> AsyncIterator[str]:
    """The SSE text of the run's events after ``after``, until its end event."""
    limiter = watchers.limiter
    watchers.open += 1
    inbox: Inbox | None = None
    try:
        # A live feed of the run that has not passed ``after`` hands this watcher every event
        # after it (it joins before the feed's next delivery, in this loop) and says the run
        # has not ended there (a feed stops at the end): nothing to read first. A thousand
        # watchers of a hundred runs open with a read or two each, not three.
        # (Joined at once, in the same step of the loop: of many watchers connecting at once,
        # the first starts the feed and the others find it.)
        behind = watchers.feeds.behind(run_id, after)
        # Joined before the catch-up: what is appended meanwhile waits in the inbox.
        inbox = watchers.feeds.join(world, watchers.feed_limiter, run_id, after)
        if behind and await to_thread.run_sync(ended_at, world, run_id, after, limiter=limiter):
            return
        last = after
        if behind and not inbox.started:  # what the log holds after ``after`` first
            while batch := await to_thread.run_sync(_page, world, run_id, last, limiter=limiter):
                for event in batch:
                    yield format_event(event)
                    last = event.sequence
                    if event.type in RUN_END_EVENT_TYPES:
                        return
        loop = asyncio.get_running_loop()
        while True:
            items = await inbox.wait()
            if not items:  # quiet for a while
                inbox.quiet_since = loop.time()
                yield ": keep-alive\n\n"
                continue
            # Everything that came meanwhile goes out as one write.
            out: list[str] = []
            for item in items:
                if isinstance(item, BaseException):
                    if out:
                        yield "".join(out)
                    raise item
                if item[0].sequence > last + 1:
                    # A hole (not expected: joined before the catch-up): read it from the log.
                    if out:
                        yield "".join(out)
                        out = []
                    while last < item[0].sequence - 1:
                        batch = await to_thread.run_sync(
                            _page, world, run_id, last, limiter=limiter
                        )
                        if not batch:
                            break
                        for event in batch[: item[0].sequence - 1 - last]:
                            yield format_event(event)
                            last = event.sequence
                for formatted in item:
                    if formatted.sequence <= last:
                        continue  # sent already (from the catch-up)
                    out.append(formatted.text)
                    last = formatted.sequence
                    if formatted.ends:
                        yield "".join(out)
                        return
            if out:
                inbox.quiet_since = loop.time()
                yield "".join(out)
    finally:
        if inbox is not None:
            watchers.feeds.leave(inbox)
        watchers.open -= 1


async def ndjson_events(
    world: World, run_id: str, after: int, watchers: Watchers
) -> AsyncIterator[str]:
    """The run's events after ``after`` as NDJSON lines: what its log holds now."""
    last = after
    while True:
        batch = await to_thread.run_sync(_page, world, run_id, last, limiter=watchers.limiter)
        if not batch:
            return
        for event in batch:
            yield json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"
            last = event.sequence
