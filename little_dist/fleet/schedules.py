"""Schedules' ticks, started by the schedulers: :class:`ScheduleTicks`.

Every scheduler looks at the schedules every ``LITTLE_SCHEDULE_POLL`` seconds (one Redis
round trip for all of them, :class:`~little_dist.fleet.schedule_store.ScheduleStore`). For a
schedule whose newest tick is past its last tick handled:

1. the tick's run is submitted under the tick's own run id
   (:func:`~little_dist.fleet.schedule_specs.tick_run_id`) with the existing idempotent
   submission, unless the tick is late (more than
   :func:`~little_dist.fleet.schedule_specs.grace` behind the clock: the fleet was down) and
   the schedule's ``catchUp`` is ``skip``;
2. then the schedule's last tick is moved to it by compare-and-set.

In that order, once per tick however many schedulers run: two that look at one tick at once
submit one run id (the second submission finds the first's run), and a scheduler killed
between the two steps leaves the tick to the next look, whose submission finds the run
already there. Ticks missed in between (``catchUp: once``) collapse into the newest one: one
run when the fleet comes back, not one per tick missed.

A tick whose submission is refused as bad input (the workflow left the app, the input no
longer fits it) is skipped and said in the scheduler's log, not tried every poll; storage
that cannot be reached leaves it for the next poll.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

from little_dist.errors import InvalidInputError, LittleError, StorageUnavailableError
from little_dist.fleet.schedule_specs import grace, newest_tick, next_tick, tick_run_id
from little_dist.fleet.schedule_store import ScheduleStore, Stored
from little_dist.fleet.scheduler_log import log_event as _log
from little_dist.settings import Settings
from little_dist.world.base import World

if TYPE_CHECKING:
    import redis

    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.queue import TaskQueue

__all__ = ["ScheduleTicks"]

_NO_APP: Final = object()


class ScheduleTicks:
    """The schedule looks of one scheduler (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        world: World,
        queue: TaskQueue,
        redis_client: redis.Redis,
        holder: str,
    ) -> None:
        self._settings = settings
        self._world = world
        self._queue = queue
        self._holder = holder
        self.store = ScheduleStore(redis_client, settings.signal_stream)
        self.poll = settings.schedule_poll
        self._registry: AppRegistry | object | None = _NO_APP
        #: When the next look is due (monotonic seconds).
        self.next_look = 0.0

    def turn(self, now: float) -> None:
        """Look now if a look is due (``now``: monotonic); what fails is logged, never
        raised into the scheduler's loop (the next poll looks again)."""
        if now < self.next_look:
            return
        self.next_look = now + self.poll
        try:
            self.look(time.time())
        except LittleError as exc:
            _log("schedule-error", level=logging.WARNING, exc_info=exc, error=str(exc))

    def look(self, now: float) -> list[str]:
        """Start what is due at ``now`` (seconds since the epoch); the runs submitted."""
        started = []
        for stored in self.store.list():
            run_id = self._tick(stored, now)
            if run_id is not None:
                started.append(run_id)
        return started

    def _tick(self, stored: Stored, now: float) -> str | None:
        schedule, last = stored.schedule, stored.last_tick
        tick = newest_tick(schedule, now)
        if tick is None or tick <= last:
            return None
        late = now - tick > grace(schedule, self.poll)
        missed = next_tick(schedule, last) < tick
        run_id: str | None = None
        if late and schedule.catch_up == "skip":
            outcome = "skipped"
        else:
            run_id = tick_run_id(schedule.id, tick)
            try:
                self._submit(schedule.workflow, schedule.input, run_id, schedule.callback_url)
                outcome = "started"
            except StorageUnavailableError:
                raise  # (the next poll tries the tick again)
            except InvalidInputError as exc:
                outcome = "refused"
                _log(
                    "schedule-refused",
                    level=logging.WARNING,
                    schedule=schedule.id,
                    tick=tick,
                    error=str(exc),
                )
                run_id = None
        moved = self.store.advance(schedule.id, last, tick)
        _log(
            "schedule-tick",
            schedule=schedule.id,
            tick=tick,
            outcome=outcome,
            run=run_id,
            late=late,
            missed=missed,
            moved=moved == 1,
        )
        return run_id

    def _submit(self, workflow: str, run_input: object, run_id: str, callback: str | None) -> None:
        from little_dist.fleet.submission import submit_run

        submit_run(
            self._world,
            workflow,
            run_input,
            run_id=run_id,
            queue=self._queue,
            settings=self._settings,
            registry=self._app(),
            holder=self._holder,
            callback_url=callback,
        )

    def _app(self) -> AppRegistry | None:
        """The fleet's app (``LITTLE_APP``), loaded at the first tick: a workflow it defines
        with a fixed plan starts here; without it, the planner's worker starts it."""
        if self._registry is _NO_APP:
            from little_dist.fleet.app_registry import load_registry

            self._registry = load_registry(self._settings.app) if self._settings.app else None
        return self._registry  # type: ignore[return-value]
