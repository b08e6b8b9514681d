"""Deadlines and cancellation on the real fleet (Redis, S3, ``little worker`` and
``little scheduler`` processes; the scripted provider's calls take 30 s).

* A cancel while a worker's model call is in flight: the run ends at once, and the worker's
  attempt stops waiting for the call (told by the run's end announcement): its record of
  the interrupted call, with what it is taken to have spent, is in the run's late record
  seconds later, not when the call would have answered.
* A deadline with no worker at all: the scheduler's sweeps end the run, ``deadline_exceeded``.
* A parent cancelled ends its children: ``tests/test_subruns_fleet.py``
  (``test_cancelling_a_parent_cancels_its_running_children``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from little_dist.report.model import calls_usage
from little_dist.testing import ScriptedModel
from tests.cancel_app import REPLY, flaky, planned, slow
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.test_cli_fleet import _ok, little

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

LONG = 30.0


def _slow_script(tmp_path: Path) -> Path:
    script = ScriptedModel(latency=LONG)
    script.otherwise().reply_text(REPLY, times=None)
    return script.save(tmp_path / "script.json")


def _until(check: Any, what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.05)


def test_a_cancel_interrupts_the_model_call_a_worker_has_in_flight(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    fleet_env.env.update(
        {"LITTLE_APP": "tests.cancel_app", "LITTLE_SCRIPTED_MODEL": str(_slow_script(tmp_path))}
    )
    start_worker(fleet_env, app="tests.cancel_app", concurrency=2)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    world = client.world
    run_id = client.submit(slow, {"item": "a"})
    _until(
        lambda: any(e.type == "harness.model.called" for e in world.list_events(run_id)),
        "the model call",
        60,
    )
    cancelled_at = time.monotonic()
    assert client.cancel(run_id, reason="enough")
    state = client.wait(run_id, timeout=20)
    assert state.error["causeCode"] == "cancelled"

    def interrupted() -> list[Any]:
        return [e for e in world.late_events(run_id) if e.type == "harness.model.failed"]

    (call,) = _until(interrupted, "the interrupted call's record", 15)
    took = time.monotonic() - cancelled_at
    assert took < 10  # the worker did not wait out the 30 s call
    error = call.payload["error"]
    assert error["causeCode"] == "cancelled" and error["interrupted"] is True
    spent = calls_usage([call])
    assert spent.input_tokens == error["usage"]["inputTokens"] > 0
    # `little status` counts it (the run's late record) with the run's calls.
    shown = json.loads(_ok(little(fleet_env, "status", run_id, "--json"), 1))
    assert shown["lateCalls"] == 1


def test_a_deadline_ends_a_run_no_worker_is_running(fleet_env: FleetEnv) -> None:
    start_scheduler(fleet_env)  # no worker at all: nothing runs the runs' steps
    client = fleet_env.client()
    by_client = client.submit(slow, {"item": "a"}, deadline="2s")
    many = client.submit_many(slow, [{"item": "b"}], deadline="2s", max_attempts=2)
    submitted = little(
        fleet_env,
        "submit",
        "tests.cancel_app:slow",
        "--input",
        json.dumps({"item": "c"}),
        "--deadline",
        "2s",
        "--json",
    )
    by_cli = json.loads(_ok(submitted))["runId"]
    unplanned = client.submit(planned, {"item": "d"}, deadline="2s")
    state = client.wait(unplanned, timeout=30)  # ended though no planner ever took it
    assert state.error["causeCode"] == "deadline_exceeded", state.error
    for run_id in [by_client, *many, by_cli]:
        state = client.wait(run_id, timeout=30)
        assert state.status == "failed"
        assert state.error["causeCode"] == "deadline_exceeded", state.error
        assert state.error["message"].startswith("Run passed its deadline 20")
        events = client.world.list_events(run_id)
        (limits,) = [e for e in events if e.type == "little.run.limits"]
        assert limits.payload["causeCode"] == "deadline_exceeded"
        (request,) = [e for e in events if e.type == "little.run.cancel_requested"]
        assert request.payload["requestedBy"] == "deadline"
        assert not [e for e in events if e.type == "StepAttemptStarted"]
    shown = json.loads(_ok(little(fleet_env, "status", by_cli, "--json"), 1))
    assert shown["deadline"]["causeCode"] == "deadline_exceeded"
    assert shown["deadline"]["at"].endswith("Z")
    text = _ok(little(fleet_env, "status", by_cli), 1)
    assert f"deadline  {shown['deadline']['at']} (deadline_exceeded)" in text
    (limits,) = [e for e in client.world.list_events(many[0]) if e.type == "little.run.limits"]
    assert limits.payload["maxAttempts"] == 2


def test_a_deadline_interrupts_a_workers_call_and_max_attempts_retries_on_the_fleet(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = ScriptedModel()
    # The flaky run: its first call fails (retriable), its second answers; others are slow.
    script.fail(run="run_flaky_on_fleet", times=1, error="rate_limit")
    script.on(run="run_flaky_on_fleet").reply_text(REPLY, times=None)
    script.otherwise().reply_text(REPLY, times=None, latency=LONG)
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.cancel_app",
            "LITTLE_SCRIPTED_MODEL": str(script.save(tmp_path / "script.json")),
        }
    )
    start_worker(fleet_env, app="tests.cancel_app", concurrency=2)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    world = client.world
    timed_out = client.submit(slow, {"item": "a"}, timeout="4s")
    flaky_run = client.submit(flaky, {"item": "b"}, run_id="run_flaky_on_fleet", max_attempts=2)
    state = client.wait(timed_out, timeout=30)
    assert state.error["causeCode"] == "timeout", state.error
    assert state.error["message"] == "Run exceeded its timeout of 4000 ms."

    def interrupted() -> list[Any]:
        return [e for e in world.late_events(timed_out) if e.type == "harness.model.failed"]

    (call,) = _until(interrupted, "the interrupted call's record", 15)
    assert call.payload["error"]["interrupted"] is True
    done = client.wait(flaky_run, timeout=30)
    assert done.status == "completed" and done.output == REPLY
    attempts = [e for e in world.list_events(flaky_run) if e.type == "StepAttemptStarted"]
    assert len(attempts) == 2  # the step has no retry of its own: the run's max_attempts


def test_a_parents_deadline_ends_its_running_children(fleet_env: FleetEnv) -> None:
    from tests.subrun_fleet_app import boss
    from tests.test_subruns_fleet import APP, _check_children, _configure, _ended_runs, _types

    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=4)
    client = fleet_env.client()
    # Three children whose first step takes 20 s: running when the parent's deadline passes.
    parent = client.submit(boss, {"scenario": "late"}, deadline="8s")
    state = client.wait(parent, timeout=60)
    assert state.error["causeCode"] == "deadline_exceeded", state.error
    children = _check_children(fleet_env, parent, 3)
    _until(lambda: _ended_runs(fleet_env, list(children)), "the children's ends", 60)
    for child in children:
        events = client.world.list_events(child)
        (cancel,) = _types(events, "little.run.cancel_requested")
        assert cancel.payload["parentRunId"] == parent
        (end,) = _types(events, "RunFailed")
        assert end.payload["error"]["causeCode"] == "cancelled", child
