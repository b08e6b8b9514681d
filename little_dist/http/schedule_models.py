"""The bodies of the ``/v1/schedules`` routes (see :mod:`little_dist.http.schedule_routes`).

Field names are the stored schedule's JSON names (:mod:`little_dist.fleet.schedule_specs`);
a body with a field not listed here is refused (422), as for runs.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from little_dist.fleet.schedule_specs import MAX_EVERY_S

__all__ = ["CreateSchedule", "ScheduleInfo", "ScheduleList"]


class CreateSchedule(BaseModel):
    """``POST /v1/schedules``: which workflow (an id the served app defines), its input, and
    when: a cron expression or an interval, in a time zone."""

    model_config = ConfigDict(extra="forbid", strict=True)

    workflow: str = Field(
        min_length=1, max_length=200, description="the id of a workflow the served app defines"
    )
    input: Any = Field(default=None, description="every run's input (JSON; default {})")
    cron: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="five cron fields (minute hour day-of-month month day-of-week) or an "
        "alias such as '@hourly', read in timeZone; give cron or everySeconds",
    )
    everySeconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_EVERY_S,
        description="an interval in seconds, counted from when the schedule is made",
    )
    timeZone: str = Field(
        default="UTC", min_length=1, max_length=64, description="an IANA time zone name"
    )
    catchUp: Literal["once", "skip"] = Field(
        default="once",
        description="ticks missed while the fleet was down: 'once' starts the newest of them "
        "once when it is back, 'skip' starts none",
    )
    callbackUrl: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="an http(s) URL each run's end is POSTed to, signed",
    )


class ScheduleInfo(BaseModel):
    """A schedule, with its last tick handled and its next tick (ISO 8601, UTC)."""

    id: str
    workflow: str
    input: Any = None
    cron: str | None = None
    everySeconds: int | None = None
    timeZone: str
    catchUp: Literal["once", "skip"]
    callbackUrl: str | None = None
    createdAt: str
    lastTick: str = Field(description="the last tick handled (started or skipped)")
    nextTick: str


class ScheduleList(BaseModel):
    """``GET /v1/schedules``: every schedule, oldest first."""

    schedules: list[ScheduleInfo]
