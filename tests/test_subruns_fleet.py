"""Sub-runs on the fleet: a parent's step suspends while its children run, holding no slot,
and is resumed by the scheduler when they end (real ``little worker`` / ``little scheduler``
processes, Redis and S3). The app is :mod:`tests.subrun_fleet_app`: a scripted boss model
calls the ``sub.kid`` workflow as a tool; each kid's two steps count their real calls.

Every test checks the same invariants at the end: each child has one ``RunStarted`` and is
linked to the parent, and every child's end reached the parent's tool call."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from little_dist.events import Event
from little_dist.subruns import SUB_RUN_ENDED, SUB_RUN_STARTED
from little_dist.subruns.links import STEP_SUSPENDED
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.subrun_fleet_app import DONE, FX_PREFIX_ENV, SCRIPT_ENV, kid_key

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

APP = "tests.subrun_fleet_app"


def _configure(fleet: FleetEnv) -> None:
    fleet.env.update({SCRIPT_ENV: "1", FX_PREFIX_ENV: fleet.key_prefix, "LITTLE_APP": APP})


def _types(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def _children(fleet: FleetEnv, parent: str) -> dict[str, list[Event]]:
    world = fleet.world()
    started = _types(world.list_events(parent), SUB_RUN_STARTED)
    return {e.payload["childRunId"]: world.list_events(e.payload["childRunId"]) for e in started}


def _wait_until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _count(fleet: FleetEnv, key: str) -> int:
    client = redis.Redis.from_url(fleet.redis_url)
    try:
        value = client.get(key)
    finally:
        client.close()
    return int(value) if value is not None else 0


def _check_children(fleet: FleetEnv, parent: str, expected: int) -> dict[str, list[Event]]:
    """Each child started once, linked to the parent; returns the children's logs."""
    children = _children(fleet, parent)
    assert len(children) == expected
    for child, events in children.items():
        assert child.startswith("run_sub_")
        (started,) = _types(events, "RunStarted")
        assert started.payload["parentRunId"] == parent
        assert started.payload["parentStepPath"] == "boss"
    return children


def _submit(fleet: FleetEnv, scenario: str) -> str:
    from tests.subrun_fleet_app import boss

    return fleet.client().submit(boss, {"scenario": scenario})


def test_a_parent_suspends_while_its_child_runs_and_resumes_with_its_result(
    fleet_env: FleetEnv,
) -> None:
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2)
    parent = _submit(fleet_env, "one")
    state = fleet_env.client().wait(parent, timeout=90)
    assert state.status == "completed", state.error
    assert state.output == DONE
    events = fleet_env.world().list_events(parent)
    kinds = [e.type for e in events]
    # suspended -> (the child ends) -> resumed as attempt 2, which completes the step
    suspended = kinds.index(STEP_SUSPENDED)
    ended = kinds.index(SUB_RUN_ENDED)
    attempts = [e.payload["attempt"] for e in _types(events, "StepAttemptStarted")]
    assert attempts == [1, 2]
    resumed = next(
        i
        for i, e in enumerate(events)
        if e.type == "StepAttemptStarted" and e.payload["attempt"] == 2
    )
    assert suspended < ended < resumed < kinds.index("StepCompleted")
    (children,) = [list(_check_children(fleet_env, parent, 1))]
    assert events[suspended].payload["waitingFor"] == children
    # the child's result is the call's result, taken by the resumed attempt
    (call,) = _types(events, "harness.tool_call.succeeded")
    assert call.payload["attempt"] == 2
    assert call.payload["result"]["status"] == "completed"
    assert call.payload["result"]["output"] == {"n": 1, "step": "second", "value": 2}
    # the model's first turn was not asked again: two model calls in all
    assert len(_types(events, "harness.model.responded")) == 2
    for step in ("first", "second"):
        assert _count(fleet_env, kid_key(fleet_env.key_prefix, 1, step)) == 1
