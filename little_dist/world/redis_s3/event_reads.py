"""A run's event log read back: ranges of its Redis stream, falling through to its archive.

The stream of a run is its log while it lives and for ``LITTLE_ARCHIVE_TTL`` after its
archive (see :mod:`~little_dist.world.redis_s3.archive`); then Redis has nothing of it and
its events come from the archive in S3 (read once, cached). A read is one round trip: the
range, and whether an empty answer means a run that was archived (its stream gone, its seal
marker there); only a run Redis holds nothing of costs an S3 look. Entries are decoded here
(:mod:`~little_dist.world.redis_s3.entries`), optionally leaving the types a reader does not
need undecoded. Appends are :class:`~little_dist.world.redis_s3.events.EventLog`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

import redis

from little_dist.events import Event
from little_dist.ids import validate_run_id
from little_dist.world.base import UndecodedEvent
from little_dist.world.defaults import check_event_window
from little_dist.world.redis_s3.archive import RunArchives
from little_dist.world.redis_s3.entries import (
    decode_entries,
    decode_entry,
    decode_partly,
    gaps_around,
)
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import execute_pipeline, redis_errors
from little_dist.world.redis_s3.watching import RunWatch

__all__ = ["EventReads"]


def _as_sent(response: Any, **_options: Any) -> Any:
    return response


class EventReads:
    """Reads, follows and end waits of every run's log (see the module docstring)."""

    def __init__(
        self, client: redis.Redis, keys: KeyLayout, archives: RunArchives, *, follow_block_ms: int
    ) -> None:
        self._redis = client
        # The same connections, with XRANGE (XREVRANGE, XREAD) answered as Redis sends it:
        # redis-py's parsing into (id, dict) pairs, in Python, costs more than decoding the
        # fields does.
        self._raw = redis.Redis(connection_pool=client.connection_pool)
        self._raw.set_response_callback("XRANGE", _as_sent)
        self._raw.set_response_callback("XREVRANGE", _as_sent)
        self._raw.set_response_callback("XREAD", _as_sent)
        self._keys = keys
        self._archives = archives
        self._watch = RunWatch(
            client,
            self._raw,
            keys,
            follow_block_ms,
            sealed=self._stream_gone_but_sealed,
            list_events=self.list_events,
        )

    def stream_events(self, run_id: str, after: int, limit: int | None) -> list[Event]:
        """The events still in the run's stream after ``after`` (none once it expired)."""
        with redis_errors(f"read of {run_id}"):
            entries: Any = self._raw.xrange(
                self._keys.run(run_id).events, min=f"{after + 1}-0", max="+", count=limit
            )
        return decode_entries(run_id, entries or [])

    def _stream_gone_but_sealed(self, run_id: str) -> bool:
        keys = self._keys.run(run_id)
        with redis_errors(f"read of {run_id}"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.exists(keys.events)
            pipe.exists(keys.archived)
            stream_exists, sealed = pipe.execute()
        return not stream_exists and (bool(sealed) or self._archives.has_archive(run_id))

    def last_sequence(self, run_id: str) -> int:
        validate_run_id(run_id)
        keys = self._keys.run(run_id)
        with redis_errors(f"read of {run_id}"):
            pipe = self._redis.pipeline(transaction=False)
            pipe.xlen(keys.events)
            pipe.get(keys.archived)
            length, sealed = pipe.execute()
        # A sealed run takes no more events; its marker holds its last sequence (and S3 once
        # Redis let go of the run).
        if sealed is not None:
            return int(sealed)
        if length:
            return int(length)
        archived_events = self._archives.events(run_id, required=False)
        return archived_events[-1].sequence if archived_events else 0

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        validate_run_id(run_id)
        check_event_window(after, limit)
        if limit == 0:
            return []
        entries = self._stream_range(run_id, after, limit)
        if entries is None:
            return self._archived_after(run_id, after, limit)
        return decode_entries(run_id, entries)

    def list_events_partly(
        self,
        run_id: str,
        *,
        after: int,
        decode: frozenset[str],
        skip: Collection[int] = (),
    ) -> list[Event | UndecodedEvent]:
        """:meth:`list_events`, handing back entries of types outside ``decode`` undecoded
        (an archived run's events come decoded: they are parsed from S3 anyway), and
        without the sequences in ``skip`` (not even read, when they lie in a few runs)."""
        validate_run_id(run_id)
        check_event_window(after, None)
        gaps = gaps_around(after, skip) if skip else None
        entries = self._stream_range(run_id, after, gaps=gaps)
        if entries is None:
            archived = self._archived_after(run_id, after, None)
            return [event for event in archived if event.sequence not in skip]
        return decode_partly(run_id, entries, decode, skip)

    def _stream_range(
        self,
        run_id: str,
        after: int,
        limit: int | None = None,
        gaps: Sequence[tuple[int, int | None]] | None = None,
    ) -> list[Any] | None:
        """The raw stream entries after ``after`` (at most ``limit``, for a read without
        gaps), or only those in ``gaps`` (ranges of sequences: first, last or ``None`` for
        the open end); ``None`` when the stream is gone and the run sealed (its events are
        in the archive). One round trip: the ranges, and whether an empty answer means an
        archived run; then, only for a run Redis has nothing of, whether S3 has its archive
        (one S3 read, cached when found)."""
        keys = self._keys.run(run_id)
        with redis_errors(f"read of {run_id}"):
            pipe = self._raw.pipeline(transaction=False)
            for first, last in gaps if gaps is not None else [(after + 1, None)]:
                maximum = "+" if last is None else f"{last}-0"
                pipe.xrange(keys.events, min=f"{first}-0", max=maximum, count=limit)
            pipe.exists(keys.events)
            pipe.exists(keys.archived)
            # (over the thread's own connection, raw replies: the read after every commit
            # a worker's look makes; redis-py's own pipeline path costs twice the CPU)
            *ranges, stream_exists, sealed = execute_pipeline(pipe)
        entries = [entry for found in ranges for entry in found or ()]
        if entries or stream_exists:
            return entries
        if sealed or self._archives.events(run_id, required=False) is not None:
            return None
        return entries

    def _archived_after(self, run_id: str, after: int, limit: int | None) -> list[Event]:
        archived = self._archives.events(run_id, required=True) or []
        tail = [e for e in archived if e.sequence > after]
        return tail if limit is None else tail[:limit]

    def follow(
        self, run_id: str, *, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        validate_run_id(run_id)
        check_event_window(after, None)
        return self._watch.follow(run_id, after, timeout, self.list_events, decode_entries)

    def follow_partly(
        self, run_id: str, *, after: int = 0, timeout: float | None = None, decode: frozenset[str]
    ) -> Iterator[Event | UndecodedEvent]:
        validate_run_id(run_id)
        check_event_window(after, None)

        def read(run_id: str, *, after: int) -> list[Event | UndecodedEvent]:
            return self.list_events_partly(run_id, after=after, decode=decode)

        def decode_raw(run_id: str, entries: list[Any]) -> list[Event | UndecodedEvent]:
            return decode_partly(run_id, entries, decode)

        return self._watch.follow(run_id, after, timeout, read, decode_raw)

    def wait_for_end(self, run_id: str, timeout: float | None) -> bool:
        """See :meth:`~little_dist.world.redis_s3.watching.RunWatch.wait_for_end`."""
        validate_run_id(run_id)
        return self._watch.wait_for_end(run_id, timeout)

    def read_ends(self, after: str | None, block_ms: int) -> tuple[str, list[str]]:
        """See :meth:`~little_dist.world.redis_s3.watching.RunWatch.read_ends`."""
        return self._watch.read_ends(after, block_ms)

    def first_and_last_events(self, run_id: str) -> tuple[Event, Event] | None:
        validate_run_id(run_id)
        keys = self._keys.run(run_id)
        with redis_errors(f"read of {run_id}"):
            pipe = self._raw.pipeline(transaction=False)
            pipe.xrange(keys.events, min="-", max="+", count=1)
            pipe.xrevrange(keys.events, max="+", min="-", count=1)
            first, last = pipe.execute()
        if first and last:
            (first_id, first_fields), (last_id, last_fields) = first[0], last[0]
            return (
                decode_entry(run_id, int(first_id.split(b"-", 1)[0]), first_fields),
                decode_entry(run_id, int(last_id.split(b"-", 1)[0]), last_fields),
            )
        archived = self._archives.events(run_id, required=False)
        return (archived[0], archived[-1]) if archived else None
