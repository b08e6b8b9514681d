"""The fleet's schedules in its Redis: :class:`ScheduleStore`.

Two hashes keyed on the signal stream (:mod:`little_dist.world.fleet_keys`): the schedules
(id -> JSON, :class:`~little_dist.fleet.schedule_specs.Schedule`) and each one's last tick
handled, started or skipped (id -> whole seconds). A schedule's last tick only moves forward
and only by compare-and-set (:meth:`ScheduleStore.advance`, one Lua script): the schedulers
that look at one tick at once agree on who moved it, and a deleted schedule is never brought
back by a scheduler that read it before the delete. Mutable state is in Redis, never S3
(see DESIGN.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import redis

from little_dist.errors import InvalidInputError, StorageUnavailableError
from little_dist.fleet.schedule_specs import SCHEDULE_ID, Schedule
from little_dist.world.fleet_keys import schedule_ticks_key, schedules_key

__all__ = ["ScheduleStore", "Stored", "check_schedule_id"]

# KEYS[1] the ticks hash; ARGV: id, the last tick read, the new one.
# 1: moved; 0: someone moved it first; -1: the schedule is gone.
_ADVANCE: Final = """
local now = redis.call('HGET', KEYS[1], ARGV[1])
if not now then return -1 end
if tonumber(now) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


@dataclass(frozen=True)
class Stored:
    """A schedule and its last tick handled (whole seconds since the epoch)."""

    schedule: Schedule
    last_tick: int


class ScheduleStore:
    """The schedules of the fleet whose signal stream is ``signal_stream``, on ``client``
    (a sync redis-py client)."""

    def __init__(self, client: redis.Redis, signal_stream: str) -> None:
        self._redis = client
        self._specs = schedules_key(signal_stream)
        self._ticks = schedule_ticks_key(signal_stream)
        self._advance = client.register_script(_ADVANCE)

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except redis.exceptions.RedisError as exc:
            raise StorageUnavailableError(f"Redis failed during {what}: {exc}") from exc

    def create(self, schedule: Schedule) -> Schedule:
        """Store a new schedule; its first tick is the first after it was made."""
        with self._errors("storing a schedule"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.hsetnx(self._specs, schedule.id, json.dumps(schedule.to_json()))
            pipe.hset(self._ticks, schedule.id, schedule.created_at)
            created, _ = pipe.execute()
        if not created:
            raise InvalidInputError(f"schedule {schedule.id} exists already")
        return schedule

    def list(self) -> list[Stored]:
        """Every schedule with its last tick, oldest first."""
        with self._errors("reading the schedules"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.hgetall(self._specs)
            pipe.hgetall(self._ticks)
            specs, ticks = pipe.execute()
        found = []
        for key, raw in specs.items():
            last = ticks.get(key)
            if last is None:
                continue  # (being deleted)
            found.append(Stored(Schedule.from_json(json.loads(raw)), int(last)))
        return sorted(found, key=lambda s: (s.schedule.created_at, s.schedule.id))

    def get(self, schedule_id: str) -> Stored | None:
        check_schedule_id(schedule_id)
        with self._errors("reading a schedule"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.hget(self._specs, schedule_id)
            pipe.hget(self._ticks, schedule_id)
            raw, last = pipe.execute()
        if raw is None or last is None:
            return None
        return Stored(Schedule.from_json(json.loads(raw)), int(last))

    def delete(self, schedule_id: str) -> bool:
        """Remove a schedule (its runs stay); ``False`` if there was none with that id."""
        check_schedule_id(schedule_id)
        with self._errors("deleting a schedule"):
            pipe = self._redis.pipeline(transaction=True)
            pipe.hdel(self._ticks, schedule_id)  # (first: no scheduler moves it on again)
            pipe.hdel(self._specs, schedule_id)
            _, removed = pipe.execute()
        return bool(removed)

    def advance(self, schedule_id: str, last: int, tick: int) -> int:
        """Move the schedule's last tick from ``last`` to ``tick``: 1 moved, 0 another
        scheduler moved it first, -1 the schedule is gone."""
        with self._errors("moving a schedule on"):
            return int(self._advance(keys=[self._ticks], args=[schedule_id, last, tick]))


def check_schedule_id(schedule_id: str) -> str:
    if not SCHEDULE_ID.fullmatch(schedule_id):
        raise InvalidInputError(
            f"invalid schedule id {schedule_id!r} (expected 'sch_' and 16 hex digits)"
        )
    return schedule_id
