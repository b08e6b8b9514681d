"""Following a run's log and waiting for its end: the blocking reads of a run's streams.

A follower catches up on the log (from the archive once the stream is gone), then blocks on
the stream for the next append (woken by it at once); :meth:`RunWatch.wait_for_end` blocks
on the stream every run's end is announced on instead and confirms the end in the log.
:class:`~little_dist.world.redis_s3.events.EventLog` holds one and delegates to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from little_dist import occurrences
from little_dist.events import RUN_END_EVENT_TYPES, Event
from little_dist.world.redis_s3.entries import entry_type
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.redis_calls import redis_errors

__all__ = ["RunWatch"]

# The occurrence id the engine records a run's end under (decide, cancel, planning).
_RUN_END_OCCURRENCE: Final = occurrences.RUN_END
_PAGE: Final = 1000
# The least time between two reads of a busy run's log by one follower: appends that come
# faster gather and are read as one batch. The follower waits it out blocked on the stream
# of runs' ends (see RunWatch._linger), so that its run's end is read at once.
_FOLLOW_LINGER_S: Final = 0.01
# wait_for_end looks at the log itself after this long, then twice as long each time, to
# at most the second figure (seconds).
_END_LOOK_FIRST_S: Final = 1.0
_END_LOOK_MAX_S: Final = 10.0


class RunWatch:
    """Blocking reads of runs' streams (see the module docstring). ``sealed(run_id)`` says
    whether a run's stream is gone because it was archived; ``list_events`` reads a run's
    events after a sequence, from wherever they are."""

    def __init__(
        self,
        redis: Any,
        raw: Any,
        keys: KeyLayout,
        follow_block_ms: int,
        *,
        sealed: Callable[[str], bool],
        list_events: Callable[..., list[Event]],
    ) -> None:
        self._redis = redis
        self._raw = raw
        self._keys = keys
        self._follow_block_ms = follow_block_ms
        self._sealed = sealed
        self._list_events = list_events

    def follow(
        self,
        run_id: str,
        after: int,
        timeout: float | None,
        read: Callable[..., list[Any]],
        decode: Callable[[str, list[Any]], list[Any]],
    ) -> Iterator[Any]:
        """``read(run_id, after=...)`` the log, then each append as it comes, taken from
        the read that woke (``decode`` turns its raw entries into what ``read`` returns);
        after a read less than a linger ago, what else comes over the linger is read too."""
        keys = self._keys.run(run_id)
        stream = keys.events
        last = after
        deadline = None if timeout is None else time.monotonic() + timeout
        ended = False
        # Catch up first (from the archive if the stream is gone), then block on the stream.
        backlog = read(run_id, after=last)
        read_at = time.monotonic()
        while True:
            for event in backlog:
                yield event
                last = event.sequence
                ended = ended or event.type in RUN_END_EVENT_TYPES
            if backlog and timeout is not None:
                deadline = time.monotonic() + timeout
            block_ms = self._follow_block_ms
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                block_ms = max(1, min(block_ms, int(remaining * 1000)))
            with redis_errors(f"follow of {run_id}"):
                # Woken by the next append at once, and told in the same round trip whether
                # the run's end is marked, and where the runs' ends stream is (the linger
                # below wakes on an end announced from there on).
                pipe = self._raw.pipeline(transaction=False)
                pipe.xread({stream: f"{last}-0"}, count=_PAGE, block=block_ms)
                pipe.exists(keys.ended)
                pipe.xrevrange(self._keys.ends, count=1)
                reply, marked, newest = pipe.execute()
            if reply:
                # A busy run's log is read a batch at a time, not once per append (which
                # costs Redis and the workers): an append after a quiet spell is taken from
                # the read that woke, the next ones gathered and read at most once per linger.
                # (RESP3 answers a map of stream to entries, RESP2 a list of pairs)
                entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
                backlog = decode(run_id, entries)
                if not ended and not marked:
                    wait = read_at + _FOLLOW_LINGER_S - time.monotonic()
                    if wait > 0:
                        self._linger(run_id, wait, newest[0][0].decode() if newest else "0-0")
                        backlog += read(run_id, after=backlog[-1].sequence)
                read_at = time.monotonic()
            elif self._sealed(run_id):
                # Archived (and expired) while we waited: the archive has the rest.
                backlog = read(run_id, after=last)
            else:
                backlog = []

    def _linger(self, run_id: str, seconds: float, after: str) -> None:
        """Wait ``seconds`` (a follower's linger), or until the end of ``run_id`` is
        announced after the announcement ``after``, whichever comes first: a run's last
        events are not left waiting out the linger. Blocked on the stream of runs' ends
        (another run's end wakes it early: it blocks again for what is left).

        Redis times a blocking read out on its own timer when it has nothing else to do
        (every 1/hz seconds: 100 ms at the default hz 10), so on an idle server the linger
        may last that long; a follower lingers only right after its run appended, and a
        run's worker keeps the server busy."""
        until = time.monotonic() + seconds
        ends = self._keys.ends
        wanted = run_id.encode()
        while (left := until - time.monotonic()) > 0:
            with redis_errors(f"follow of {run_id}"):
                reply: Any = self._raw.xread(
                    {ends: after}, count=_PAGE, block=max(1, round(left * 1000))
                )
            entries = _read_entries(reply)
            if not entries or any(wanted in flat for _, flat in entries):
                return
            after = entries[-1][0].decode()

    def wait_for_end(self, run_id: str, timeout: float | None) -> bool:
        """Block on the stream every run's end is announced on (see ``append_batch``), not
        on the run's own stream: a busy run's appends do not wake the waiter.

        The log itself confirms the end: an announcement only says "look". The log is also
        looked at first (an end recorded before, or archived after the announcement went)
        and again now and then, less and less often (an announcement lost with a Redis that
        died between the append and it, or trimmed before the waiter read it). Each look
        reads only the event types recorded since the last one.
        """
        ends = self._keys.ends
        with redis_errors(f"wait for the end of {run_id}"):
            # Where the announcements are now, before the first look: none is missed after.
            newest: Any = self._raw.xrevrange(ends, count=1)
        woken_after = newest[0][0].decode() if newest else "0-0"
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = 0  # events whose types were looked at
        look_at = time.monotonic()
        look_every = _END_LOOK_FIRST_S
        wanted = run_id.encode()
        while True:
            now = time.monotonic()
            if now >= look_at:
                ended, seen = self._ends_after(run_id, seen)
                if ended:
                    return True
                look_at = now + look_every
                look_every = min(look_every * 2, _END_LOOK_MAX_S)
            until = look_at if deadline is None else min(look_at, deadline)
            if deadline is not None and now >= deadline:
                return False
            block_ms = max(1, min(self._follow_block_ms, int((until - now) * 1000)))
            with redis_errors(f"wait for the end of {run_id}"):
                reply: Any = self._raw.xread({ends: woken_after}, count=_PAGE, block=block_ms)
            entries = _read_entries(reply)
            if entries:
                woken_after = entries[-1][0].decode()
                if any(wanted in flat for _, flat in entries):
                    look_at = time.monotonic()  # this run's end: look now

    def read_ends(self, after: str | None, block_ms: int) -> tuple[str, list[str]]:
        """The runs whose end was announced after the announcement ``after`` (``None``:
        from now on), waiting up to ``block_ms`` for one; the last announcement read (pass
        it next time) and those runs' ids. An announcement only says "look": an end lost
        with a Redis that died between the append and it is not here."""
        ends = self._keys.ends
        with redis_errors("read of the runs' ends"):
            if after is None:
                newest: Any = self._raw.xrevrange(ends, count=1)
                after = newest[0][0].decode() if newest else "0-0"
            reply: Any = self._raw.xread({ends: after}, count=_PAGE, block=max(1, block_ms))
        entries = _read_entries(reply)
        if not entries:
            return after, []
        runs = []
        for _, flat in entries:
            # (a raw entry: [field, value, ...])
            fields = dict(zip(flat[::2], flat[1::2], strict=True))
            if b"task" in fields:
                # The answer to a submission (accepted, or refused under a run id that may
                # belong to a live run: another input under a taken id), not a run's end.
                continue
            run = fields.get(b"run")
            if isinstance(run, bytes):
                runs.append(run.decode())
        return entries[-1][0].decode(), runs

    def _ends_after(self, run_id: str, after: int) -> tuple[bool, int]:
        """Whether the events after ``after`` hold the run's end; the last sequence read.

        The engine records every end under occurrence ``run-end``: the occurrence index
        finds it in one round trip, without reading the run's (maybe thousands of) entries
        since the last look. An end recorded without it (another writer) is found by
        reading the entries' type fields (the archive's events, once the stream is gone).
        """
        keys = self._keys.run(run_id)
        with redis_errors(f"read of {run_id}"):
            recorded = self._redis.hget(keys.occurrences, _RUN_END_OCCURRENCE)
            if recorded is not None:
                sequence = int(recorded)
                entry: Any = self._raw.xrange(keys.events, min=f"{sequence}-0", max=f"{sequence}-0")
                if entry and entry_type(entry[0][1]) in RUN_END_EVENT_TYPES:
                    return True, after
        while True:
            with redis_errors(f"read of {run_id}"):
                entries: Any = self._raw.xrange(
                    keys.events, min=f"{after + 1}-0", max="+", count=_PAGE
                )
            if not entries:
                break
            for entry_id, flat in entries:
                if entry_type(flat) in RUN_END_EVENT_TYPES:
                    return True, after
                after = int(entry_id.split(b"-", 1)[0])
            if len(entries) < _PAGE:
                return False, after
        if self._sealed(run_id):
            tail = self._list_events(run_id, after=after)
            if any(event.type in RUN_END_EVENT_TYPES for event in tail):
                return True, after
            return False, max([after, *(event.sequence for event in tail)])
        return False, after


def _read_entries(reply: Any) -> list[Any]:
    """The entries of an XREAD of one stream as Redis sends them (a map under RESP3, a
    list of ``[name, entries]`` under RESP2; nothing on a timeout)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return list(next(iter(reply.values())))
    return list(reply[0][1])
