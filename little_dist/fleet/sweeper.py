"""The scheduler's sweeper: the set of active runs and the periodic look at each of them.

Signals make the scheduler fast; the sweeper makes it *certain*. Every ``interval`` seconds
one scheduler (whoever holds the sweep lease) walks the active runs and, for each, folds,
decides and dispatches again — which re-sends tasks whose dispatch lease expired before the
attempt started (lost messages) — and fails the running attempts whose step lease is free
(the worker died) with ``StepFailed{causeCode: "lease_expired", retriable: true}`` through
:func:`~little_dist.runtime.sweep_dead_attempts`, so ``decide`` retries them.

:class:`ActiveRuns` is a Redis set of run ids (added when a run's ``RunStarted`` is first
seen, removed once the run is over and archived). When it is missing (a new deployment, or
Redis lost its data) the first scheduler to start rebuilds it from the runs whose archive
has not completed (``world.list_unarchived_run_ids()`` where the world has it, else every
run); finished runs among them are found out, archived and dropped by the first sweep.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from little_dist.errors import LeaseLostError, StorageUnavailableError
from little_dist.fleet.run_tracker import RunTracker
from little_dist.runtime import running_worker_attempts, sweep_dead_attempts
from little_dist.world.base import Lease, World
from little_dist.world.extras import extras_of
from little_dist.world.fleet_keys import rebuilt_marker_key

__all__ = ["ActiveRuns", "SweepRound", "fail_dead_attempts"]

# KEYS: 1 the rebuild marker, 2 the active set, 3 the rebuilder's staging set. ARGV: 1 now.
# The members and the marker land together, once: -1 if another rebuild landed first.
_COMMIT_REBUILD = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('DEL', KEYS[3])
  return -1
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SUNIONSTORE', KEYS[2], KEYS[2], KEYS[3])
  redis.call('DEL', KEYS[3])
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
"""
# A staging set left by a rebuilder that died goes after this long (seconds).
_STAGING_TTL = 3600


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class ActiveRuns:
    """The Redis set of run ids the sweeper looks at (``key``), and its rebuild marker."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self._redis = client
        self.key = key
        self._marker = rebuilt_marker_key(key)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except redis.exceptions.RedisError as exc:
            raise StorageUnavailableError(f"Redis failed during {what}: {exc}") from exc

    def add(self, run_id: str) -> None:
        with self._errors("adding an active run"):
            self._redis.sadd(self.key, run_id)

    def remove(self, run_id: str) -> None:
        with self._errors("removing an active run"):
            self._redis.srem(self.key, run_id)

    def still_active(self, run_ids: Sequence[str]) -> set[str]:
        """Those of ``run_ids`` still in the set (one round trip)."""
        if not run_ids:
            return set()
        with self._errors("looking up active runs"):
            found: Any = self._redis.smismember(self.key, list(run_ids))
        return {run_id for run_id, member in zip(run_ids, found, strict=True) if member}

    def members(self) -> list[str]:
        with self._errors("listing active runs"):
            found: Any = self._redis.smembers(self.key)
        return sorted(_text(member) for member in found)

    def rebuild_if_missing(self, world: World) -> int:
        """Fill the set once per Redis dataset, with the runs whose archive has not
        completed; how many (0: it was built already, or by another scheduler meanwhile).

        The runs are staged in a set of this call's own, then one script adds them and sets
        the marker together, unless a marker is there by then: a scheduler that dies
        half-way leaves no marker, so the next one rebuilds. (A run archived between the
        listing and the commit is added back; the first sweep finds it over and drops it.)
        """
        with self._errors("looking for the active-run rebuild marker"):
            if self._redis.exists(self._marker):
                return 0
        archives = extras_of(world).archives
        run_ids = archives.list_unarchived_run_ids() if archives else world.list_run_ids()
        staging = f"{self.key}:rebuild:{uuid.uuid4().hex}"
        with self._errors("rebuilding the active runs"):
            pipe = self._redis.pipeline(transaction=False)
            for start in range(0, len(run_ids), 500):
                pipe.sadd(staging, *run_ids[start : start + 500])
            pipe.expire(staging, _STAGING_TTL)
            pipe.execute()
            committed = self._redis.eval(
                _COMMIT_REBUILD, 3, self._marker, self.key, staging, str(int(time.time()))
            )
        return len(run_ids) if int(committed) > 0 else 0


class SweepRound:
    """When the next sweep is due, who may run it (the sweep lease), and its work queue.

    One scheduler sweeps at a time: the lease ``lease_key`` is taken (or renewed) at the
    start of each round for three intervals; a scheduler that cannot take it only looks at
    the runs in its own cache (so finished ones leave its memory).
    The round's runs are handed out a few at a time (:meth:`take`), so signals keep being
    served between them.
    """

    def __init__(self, world: World, lease_key: str, holder: str, *, interval: float) -> None:
        self.world = world
        self.lease_key = lease_key
        self.holder = holder
        self.interval = interval
        self._lease: Lease | None = None
        self._queue: deque[str] = deque()
        self._next = 0.0  # monotonic time of the next round; 0: at once
        self.full = False  # whether the current round holds the lease (fails dead attempts)

    @property
    def pending(self) -> int:
        """Runs of the current round not yet handed out."""
        return len(self._queue)

    def seconds_until_due(self, now: float) -> float:
        return 0.0 if self._queue else max(0.0, self._next - now)

    def due(self, now: float) -> bool:
        """Whether a new round should start now (none in progress and the time has come)."""
        return not self._queue and now >= self._next

    def begin(self, now: float, run_ids: Iterable[str], *, full: bool = True) -> None:
        """Queue ``run_ids`` as this round's work.

        ``full``: the sweep lease is ours (:meth:`claim`), so dead attempts are failed too;
        otherwise the round only looks at the runs again (the scheduler's own cache).
        """
        self._next = now + self.interval
        self.full = full
        self._queue.extend(run_ids)

    def skip(self, now: float) -> None:
        """No round this time (the lease is elsewhere)."""
        self._next = now + self.interval

    def claim(self) -> bool:
        """Take or renew the sweep lease; whether this scheduler sweeps this round."""
        return self._hold_lease()

    def take(self, count: int) -> list[str]:
        """Up to ``count`` runs of the current round."""
        out: list[str] = []
        while self._queue and len(out) < count:
            out.append(self._queue.popleft())
        return out

    def _hold_lease(self) -> bool:
        ttl = self.interval * 3
        if self._lease is not None:
            try:
                self._lease = self.world.renew_lease(self._lease, ttl)
                return True
            except LeaseLostError:
                self._lease = None
        self._lease = self.world.acquire_lease(self.lease_key, self.holder, ttl)
        return self._lease is not None

    def release(self) -> None:
        """Let another scheduler sweep at once (graceful stop)."""
        if self._lease is not None:
            lease, self._lease = self._lease, None
            self.world.release_lease(lease)


def fail_dead_attempts(world: World, tracker: RunTracker, holder: str) -> list[tuple[str, int]]:
    """Fail the run's running attempts whose step lease is free; ``(path, attempt)`` of each.

    Uses the tracker's folded state (catch it up first). Attempts whose worker still holds
    the lease are left alone.
    """
    ctx = tracker.context
    state = tracker.state()
    if ctx is None or state.status != "running":
        return []
    if not running_worker_attempts(ctx.version, state):
        return []
    result = sweep_dead_attempts(world, state, version=ctx.version, holder=holder)
    return result.failed
