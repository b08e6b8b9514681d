"""One reader per watched run in a server process, fanning its events out to every watcher.

A thousand SSE watchers of a hundred runs would otherwise be a thousand threads, each
blocked on Redis and each reading and formatting every event of its run itself: a thousand
Redis round trips and a thousand JSON encodings per round of appends, all in the server's
one process. :class:`RunFeeds` keeps one :class:`_Feed` per run with watchers: one thread
follows the run's log (``World.follow``, woken by the append), formats each event once,
and hands the batch to each watcher's inbox; it stops when its run ends or its last
watcher has left.

A watcher joins before it catches up, so nothing appended meanwhile is lost: it reads what
the log holds after its ``Last-Event-ID`` itself (unless it started the feed there), then
takes the feed's batches, skipping what it has sent already and reading any hole itself.
Every event goes out once, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from anyio import CapacityLimiter, to_thread

from little_dist.events import RUN_END_EVENT_TYPES, Event
from little_dist.world.base import World

__all__ = ["Formatted", "Inbox", "RunFeeds"]


@dataclass(frozen=True)
class Formatted:
    """An event as the feed hands it out: its sequence, whether it ends the run, its text."""

    sequence: int
    ends: bool
    text: str


#: What an inbox holds: a batch of the run's events, contiguous and in order, or the error
#: that stopped the feed (the watcher raises it).
Item = list[Formatted] | BaseException


class Inbox:
    """One watcher's place on a feed: the batches handed to it since it last took them.

    Not an ``asyncio.Queue`` and no timer per wait: a thousand watchers each wait for every
    event, and the keep-alive of a quiet one comes from :meth:`RunFeeds.keep_alive`'s one
    look at all of them now and then."""

    __slots__ = ("feed", "items", "quiet_since", "started", "waiter")

    def __init__(self, feed: _Feed) -> None:
        self.feed = feed
        self.items: list[Item] = []
        #: Set while its watcher waits; done when there is something to send (or, with
        #: ``items`` empty, a keep-alive is due).
        self.waiter: asyncio.Future[None] | None = None
        #: When its watcher last sent something (the loop's clock).
        self.quiet_since = asyncio.get_running_loop().time()
        #: Whether this watcher started the feed (at its own ``Last-Event-ID``).
        self.started = False

    def put(self, item: Item) -> None:
        self.items.append(item)
        self.wake()

    def wake(self) -> None:
        """Let its watcher go on (with what came, or, with nothing, to send a keep-alive)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> list[Item]:
        """What came since the last call (``[]``: time for a keep-alive)."""
        if not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        items, self.items = self.items, []
        return items


class _Feed:
    """The reader of one run's events for this process's watchers of it."""

    def __init__(self, world: World, limiter: CapacityLimiter, run_id: str, after: int) -> None:
        self.world = world
        self.limiter = limiter
        self.run_id = run_id
        #: The last sequence handed out (or where the feed started).
        self.last = after
        self.inboxes: set[Inbox] = set()
        self.task: asyncio.Task[None] | None = None
        #: Set (in the loop) when the last watcher left: the reader stops at its next wake.
        self.stopping = False


class RunFeeds:
    """The feeds of one server process (used only from its event loop).

    ``format_event`` makes an event's text once for every watcher; a feed's reads wait up
    to ``wait_s`` each for the next event, in threads under the limiter it was joined with.
    """

    def __init__(self, format_event: Callable[[Event], str], wait_s: float) -> None:
        self._format = format_event
        self._wait_s = wait_s
        self._feeds: dict[str, _Feed] = {}
        self._keeping: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._feeds)

    def watching(self, run_id: str) -> int:
        """The watchers on the run's feed now."""
        feed = self._feeds.get(run_id)
        return 0 if feed is None else len(feed.inboxes)

    def behind(self, run_id: str, after: int) -> bool:
        """Whether a watcher of the run that has seen up to ``after`` must read the log
        itself before taking the feed's batches: unless the run has a feed that has handed
        out exactly up to ``after`` (that feed also says the run has not ended at ``after``:
        it stops at its end event; one behind ``after`` does not know)."""
        feed = self._feeds.get(run_id)
        return feed is None or feed.stopping or feed.last != after

    def join(self, world: World, limiter: CapacityLimiter, run_id: str, after: int) -> Inbox:
        """A new inbox on the run's feed (started at ``after`` if the run had none)."""
        feed = self._feeds.get(run_id)
        started = feed is None
        if feed is None:
            feed = self._feeds[run_id] = _Feed(world, limiter, run_id, after)
            feed.task = asyncio.get_running_loop().create_task(self._follow(feed))
        inbox = Inbox(feed)
        inbox.started = started
        feed.inboxes.add(inbox)
        if self._keeping is None or self._keeping.done():
            self._keeping = asyncio.get_running_loop().create_task(self.keep_alive())
        return inbox

    async def keep_alive(self) -> None:
        """Wake every waiting watcher that has sent nothing for half the keep-alive time,
        looking every half of it (so none goes longer than it without sending); ends when
        no run is followed."""
        loop = asyncio.get_running_loop()
        half = self._wait_s / 2
        while self._feeds:
            await asyncio.sleep(half)
            due = loop.time() - half
            for feed in list(self._feeds.values()):
                for inbox in feed.inboxes:
                    if inbox.waiter is not None and inbox.quiet_since <= due:
                        inbox.wake()

    def leave(self, inbox: Inbox) -> None:
        """The watcher is gone: its feed stops (after its reader's current wait) if it was
        the last; a watcher that joins from now on starts a feed of its own."""
        feed = inbox.feed
        feed.inboxes.discard(inbox)
        if not feed.inboxes and not feed.stopping:
            feed.stopping = True
            self._drop(feed)

    def _drop(self, feed: _Feed) -> None:
        if self._feeds.get(feed.run_id) is feed:
            del self._feeds[feed.run_id]

    async def _follow(self, feed: _Feed) -> None:
        loop = asyncio.get_running_loop()

        def post(out: list[Formatted]) -> None:
            loop.call_soon_threadsafe(self._deliver, feed, out)

        try:
            # One thread follows the run for as long as the feed lives: a wake costs the
            # follow's read of what came, not a new follow (and its catch-up read) per batch.
            await to_thread.run_sync(self._pump, feed, post, limiter=feed.limiter)
        except Exception as exc:  # every watcher of the run gets it (the stream is cut)
            for inbox in feed.inboxes:
                inbox.put(exc)
        finally:
            self._drop(feed)

    def _pump(self, feed: _Feed, post: Callable[[list[Formatted]], None]) -> None:
        """(In a thread.) The run's events to ``post``, one at a time as the follow yields
        them, until the run's end or the feed stops."""
        after = feed.last
        while not feed.stopping:
            for event in feed.world.follow(feed.run_id, after=after, timeout=self._wait_s):
                after = event.sequence
                ends = event.type in RUN_END_EVENT_TYPES
                post([Formatted(event.sequence, ends, self._format(event))])
                if ends or feed.stopping:
                    return

    def _deliver(self, feed: _Feed, out: list[Formatted]) -> None:
        """(In the loop.) A batch to every watcher of the feed."""
        feed.last = out[-1].sequence
        for inbox in feed.inboxes:
            inbox.put(out)
        if out[-1].ends:
            # Its watchers stop with it; one that joins from now on catches up by itself.
            self._drop(feed)
