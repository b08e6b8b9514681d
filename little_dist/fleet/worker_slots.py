"""The fleet's worker slots, the window they set for fan-outs, and the backlog they leave.

**Slots.** Every ``little worker`` registers its task slots (its pool's concurrency) for the
queues it consumes in the Redis hash :func:`~little_dist.world.fleet_keys.slots_key` (beside
the signal stream), and refreshes the entry every :data:`SLOT_REFRESH_S` seconds; an entry
not refreshed for :data:`SLOT_TTL_S` seconds (the worker died) no longer counts, judged by
the Redis server's clock. A worker that stops removes its entry. :class:`FleetSlots` sums the
live entries of a queue (one script call, remembered for :data:`SLOT_CACHE_S` seconds).

**The window.** With ``LITTLE_BRANCH_WINDOW=fleet`` (the default) every look at a run
(client, scheduler, worker fast path) decides with ``RunContext.max_in_flight`` set to the
worker queue's slots: a parallel step keeps at most that many branches in flight, never more
than its ``maxConcurrency``. A 1000-branch fan-out whose ``maxConcurrency`` is 100 on a
fleet of 32 slots then keeps 32 in flight, each refilled in the slot that freed it, instead
of queueing 68 tasks that wait for the end of the fan-out and then all cross the broker.
No slot registered (no worker up yet, a fleet scaled to zero): no cap.

**The backlog.** What the cap holds back (``Decision.held_back``: branches the steps'
``maxConcurrency`` would have in flight now) is not in any queue, so each look reports it
per run (:class:`Backlog`): the hash :func:`~little_dist.world.fleet_keys.backlog_key` holds
each run's count and the list :func:`~little_dist.world.fleet_keys.backlog_list` is kept
exactly that long in total, so an autoscaler that reads a list's length (KEDA's ``redis``
trigger) sees the fan-outs' demand beside the queue's. A run's count drops to zero when its
last branches are scheduled, and the scheduler clears it when the run ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from little_dist.errors import StorageUnavailableError
from little_dist.world.fleet_keys import backlog_key, backlog_list, slots_key

if TYPE_CHECKING:
    import redis

    from little_dist.settings import Settings

__all__ = [
    "SLOT_CACHE_S",
    "SLOT_REFRESH_S",
    "SLOT_TTL_S",
    "Backlog",
    "BacklogNotes",
    "FanoutWindow",
    "FleetSlots",
    "SlotRegistration",
    "fanout_window",
    "fleet_redis",
]

#: How often a worker refreshes its entry, and how long an entry counts without a refresh.
SLOT_REFRESH_S: Final = 10.0
SLOT_TTL_S: Final = 45.0
#: How long a process reuses the slot count it read.
SLOT_CACHE_S: Final = 2.0
#: How often one process reports a run's backlog while it only shrinks or grows (a change
#: to or from zero is reported at once).
BACKLOG_REPORT_S: Final = 1.0
#: Most a run may add to the backlog list (a bound on one script call's work).
_MAX_BACKLOG: Final = 100_000

_log = logging.getLogger("little.slots")

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: 1 the slots hash. ARGV: 1 node, 2 slots, 3 queues (comma-separated), 4 ttl ms.
_REGISTER = (
    _NOW_MS
    + """
redis.call('HSET', KEYS[1], ARGV[1], (now + tonumber(ARGV[4])) .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
return 1
"""
)

# KEYS: 1 the slots hash. ARGV: 1 queue. Sums the live entries consuming the queue; drops the
# expired ones.
_COUNT = (
    _NOW_MS
    + """
local total = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local until_ms, slots, queues = string.match(all[i + 1], '^(%d+) (%d+) (.*)$')
  if not until_ms or tonumber(until_ms) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif string.find(',' .. queues .. ',', ',' .. ARGV[1] .. ',', 1, true) then
    total = total + tonumber(slots)
  end
end
return total
"""
)

# KEYS: 1 the per-run backlog hash, 2 the backlog list. ARGV: 1 run id, 2 its count.
# The list's length stays the sum of the hash's counts.
_REPORT = """
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local new = tonumber(ARGV[2])
if new > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], new)
else
  redis.call('HDEL', KEYS[1], ARGV[1])
end
local delta = new - old
if delta > 0 then
  local chunk = {}
  for i = 1, math.min(delta, 1000) do chunk[i] = '1' end
  while delta > 0 do
    local n = math.min(delta, 1000)
    redis.call('RPUSH', KEYS[2], unpack(chunk, 1, n))
    delta = delta - n
  end
elseif delta < 0 then
  local keep = redis.call('LLEN', KEYS[2]) + delta
  if keep > 0 then
    redis.call('LTRIM', KEYS[2], 0, keep - 1)
  else
    redis.call('DEL', KEYS[2])
  end
end
return new
"""


class _Scripts:
    """The scripts on one client (registered once; redis-py reloads them after a flush)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.register = client.register_script(_REGISTER)
        self.count = client.register_script(_COUNT)
        self.report = client.register_script(_REPORT)


class SlotRegistration:
    """One worker's entry in the slots hash, refreshed from a daemon thread until
    :meth:`stop`. Failures to reach Redis are logged and retried at the next refresh."""

    def __init__(
        self,
        client: redis.Redis,
        key: str,
        node: str,
        queues: Sequence[str],
        slots: int,
        *,
        refresh: float = SLOT_REFRESH_S,
        ttl: float = SLOT_TTL_S,
        owns_client: bool = False,
    ) -> None:
        self._scripts = _Scripts(client)
        self._owns_client = owns_client
        self.key = key
        self.node = node
        self.queues = ",".join(queues)
        self.slots = slots
        self._refresh = refresh
        self._ttl_ms = int(ttl * 1000)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> SlotRegistration:
        self._write()
        self._thread = threading.Thread(target=self._run, name="little-slots", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop refreshing and remove the entry (best effort: it expires anyway)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._scripts.client.hdel(self.key, self.node)
        except Exception as error:  # the entry expires on its own
            _log.warning("could not remove the slots of %s: %s", self.node, error, exc_info=True)
        if self._owns_client:
            self._scripts.client.close()

    def _run(self) -> None:
        while not self._stop.wait(self._refresh):
            self._write()

    def _write(self) -> None:
        try:
            self._scripts.register(
                keys=[self.key], args=[self.node, self.slots, self.queues, self._ttl_ms]
            )
        except Exception as error:
            _log.warning("could not register the slots of %s: %s", self.node, error, exc_info=True)


class FleetSlots:
    """How many slots the live workers of a queue have, read at most every ``cache``
    seconds. ``None`` when none is registered (or Redis cannot be read: no cap then)."""

    def __init__(
        self,
        client: redis.Redis,
        key: str,
        *,
        cache: float = SLOT_CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._scripts = _Scripts(client)
        self.key = key
        self._cache = cache
        self._clock = clock
        self._known: dict[str, tuple[float, int | None]] = {}
        self._lock = threading.Lock()

    def slots(self, queue: str) -> int | None:
        now = self._clock()
        with self._lock:
            known = self._known.get(queue)
            if known is not None and now < known[0]:
                return known[1]
            # Whoever reads first reads for everyone; the others use the old value meanwhile.
            self._known[queue] = (now + self._cache, known[1] if known else None)
        try:
            total: int | None = int(self._scripts.count(keys=[self.key], args=[queue]))
        except Exception as error:
            _log.warning("could not read the fleet's slots: %s", error, exc_info=True)
            total = known[1] if known else None
        found = total if total else None
        with self._lock:
            self._known[queue] = (now + self._cache, found)
        return found


class Backlog:
    """Reports runs' held-back branches for one queue (see the module docstring)."""

    def __init__(self, client: redis.Redis, key: str, queue: str) -> None:
        self._scripts = _Scripts(client)
        self.key = key
        self.list = backlog_list(queue)

    def report(self, run_id: str, held_back: int) -> None:
        """Set ``run_id``'s count; raises :class:`StorageUnavailableError` if Redis fails."""
        count = max(0, min(int(held_back), _MAX_BACKLOG))
        try:
            self._scripts.report(keys=[self.key, self.list], args=[run_id, count])
        except Exception as error:
            raise StorageUnavailableError(
                f"Redis failed while reporting the backlog of {run_id}: {error}"
            ) from error

    def total(self) -> int:
        """The backlog list's length (what an autoscaler reads)."""
        return int(self._scripts.client.llen(self.list))


class BacklogNotes:
    """One process's reports for one run: a change to or from zero at once, others at most
    every :data:`BACKLOG_REPORT_S` seconds; a run this process never saw held back costs
    nothing."""

    def __init__(
        self, backlog: Backlog, run_id: str, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._backlog = backlog
        self._run_id = run_id
        self._clock = clock
        self._reported = 0
        self._at = float("-inf")
        self._lock = threading.Lock()

    def note(self, held_back: int) -> None:
        now = self._clock()
        with self._lock:
            if held_back == self._reported:
                return
            crossing = (held_back == 0) != (self._reported == 0)
            if not crossing and now - self._at < BACKLOG_REPORT_S:
                return
            self._reported, self._at = held_back, now
        try:
            self._backlog.report(self._run_id, held_back)
        except StorageUnavailableError as error:
            _log.warning("%s", error, exc_info=True)
            with self._lock:
                self._at = float("-inf")  # try again at the next look


def fleet_redis(settings: Settings) -> Any | None:
    """A Redis client on the Redis the fleet's world (and its signal stream) lives in;
    ``None`` when the world is not on Redis."""
    from little_dist.world.factory import fleet_redis_url

    url = fleet_redis_url(settings)
    if url is None:
        return None
    import redis as redis_lib

    return redis_lib.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=10)


class FanoutWindow:
    """What a run's tracker asks of the fleet: the worker queue's slots (the window's cap)
    and where to note each run's held-back branches."""

    def __init__(
        self, slots: FleetSlots, backlog: Backlog, queue: str, *, client: Any | None = None
    ) -> None:
        self.fleet = slots
        self.backlog = backlog
        self.queue = queue
        self._client = client  # closed with the window (made for it)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def max_in_flight(self) -> int | None:
        return self.fleet.slots(self.queue)

    def notes_for(self, run_id: str) -> BacklogNotes:
        return BacklogNotes(self.backlog, run_id)


def fanout_window(settings: Settings, client: Any | None = None) -> FanoutWindow | None:
    """The window of ``settings``, on ``client`` or a new client of the fleet's Redis
    (:func:`fleet_redis`); ``None`` with ``LITTLE_BRANCH_WINDOW=declared`` or a world that is
    not on Redis."""
    if settings.branch_window != "fleet":
        return None
    owned = client is None
    if client is None:
        client = fleet_redis(settings)
        if client is None:
            return None
    queue = settings.queue_for("worker")
    return FanoutWindow(
        FleetSlots(client, slots_key(settings.signal_stream)),
        Backlog(client, backlog_key(settings.signal_stream, queue), queue),
        queue,
        client=client if owned else None,
    )
