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

The world's reads block, so they run in worker threads, a batch at a time, under a limit of
their own (:data:`WATCHER_THREADS`, :class:`Watchers`): a watcher waits in its thread for
the next event (up to :data:`KEEPALIVE_S`), and in the server's default pool (40 threads)
forty watchers of quiet runs would keep every other request, and the next watchers' first
events, waiting for one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Final

from anyio import CapacityLimiter, to_thread

from little_dist.events import RUN_END_EVENT_TYPES, Event
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
#: Watchers whose reads wait in threads at once; more wait for one of them to get an event.
WATCHER_THREADS: Final = 1000


class Watchers:
    """The thread limit of one server's event streams (made in its event loop, on first use)."""

    def __init__(self, threads: int = WATCHER_THREADS) -> None:
        self._threads = threads
        self._limiter: CapacityLimiter | None = None
        #: SSE streams open now (``/metrics``: ``little_api_sse_watchers``); changed only in
        #: the server's event loop.
        self.open = 0

    @property
    def limiter(self) -> CapacityLimiter:
        if self._limiter is None:
            self._limiter = CapacityLimiter(self._threads)
        return self._limiter


def format_event(event: Event) -> str:
    data = json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":"))
    return f"id: {event.sequence}\nevent: {event.type}\ndata: {data}\n\n"


def _next_batch(world: World, run_id: str, after: int, wait_s: float) -> list[Event]:
    """The events after ``after`` (a batch), waiting up to ``wait_s`` for one to come."""
    events = world.list_events(run_id, after=after, limit=_BATCH)
    if events:
        return events
    follow = world.follow(run_id, after=after, timeout=wait_s)
    try:
        first = next(iter(follow), None)
    finally:
        close = getattr(follow, "close", None)
        if close is not None:
            close()
    return [first] if first is not None else []


def _page(world: World, run_id: str, after: int) -> list[Event]:
    return world.list_events(run_id, after=after, limit=_BATCH)


def ended_at(world: World, run_id: str, sequence: int) -> bool:
    """Whether the event at ``sequence`` is the run's end."""
    if sequence <= 0:
        return False
    found = world.list_events(run_id, after=sequence - 1, limit=1)
    return bool(found) and found[0].type in RUN_END_EVENT_TYPES


async def sse_events(
    world: World,
    run_id: str,
    after: int,
    watchers: Watchers,
    *,
    keepalive_s: float = KEEPALIVE_S,
) -> AsyncIterator[str]:
    """The SSE text of the run's events after ``after``, until its end event."""
    limiter = watchers.limiter
    watchers.open += 1
    try:
        if await to_thread.run_sync(ended_at, world, run_id, after, limiter=limiter):
            return
        last = after
        while True:
            batch = await to_thread.run_sync(
                _next_batch, world, run_id, last, keepalive_s, limiter=limiter
            )
            if not batch:
                yield ": keep-alive\n\n"
                continue
            for event in batch:
                yield format_event(event)
                last = event.sequence
                if event.type in RUN_END_EVENT_TYPES:
                    return
    finally:
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
