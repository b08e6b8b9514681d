"""What a schedule is (:class:`Schedule`) and when it ticks: pure, the time passed in.

A schedule starts a run of one workflow, with one input, at every tick of either a cron
expression (five fields, or croniter's ``@hourly``-style aliases, read in the schedule's
IANA time zone, so ``0 9 * * 1-5`` is nine in the morning there, summer time included) or an
interval (``everySeconds``, counted from when the schedule was made). Ticks are whole
seconds since the epoch; the run of tick ``t`` of schedule ``sch_x`` is ``run_sch_x_t``
(:func:`tick_run_id`), so that however many schedulers start it, it is one run.

``catchUp`` says what happens to ticks nobody started in time (every scheduler was down):
``once`` (default) starts the newest of them once when the fleet is back, however many
were missed; ``skip`` starts none of them and waits for the next tick. A tick is late once
it is more than :func:`grace` behind the clock.

Cron parsing is croniter's (a well-kept library; pure: it reads no clock when given a start).
"""

from __future__ import annotations

import math
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from little_dist.errors import InvalidInputError

__all__ = [
    "CATCH_UP",
    "MAX_EVERY_S",
    "Schedule",
    "ScheduleInputError",
    "check_cron",
    "check_time_zone",
    "grace",
    "new_schedule_id",
    "newest_tick",
    "next_tick",
    "schedule_view",
    "tick_run_id",
]

CatchUp = Literal["once", "skip"]
CATCH_UP: Final = ("once", "skip")
#: The longest interval (a year): longer is a cron expression's job.
MAX_EVERY_S: Final = 366 * 24 * 3600
SCHEDULE_ID: Final = re.compile(r"^sch_[0-9a-f]{16}$")


class ScheduleInputError(InvalidInputError):
    """A schedule that cannot be made as given; ``field`` names what is wrong (the API's
    JSON name: ``cron``, ``timeZone``, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def new_schedule_id() -> str:
    return "sch_" + secrets.token_hex(8)


def check_time_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (``Europe/Paris``, ``UTC``), or :class:`ScheduleInputError`."""
    if not name or len(name) > 64 or not re.fullmatch(r"[A-Za-z0-9_+\-/]+", name):
        raise ScheduleInputError("timeZone", f"not an IANA time zone name: {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ScheduleInputError(
            "timeZone", f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris')"
        ) from error


def check_cron(expression: str, zone: ZoneInfo, now: float) -> str:
    """``expression`` if it is a five-field cron expression (or an ``@`` alias) that ever
    fires, or :class:`ScheduleInputError` saying why."""
    from croniter import CroniterBadDateError, croniter

    text = " ".join(expression.split())
    fields = text.split(" ")
    if not text.startswith("@") and len(fields) != 5:
        raise ScheduleInputError(
            "cron",
            f"expected five fields (minute hour day-of-month month day-of-week), got "
            f"{len(fields)} in {expression!r}",
        )
    if not croniter.is_valid(text):
        raise ScheduleInputError("cron", f"not a valid cron expression: {expression!r}")
    try:
        croniter(text, datetime.fromtimestamp(now, zone)).get_next(float)
    except CroniterBadDateError as error:
        raise ScheduleInputError("cron", f"{expression!r} never fires") from error
    return text


@dataclass(frozen=True)
class Schedule:
    """One schedule, as stored (``to_json``/``from_json``: the API's names)."""

    id: str
    workflow: str
    created_at: int  # whole seconds since the epoch: the interval's anchor
    input: Any = field(default_factory=dict)
    cron: str | None = None
    every_seconds: int | None = None
    time_zone: str = "UTC"
    catch_up: CatchUp = "once"
    callback_url: str | None = None

    @classmethod
    def made(
        cls,
        *,
        workflow: str,
        now: float,
        input: Any = None,
        cron: str | None = None,
        every_seconds: int | None = None,
        time_zone: str = "UTC",
        catch_up: str = "once",
        callback_url: str | None = None,
        schedule_id: str | None = None,
    ) -> Schedule:
        """A new schedule, checked (:class:`ScheduleInputError` naming the field)."""
        zone = check_time_zone(time_zone)
        if (cron is None) == (every_seconds is None):
            raise ScheduleInputError("cron", "give either cron or everySeconds (one of them)")
        if cron is not None:
            cron = check_cron(cron, zone, now)
        if every_seconds is not None and (
            isinstance(every_seconds, bool)
            or not isinstance(every_seconds, int)
            or not 1 <= every_seconds <= MAX_EVERY_S
        ):
            raise ScheduleInputError(
                "everySeconds", f"expected a whole number of seconds from 1 to {MAX_EVERY_S}"
            )
        if catch_up not in CATCH_UP:
            raise ScheduleInputError("catchUp", f"expected 'once' or 'skip', got {catch_up!r}")
        if callback_url is not None:
            from little_dist.fleet.callback_urls import check_callback_url

            check_callback_url(callback_url, "callbackUrl")
        return cls(
            id=schedule_id or new_schedule_id(),
            workflow=workflow,
            created_at=math.floor(now),
            input={} if input is None else input,
            cron=cron,
            every_seconds=every_seconds,
            time_zone=time_zone,
            catch_up=catch_up,  # type: ignore[arg-type]
            callback_url=callback_url,
        )

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "workflow": self.workflow,
            "input": self.input,
            "timeZone": self.time_zone,
            "catchUp": self.catch_up,
            "createdAt": self.created_at,
        }
        if self.cron is not None:
            data["cron"] = self.cron
        if self.every_seconds is not None:
            data["everySeconds"] = self.every_seconds
        if self.callback_url is not None:
            data["callbackUrl"] = self.callback_url
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schedule:
        return cls(
            id=str(data["id"]),
            workflow=str(data["workflow"]),
            created_at=int(data["createdAt"]),
            input=data.get("input", {}),
            cron=data.get("cron"),
            every_seconds=data.get("everySeconds"),
            time_zone=str(data.get("timeZone", "UTC")),
            catch_up=data.get("catchUp", "once"),
            callback_url=data.get("callbackUrl"),
        )


def next_tick(schedule: Schedule, after: float) -> int:
    """The schedule's first tick strictly after ``after``."""
    if schedule.every_seconds is not None:
        every = schedule.every_seconds
        k = max(1, math.floor((after - schedule.created_at) / every) + 1)
        return schedule.created_at + k * every
    from croniter import croniter

    assert schedule.cron is not None
    start = datetime.fromtimestamp(math.floor(after), schedule.zone)
    tick: int = round(croniter(schedule.cron, start).get_next(float))
    return tick


def newest_tick(schedule: Schedule, now: float) -> int | None:
    """The schedule's newest tick at or before ``now`` after it was made; ``None`` yet."""
    if schedule.every_seconds is not None:
        k = math.floor((now - schedule.created_at) / schedule.every_seconds)
        return None if k < 1 else schedule.created_at + k * schedule.every_seconds
    from croniter import croniter

    assert schedule.cron is not None
    # croniter's get_prev excludes its start: start a second past the whole second of now.
    start = datetime.fromtimestamp(math.floor(now) + 1, schedule.zone)
    tick: int = round(croniter(schedule.cron, start).get_prev(float))
    return tick if tick > schedule.created_at else None


def grace(schedule: Schedule, poll: float) -> float:
    """How late a tick may be started and still count as on time (not missed): two polls of
    the schedulers, and at least a second, but never a whole interval."""
    late = max(1.0, 2 * poll)
    if schedule.every_seconds is not None:
        late = min(late, max(0.5, schedule.every_seconds - 0.5))
    return late


def schedule_view(schedule: Schedule, last_tick: int) -> dict[str, Any]:
    """The schedule as the API and ``little schedules list`` show it: its JSON, with when
    it was made, its last tick handled and its next tick in ISO 8601 (UTC)."""
    return {
        **schedule.to_json(),
        "createdAt": _iso(schedule.created_at),
        "lastTick": _iso(last_tick),
        "nextTick": _iso(next_tick(schedule, last_tick)),
    }


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def tick_run_id(schedule_id: str, tick: int) -> str:
    """The run tick ``tick`` of the schedule starts (the same for every scheduler)."""
    return f"run_{schedule_id}_{tick}"
