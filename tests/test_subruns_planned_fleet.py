"""Sub-runs on the fleet whose workflow has no fixed ``plan=``: the child is submitted to be
planned (``little.run.submitted`` with its parent link), a planner worker plans it with its
planner model (scripted), it runs, and its end reaches the parent's suspended tool call;
a planning that fails for good is the call's error. The planner's tokens and dollars are
in the child's report and rolled up into the parent's (``little report``).

Real ``little worker`` / ``little scheduler`` processes, Redis and S3; the app is
:mod:`tests.subrun_planned_app`. Before: submitting such a child was refused ("planned by
the fleet's planner: it cannot be started as a sub-run there yet")."""

from __future__ import annotations

import json

import pytest

from little_dist.event_types.engine import SUBMITTED_EVENT_TYPE
from little_dist.events import Event
from little_dist.subruns import SUB_RUN_ENDED
from little_dist.subruns.links import STEP_SUSPENDED
from tests import zygote
from tests.fleet_processes import (
    ROOT,
    FleetEnv,
    fleet_env,
    start_scheduler,
    start_worker,
)
from tests.subrun_fleet_app import FX_PREFIX_ENV, SCRIPT_ENV, kid_key
from tests.subrun_planned_app import DONE, PLANNER_USAGE, SLOW_PLANNER_ENV
from tests.test_subruns_fleet import _children, _count, _types, _wait_until

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

APP = "tests.subrun_planned_app"


def _configure(fleet: FleetEnv) -> None:
    fleet.env.update({SCRIPT_ENV: "1", FX_PREFIX_ENV: fleet.key_prefix, "LITTLE_APP": APP})


def _submit(fleet: FleetEnv, scenario: str) -> str:
    from tests.subrun_planned_app import plan_boss

    return fleet.client().submit(plan_boss, {"scenario": scenario})


def _completed(fleet: FleetEnv, parent: str) -> list[Event]:
    state = fleet.client().wait(parent, timeout=150)
    assert state.status == "completed", state.error
    assert state.output == DONE
    return fleet.world().list_events(parent)


def _only_child(fleet: FleetEnv, parent: str) -> tuple[str, list[Event]]:
    ((child, events),) = _children(fleet, parent).items()
    assert child.startswith("run_sub_")
    # submitted to be planned, with the parent link; started once, with the same link
    (submitted,) = _types(events, SUBMITTED_EVENT_TYPE)
    assert submitted.payload["parent"]["parentRunId"] == parent
    (started,) = _types(events, "RunStarted")
    assert started.payload["parentRunId"] == parent
    assert started.payload["parentStepPath"] == "boss"
    assert started.payload["parentToolCallId"] == submitted.payload["parent"]["parentToolCallId"]
    return child, events


def _report(fleet: FleetEnv, run_id: str) -> dict[str, object]:
    done = zygote.run(["report", run_id, "--json"], cwd=ROOT, env=fleet.env, timeout=60)
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_a_planned_child_is_planned_on_the_fleet_and_its_end_resumes_the_parent(
    fleet_env: FleetEnv,
) -> None:
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2, timeout=120)
    parent = _submit(fleet_env, "planned")
    events = _completed(fleet_env, parent)
    child, child_events = _only_child(fleet_env, parent)
    # planned once by its planner model, then run
    kinds = [e.type for e in child_events]
    assert kinds.count("WorkflowValidationSucceeded") == 1
    assert kinds.index(SUBMITTED_EVENT_TYPE) < kinds.index("PlannerStarted")
    assert kinds.index("WorkflowValidationSucceeded") < kinds.index("RunStarted")
    assert kinds[-1] == "RunCompleted"
    planner_calls = [
        e for e in _types(child_events, "harness.model.responded") if "stepPath" not in e.payload
    ]
    assert len(planner_calls) == 1
    # the parent suspended, heard of the child's end, and its call took the output
    (suspended,) = _types(events, STEP_SUSPENDED)
    assert suspended.payload["waitingFor"] == [child]
    (ended,) = _types(events, SUB_RUN_ENDED)
    assert ended.payload["childRunId"] == child and ended.payload["status"] == "completed"
    (call,) = _types(events, "harness.tool_call.succeeded")
    assert call.payload["result"]["runId"] == child
    assert json.loads(call.payload["result"]["outputSummary"]) == {
        "n": 7,
        "step": "second",
        "value": 14,
    }
    for step in ("first", "second"):
        assert _count(fleet_env, kid_key(fleet_env.key_prefix, 7, step)) == 1
    # the planner's tokens and dollars: in the child's report, rolled up into the parent's
    child_report = _report(fleet_env, child)
    child_total = child_report["total"]
    assert isinstance(child_total, dict)
    assert child_total["inputTokens"] == PLANNER_USAGE[0]
    assert child_total["outputTokens"] == PLANNER_USAGE[1]
    assert child_total["costUsd"] > 0
    parent_report = _report(fleet_env, parent)
    (row,) = parent_report["subRuns"]  # type: ignore[misc]
    assert row["runId"] == child and row["status"] == "completed"
    assert row["usage"]["inputTokens"] == PLANNER_USAGE[0]
    own, whole = parent_report["total"], parent_report["totalWithSubRuns"]
    assert isinstance(own, dict) and isinstance(whole, dict)
    assert whole["inputTokens"] == own["inputTokens"] + PLANNER_USAGE[0]
    assert whole["outputTokens"] == own["outputTokens"] + PLANNER_USAGE[1]
    assert whole["costUsd"] == pytest.approx((own["costUsd"] or 0) + child_total["costUsd"])


def test_a_child_whose_planning_fails_for_good_is_its_tool_calls_result_envelope(
    fleet_env: FleetEnv,
) -> None:
    # A result envelope for the calling model, as upstream (this test pinned a tool error).
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2, timeout=120)
    parent = _submit(fleet_env, "unplannable")
    events = _completed(fleet_env, parent)
    child, child_events = _only_child(fleet_env, parent)
    (end,) = _types(child_events, "RunFailed")
    assert end.payload["error"]["causeCode"] == "planner_failed"
    assert _types(child_events, "StepAttemptStarted") == []
    (ended,) = _types(events, SUB_RUN_ENDED)
    assert ended.payload["childRunId"] == child and ended.payload["status"] == "failed"
    assert _types(events, "harness.tool_call.failed") == []
    (called,) = _types(events, "harness.tool_call.succeeded")
    envelope = called.payload["result"]
    assert envelope["status"] == "failed" and envelope["runId"] == child
    assert "planning failed" in envelope["message"]
    assert "key was revoked" in envelope["message"]
    assert envelope["causeCode"] == "workflow_failed"
    assert "outputSummary" not in envelope  # no step failed: planning did
    assert _count(fleet_env, kid_key(fleet_env.key_prefix, 8, "first")) == 0


def test_a_planned_child_inherits_its_parents_denies(fleet_env: FleetEnv) -> None:
    # The parent denies slow_tool; its child is planned on the fleet: the planner's
    # RunStarted records what the child inherits, as the start of a fixed-plan child does.
    from tests.subrun_planned_app import SLOW_DENY, guarded_plan_boss

    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2, timeout=120)
    parent = fleet_env.client().submit(guarded_plan_boss, {"scenario": "planned"})
    _completed(fleet_env, parent)
    _, child_events = _only_child(fleet_env, parent)
    (submitted,) = _types(child_events, SUBMITTED_EVENT_TYPE)
    assert submitted.payload["parent"]["inherited"] == {"permissionDenies": [SLOW_DENY]}
    (started,) = _types(child_events, "RunStarted")
    assert started.payload["inherited"] == {"permissionDenies": [SLOW_DENY]}
    assert _types(child_events, "RunCompleted")


@pytest.mark.slow
def test_a_planner_worker_killed_mid_plan_neither_plans_nor_starts_the_child_twice(
    fleet_env: FleetEnv,
) -> None:
    # One worker runs the parent and the children's steps; the planner worker answers
    # slowly and is killed while the child's planner model call is in flight. Another
    # planner takes the plan up once the killed one's lease expired.
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, roles=("worker",), concurrency=2, timeout=120)
    slow = start_worker(
        fleet_env, app=APP, roles=("planner",), env={SLOW_PLANNER_ENV: "1"}, timeout=120
    )
    parent = _submit(fleet_env, "planned")

    def planning() -> bool:
        children = _children(fleet_env, parent)
        return any(_types(events, "harness.model.called") for events in children.values())

    _wait_until("the child's planner model called", planning)
    slow.kill()
    start_worker(fleet_env, app=APP, roles=("planner",), timeout=120)
    events = _completed(fleet_env, parent)
    child, child_events = _only_child(fleet_env, parent)
    kinds = [e.type for e in child_events]
    # the killed plan recorded no reply: asked once more, planned and started once
    assert kinds.count("harness.model.responded") == 1
    assert kinds.count("PlannerDraftedWorkflow") == 1
    assert kinds.count("WorkflowValidationSucceeded") == 1
    assert kinds.count("RunStarted") == 1
    completed = [e.payload["stepPath"] for e in _types(child_events, "StepCompleted")]
    assert completed == ["first", "second"]
    for step in ("first", "second"):
        assert _count(fleet_env, kid_key(fleet_env.key_prefix, 7, step)) == 1
    (call,) = _types(events, "harness.tool_call.succeeded")
    assert call.payload["result"]["runId"] == child
    assert len(_types(events, SUB_RUN_ENDED)) == 1
