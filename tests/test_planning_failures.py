"""Planning that fails ends the run, or is tried again; it never leaves it ``planning``.

Before: an error escaping ``little.plan`` was acknowledged and forgotten, nothing recorded
``RunFailed`` and nothing sent ``little.plan`` again, so the run stayed submitted forever
and ``Client.wait`` blocked to its timeout. Real worker and scheduler processes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker

__all__ = ["fleet_env"]

_APP = "tests.planning_app"


def _run_error(state: object) -> dict[str, object]:
    error = state.error  # type: ignore[attr-defined]
    assert isinstance(error, dict), state
    return error


@pytest.mark.integration
def test_a_planner_that_fails_for_good_fails_the_run(fleet_env: FleetEnv) -> None:
    start_worker(fleet_env, app=_APP, roles=("planner", "worker"))
    start_scheduler(fleet_env)
    with fleet_env.client() as client:
        run_id = client.submit("tests.plan-broken", {"ticket": "T-1"})
        state = client.wait(run_id, timeout=60)
    assert state.status == "failed"
    error = _run_error(state)
    assert error["causeCode"] == "planner_failed"
    assert "shrug" in str(error["message"])


@pytest.mark.integration
def test_an_input_the_planned_version_refuses_fails_the_run(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    # Submitted by id from a process that does not know the workflow: the input is only
    # checked once the planner has the version.
    marks = tmp_path / "marks"
    marks.mkdir()
    (marks / "first").touch()  # no slow first plan here
    env = {"LITTLE_TEST_PLAN_MARKS": str(marks)}
    start_worker(fleet_env, app=_APP, roles=("planner", "worker"), env=env)
    start_scheduler(fleet_env)
    with fleet_env.client() as client:
        run_id = client.submit("tests.plan-once-slowly", {"ticket": 42})
        state = client.wait(run_id, timeout=60)
    assert state.status == "failed"
    error = _run_error(state)
    assert error["causeCode"] == "input_schema_error"
    assert "ticket" in str(error["message"])


@pytest.mark.integration
@pytest.mark.slow
def test_a_planner_worker_killed_mid_plan_is_followed_by_another(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"LITTLE_TEST_PLAN_MARKS": str(marks)}
    first = start_worker(fleet_env, app=_APP, roles=("planner",), env=env)
    start_worker(fleet_env, app=_APP, roles=("worker",), env=env)
    start_scheduler(fleet_env)
    with fleet_env.client() as client:
        run_id = client.submit("tests.plan-once-slowly", {"ticket": "T-2"})
        deadline = time.monotonic() + 60
        while not (marks / "first").exists():
            assert time.monotonic() < deadline, first.output()[-3000:]
            time.sleep(0.1)
        first.kill()  # mid-plan: its message was taken, its plan lease expires
        start_worker(fleet_env, app=_APP, roles=("planner",), env=env)
        state = client.wait(run_id, timeout=90)
    assert state.status == "completed", state.error
    assert [p.name for p in marks.iterdir() if p.name.startswith("again-")]


class _Exploding:
    harness_id = "tests.explodingPlanner@1"

    def __init__(self) -> None:
        self.calls = 0

    def run(self, task: object, ctx: object) -> object:
        self.calls += 1
        raise RuntimeError("the planner fell over")


def test_an_unexpected_planning_error_is_tried_again_then_fails_the_run_as_internal() -> None:
    from little_dist import define_workflow
    from little_dist.event_types.engine import PLAN_FAILED_EVENT_TYPE
    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.client import submit_run
    from little_dist.fleet.planning import PLAN_ATTEMPTS
    from little_dist.fleet.worker import WorkerRuntime
    from little_dist.settings import load_settings
    from little_dist.world.in_process import MemoryWorld
    from tests.planning_app import INPUT_SCHEMA

    planner = _Exploding()
    workflow = define_workflow(
        id="tests.plan-exploding",
        input=INPUT_SCHEMA,
        output={"type": "object"},
        model="scripted/unused",
        harness={"planner": planner},
    )
    world = MemoryWorld()
    registry = AppRegistry(workflows={workflow.id: workflow})
    runtime = WorkerRuntime(load_settings({}), world=world, registry=registry)
    run_id = submit_run(world, workflow, {"ticket": "T-3"})
    outcomes = [runtime.plan(run_id) for _ in range(PLAN_ATTEMPTS)]
    assert outcomes == ["retry"] * (PLAN_ATTEMPTS - 1) + ["failed"]
    assert planner.calls == PLAN_ATTEMPTS
    events = world.list_events(run_id)
    noted = [e.payload["attempt"] for e in events if e.type == PLAN_FAILED_EVENT_TYPE]
    assert noted == list(range(1, PLAN_ATTEMPTS))
    assert events[-1].type == "RunFailed"
    assert events[-1].payload["error"]["causeCode"] == "internal"
    assert "fell over" in events[-1].payload["error"]["message"]
    assert runtime.plan(run_id) == "started"  # over: nothing is planned again
