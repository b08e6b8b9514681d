"""Schedules on a real fleet (Redis, ``weed mini``, ``little scheduler`` processes, a worker,
``little serve``): one run per tick with two schedulers, one of them SIGKILLed between ticks;
ticks missed while no scheduler ran, started once or skipped by the schedule's ``catchUp``;
bad schedules refused over HTTP (problems naming the field) and by ``little schedules``."""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

import pytest

from little_dist.fleet.schedule_specs import tick_run_id
from little_dist.world.base import World
from tests.fleet_processes import FleetEnv, FleetProcess, fleet_env, start_scheduler, start_worker
from tests.http_service import APP, Served, is_problem, little, start_serve, token_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

READY = "scheduler-started"
STEPS = {"workflow": "http.steps", "input": {"sleep": 0}}
SLEEP = '{"sleep": 0}'


def _configure(fleet: FleetEnv) -> None:
    fleet.env.update({"LITTLE_SCHEDULE_POLL": "0.2", "LITTLE_APP": APP})


def _token(fleet: FleetEnv, *scopes: str) -> str:
    redis, store = token_store(fleet)
    try:
        return store.create(list(scopes)).token
    finally:
        redis.close()


def _runs_of(world: World, schedule_id: str) -> set[str]:
    prefix = f"run_{schedule_id}_"
    return {run for run in world.list_run_ids() if run.startswith(prefix)}


def _ticks(runs: set[str]) -> list[int]:
    return sorted(int(run.rsplit("_", 1)[1]) for run in runs)


def _tick_lines(process: FleetProcess, schedule_id: str) -> list[dict[str, Any]]:
    lines = []
    for line in process.output().splitlines():
        if '"schedule-tick"' in line and schedule_id in line:
            lines.append(json.loads(line))
    return lines


def _epoch(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


def _wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


def test_two_schedulers_start_one_run_per_tick_and_one_may_die(fleet_env: FleetEnv) -> None:
    _configure(fleet_env)
    first = start_scheduler(fleet_env, name="sched-a", ready_pattern=READY)
    second = start_scheduler(fleet_env, name="sched-b", ready_pattern=READY)
    start_worker(fleet_env, app=APP)
    made = little(
        fleet_env, "schedules", "create", "http.steps", "--every", "1", "--input", '{"sleep": 0}'
    )
    assert made.returncode == 0, made.stderr
    schedule_id = made.stdout.strip()
    listed = little(fleet_env, "schedules", "list", "--json")
    (shown,) = json.loads(listed.stdout)
    assert shown["id"] == schedule_id and shown["everySeconds"] == 1
    created = _epoch(shown["createdAt"])
    world = fleet_env.world()
    _wait(lambda: len(_runs_of(world, schedule_id)) >= 3, 30, "three ticks' runs")
    first.kill()  # SIGKILL, between (or during) ticks
    killed_at = time.time()
    _wait(
        lambda: len([t for t in _ticks(_runs_of(world, schedule_id)) if t > killed_at + 1]) >= 3,
        30,
        "three more ticks after the kill",
    )
    deleted = little(fleet_env, "schedules", "delete", schedule_id)
    assert deleted.returncode == 0 and deleted.stdout.strip() == f"deleted {schedule_id}"
    stopped_at = time.time()
    time.sleep(1.5)

    runs = _runs_of(world, schedule_id)
    ticks = _ticks(runs)
    # Every tick from the first to the last one before the delete has exactly its run (the
    # last second before the delete may or may not have been started), none after.
    assert ticks[0] == created + 1
    assert ticks == list(range(ticks[0], ticks[-1] + 1)), ticks
    assert ticks[-1] >= int(stopped_at) - 1 and ticks[-1] <= stopped_at
    assert runs == {tick_run_id(schedule_id, tick) for tick in ticks}
    # One start per run (the idempotent submission: never a second RunStarted).
    for run in runs:
        assert [e.type for e in world.list_events(run)].count("RunStarted") == 1
    # Each tick moved on once, by one of the schedulers (the survivor after the kill).
    moved = [
        line["tick"]
        for process in (first, second)
        for line in _tick_lines(process, schedule_id)
        if line["moved"]
    ]
    assert sorted(moved) == ticks, (moved, ticks)
    after_kill = {line["tick"] for line in _tick_lines(second, schedule_id)}
    assert {tick for tick in ticks if tick > killed_at + 1} <= after_kill
    # The runs ran (the worker took them).
    done = _wait(
        lambda: all(world.list_events(run)[-1].type == "RunCompleted" for run in runs),
        60,
        "the scheduled runs to complete",
    )
    assert done
    assert json.loads(little(fleet_env, "schedules", "list", "--json").stdout) == []


#: The missed-ticks schedule's period (seconds): long enough that a scheduler started 1.3 s
#: after the second missed tick is up and has caught up before the third, on a loaded machine.
EVERY = 7


def _missed_ticks(fleet: FleetEnv, served: Served, catch_up: str) -> tuple[str, int, FleetProcess]:
    """A schedule every :data:`EVERY` seconds made while no scheduler runs; a scheduler
    started once two ticks were missed and the newest is late (more than its grace, 1 s,
    behind)."""
    token = _token(fleet, "schedules:write", "runs:read")
    with served.client(token) as http:
        answer = http.post(
            "/v1/schedules", json={**STEPS, "everySeconds": EVERY, "catchUp": catch_up}
        )
        assert answer.status_code == 201, answer.text
        body = answer.json()
        assert answer.headers["location"] == f"/v1/schedules/{body['id']}"
        (listed,) = http.get("/v1/schedules").json()["schedules"]
        assert listed == body
    created = _epoch(body["createdAt"])
    time.sleep(max(0.0, created + 2 * EVERY + 1.3 - time.time()))  # two ticks missed
    process = start_scheduler(fleet, name=f"sched-{catch_up}", ready_pattern=READY)
    return body["id"], created, process


def test_missed_ticks_are_started_once_when_the_fleet_is_back(fleet_env: FleetEnv) -> None:
    _configure(fleet_env)
    served = start_serve(fleet_env)
    schedule_id, created, scheduler = _missed_ticks(fleet_env, served, "once")
    world = fleet_env.world()
    _wait(lambda: _runs_of(world, schedule_id), 10, "the caught-up run")
    assert time.time() < created + 3 * EVERY, "the test fell behind its clock"
    assert _ticks(_runs_of(world, schedule_id)) == [created + 2 * EVERY]  # the newest missed, once
    _wait(lambda: len(_runs_of(world, schedule_id)) == 2, 10, "the next tick's run")
    assert _ticks(_runs_of(world, schedule_id)) == [created + 2 * EVERY, created + 3 * EVERY]
    lines = _wait(
        lambda: _tick_lines(scheduler, schedule_id)[1:] and _tick_lines(scheduler, schedule_id),
        10,
        "its log line",
    )
    assert lines[0]["outcome"] == "started" and lines[0]["late"] and lines[0]["missed"]
    assert lines[1]["outcome"] == "started" and not lines[1]["late"]


def test_missed_ticks_are_skipped_by_a_skip_schedule(fleet_env: FleetEnv) -> None:
    _configure(fleet_env)
    served = start_serve(fleet_env)
    schedule_id, created, scheduler = _missed_ticks(fleet_env, served, "skip")
    world = fleet_env.world()
    _wait(lambda: _tick_lines(scheduler, schedule_id), 10, "the skipped tick")
    assert _runs_of(world, schedule_id) == set()
    _wait(lambda: _runs_of(world, schedule_id), 10, "the next tick's run")
    assert _ticks(_runs_of(world, schedule_id)) == [created + 3 * EVERY]
    lines = _wait(
        lambda: _tick_lines(scheduler, schedule_id)[1:] and _tick_lines(scheduler, schedule_id),
        10,
        "its log line",
    )
    assert (lines[0]["tick"], lines[0]["outcome"], lines[0]["run"]) == (
        created + 2 * EVERY,
        "skipped",
        None,
    )
    assert (lines[1]["tick"], lines[1]["outcome"]) == (created + 3 * EVERY, "started")


def test_bad_schedules_are_refused_naming_the_field(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    writer = _token(fleet_env, "schedules:write")
    reader = _token(fleet_env, "runs:read")
    with served.client(writer) as http:
        for fields, pointer, why in [
            ({"cron": "61 * * * *"}, "/cron", "not a valid cron expression"),
            ({"cron": "0 9 * * *", "timeZone": "Mars/Olympus"}, "/timeZone", "unknown time zone"),
            ({"cron": "0 0 31 2 *"}, "/cron", "never fires"),
            ({}, "/cron", "give either cron or everySeconds"),
            ({"everySeconds": 5, "callbackUrl": "ftp://x/y"}, "/callbackUrl", "http or https"),
            ({"everySeconds": 0}, "/everySeconds", "greater than or equal to 1"),
            ({"everySeconds": 5, "catchUp": "all"}, "/catchUp", "'once' or 'skip'"),
        ]:
            body = is_problem(http.post("/v1/schedules", json={**STEPS, **fields}), 422)
            assert body["errors"][0]["pointer"] == pointer, body
            assert why in body["errors"][0]["detail"], body
        unknown = http.post("/v1/schedules", json={"workflow": "no.such", "everySeconds": 5})
        assert is_problem(unknown, 422)["errors"][0]["pointer"] == "/workflow"
        bad_input = http.post("/v1/schedules", json={"workflow": "http.steps", "everySeconds": 5})
        assert is_problem(bad_input, 422)["errors"][0]["pointer"] == "/input"
        assert "sch_" in is_problem(http.delete("/v1/schedules/sch_nope"), 400)["detail"]
        missing = http.delete("/v1/schedules/sch_0123456789abcdef")
        assert "Schedule not found" in is_problem(missing, 404)["detail"]
        is_problem(http.get("/v1/schedules"), 403)  # (listing needs runs:read)
    with served.client(reader) as http:
        assert http.get("/v1/schedules").json() == {"schedules": []}
        is_problem(http.post("/v1/schedules", json={**STEPS, "everySeconds": 5}), 403)
    with served.client() as http:
        is_problem(http.get("/v1/schedules"), 401)
    for args, line in [
        (
            ["--every", "5", "--input", "{}"],
            "little schedules: workflow 'http.steps': invalid input: input: 'sleep' is a "
            "required property",
        ),
        (
            ["--cron", "61 * * * *", "--input", SLEEP],
            "little schedules: cron: not a valid cron expression: '61 * * * *'",
        ),
        (
            ["--cron", "0 9 * * *", "--time-zone", "Mars/Olympus", "--input", SLEEP],
            "little schedules: timeZone: unknown time zone 'Mars/Olympus' (an IANA name "
            "such as 'Europe/Paris')",
        ),
        (
            ["--every", "5", "--callback-url", "file:///etc/passwd", "--input", SLEEP],
            "little schedules: callbackUrl: the scheme must be http or https, got 'file' "
            "(a callback is an HTTP POST)",
        ),
    ]:
        done = little(fleet_env, "schedules", "create", "http.steps", "--app", APP, *args)
        assert done.returncode == 1, done.stderr
        assert done.stderr.strip().splitlines() == [line]
    usage = little(fleet_env, "schedules", "create", "http.steps", "--every", "soon")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    gone = little(fleet_env, "schedules", "delete", "sch_0123456789abcdef")
    assert gone.returncode == 1
    assert gone.stderr.strip() == "little schedules: no schedule sch_0123456789abcdef"
