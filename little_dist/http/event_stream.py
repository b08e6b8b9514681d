"""A run's events as Server-Sent Events (``GET /v1/runs/{id}/events``).

Each event is one SSE message: ``id`` its sequence, ``event`` its type, ``data`` its
envelope's JSON (as ``little events --json`` prints it). A client that reconnects with
``Last-Event-ID: N`` gets the events after ``N``: the sequence is contiguous per run, so it
loses and repeats nothing. The stream ends after the run's end event (at once for a
reconnect whose last event was the end); a live run's events come as they are appended
(``World.follow`` on the run's Redis stream), an archived run's from its S3 archive
(the world reads wherever the log is). A quiet run gets a comment line now and then, so
proxies keep the connection and a gone client is noticed.

The world's reads block, so they run in worker threads, a batch at a time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Final

from anyio import to_thread

from little_dist.events import RUN_END_EVENT_TYPES, Event
from little_dist.world.base import World

__all__ = ["KEEPALIVE_S", "format_event", "sse_events"]

#: Longest a quiet stream goes without sending anything (a comment line).
KEEPALIVE_S: Final = 10.0
_BATCH: Final = 500


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


def ended_at(world: World, run_id: str, sequence: int) -> bool:
    """Whether the event at ``sequence`` is the run's end."""
    if sequence <= 0:
        return False
    found = world.list_events(run_id, after=sequence - 1, limit=1)
    return bool(found) and found[0].type in RUN_END_EVENT_TYPES


async def sse_events(
    world: World, run_id: str, after: int, *, keepalive_s: float = KEEPALIVE_S
) -> AsyncIterator[str]:
    """The SSE text of the run's events after ``after``, until its end event."""
    if await to_thread.run_sync(ended_at, world, run_id, after):
        return
    last = after
    while True:
        batch = await to_thread.run_sync(_next_batch, world, run_id, last, keepalive_s)
        if not batch:
            yield ": keep-alive\n\n"
            continue
        for event in batch:
            yield format_event(event)
            last = event.sequence
            if event.type in RUN_END_EVENT_TYPES:
                return
