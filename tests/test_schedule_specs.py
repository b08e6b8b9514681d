"""When a schedule ticks (pure: the time passed in), and what a schedule may be."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from little_dist.fleet.schedule_specs import (
    Schedule,
    ScheduleInputError,
    grace,
    newest_tick,
    next_tick,
    schedule_view,
    tick_run_id,
)
from little_dist.ids import validate_run_id

PARIS = ZoneInfo("Europe/Paris")


def at(text: str, zone: ZoneInfo = PARIS) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def paris(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, PARIS).isoformat()


def test_an_interval_ticks_from_when_it_was_made() -> None:
    made = Schedule.made(workflow="w", now=1000.7, every_seconds=10)
    assert made.created_at == 1000
    assert newest_tick(made, 1009.9) is None
    assert newest_tick(made, 1010) == 1010
    assert newest_tick(made, 1034) == 1030
    assert next_tick(made, 1000) == 1010
    assert next_tick(made, 1010) == 1020
    assert next_tick(made, 500) == 1010  # (never before the first tick)


@pytest.mark.parametrize(
    ("cron", "now", "newest", "after"),
    [
        # 09:00 Paris on weekdays; summer time starts on Sunday 2026-03-29.
        ("0 9 * * 1-5", "2026-03-30T08:59:59", "2026-03-27T09:00:00+01:00", None),
        ("0 9 * * 1-5", "2026-03-30T09:00:00", "2026-03-30T09:00:00+02:00", None),
        ("0 9 * * 1-5", "2026-03-30T09:00:30", "2026-03-30T09:00:00+02:00", None),
        # 02:30 does not exist in Paris on 2026-03-29: that day's tick comes as the gap ends.
        (
            "30 2 * * *",
            "2026-03-29T12:00:00",
            "2026-03-29T03:00:00+02:00",
            "2026-03-30T02:30:00+02:00",
        ),
        (
            "@hourly",
            "2026-01-01T10:59:00",
            "2026-01-01T10:00:00+01:00",
            "2026-01-01T11:00:00+01:00",
        ),
    ],
)
def test_a_cron_schedule_ticks_in_its_time_zone(
    cron: str, now: str, newest: str, after: str | None
) -> None:
    made = Schedule.made(
        workflow="w", now=at("2026-01-01T00:00:00"), cron=cron, time_zone="Europe/Paris"
    )
    tick = newest_tick(made, at(now))
    assert paris(tick) == newest
    if after is not None:
        assert tick is not None and paris(next_tick(made, tick)) == after


def test_no_cron_tick_before_the_schedule_was_made() -> None:
    made = Schedule.made(workflow="w", now=at("2026-01-01T10:30:00"), cron="0 * * * *")
    assert newest_tick(made, at("2026-01-01T10:59:00")) is None


@pytest.mark.parametrize(
    ("fields", "field", "why"),
    [
        ({"cron": "61 * * * *"}, "cron", "not a valid cron expression"),
        ({"cron": "* * * *"}, "cron", "expected five fields"),
        ({"cron": "* * * * * *"}, "cron", "expected five fields"),
        ({"cron": "0 0 31 2 *"}, "cron", "never fires"),
        ({"cron": "0 * * * *", "time_zone": "Mars/Olympus"}, "timeZone", "unknown time zone"),
        ({"cron": "0 * * * *", "time_zone": "../etc/passwd"}, "timeZone", "not an IANA"),
        ({}, "cron", "give either cron or everySeconds"),
        ({"cron": "0 * * * *", "every_seconds": 5}, "cron", "give either"),
        ({"every_seconds": 0}, "everySeconds", "whole number of seconds"),
        ({"every_seconds": 1.5}, "everySeconds", "whole number of seconds"),
        ({"every_seconds": 5, "catch_up": "all"}, "catchUp", "'once' or 'skip'"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(
    fields: dict[str, object], field: str, why: str
) -> None:
    with pytest.raises(ScheduleInputError, match=why) as caught:
        Schedule.made(workflow="w", now=0, **fields)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_grace_is_two_polls_and_never_a_whole_interval() -> None:
    assert grace(Schedule.made(workflow="w", now=0, cron="* * * * *"), 1.0) == 2.0
    assert grace(Schedule.made(workflow="w", now=0, every_seconds=60), 0.2) == 1.0
    assert grace(Schedule.made(workflow="w", now=0, every_seconds=2), 1.0) == 1.5
    assert grace(Schedule.made(workflow="w", now=0, every_seconds=1), 1.0) == 0.5


def test_a_ticks_run_id_is_a_run_id_and_the_same_for_everyone() -> None:
    made = Schedule.made(workflow="w", now=0, every_seconds=5)
    run_id = tick_run_id(made.id, 1_765_000_000)
    assert validate_run_id(run_id) == run_id == f"run_{made.id}_1765000000"


def test_stored_and_shown() -> None:
    made = Schedule.made(
        workflow="w",
        now=1000,
        input={"a": 1},
        cron="0  9 * * 1-5",
        time_zone="Europe/Paris",
        catch_up="skip",
    )
    assert made.cron == "0 9 * * 1-5"
    assert Schedule.from_json(made.to_json()) == made
    view = schedule_view(made, made.created_at)
    assert view["createdAt"] == "1970-01-01T00:16:40Z" and view["catchUp"] == "skip"
    assert view["nextTick"] == "1970-01-01T08:00:00Z"  # 09:00 in Paris (winter)
