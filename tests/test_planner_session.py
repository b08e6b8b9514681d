"""The planner's session is recorded like every role's: ``harness.session.started`` with its
manifest, then ``.completed`` or ``.failed`` (issue 35, item 8)."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.canonical import sha256_digest
from little_dist.harness.types import DEFAULT_HARNESS_ID, DelegateToDefault, PlanResult
from little_dist.planner import PlannerError
from little_dist.testing import ScriptedModel
from little_dist.world.in_process import MemoryWorld
from tests.test_planner import plan, ticket_workflow, valid_lwir


class _Planner:
    harness_id = "tests.customPlanner@1"

    def __init__(self, result: Any) -> None:
        self.result = result

    def run(self, task: Any, ctx: Any) -> Any:
        return self.result


def _of(world: MemoryWorld, run_id: str, event_type: str) -> list[Any]:
    return [e for e in world.list_events(run_id) if e.type == event_type]


def test_the_default_planner_session_records_its_manifest(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    scripted_model.on(step="planner").reply_json(valid_lwir())

    assert plan(world, "run_planner_session", ticket_workflow()) is not None

    (started,) = _of(world, "run_planner_session", "harness.session.started")
    (completed,) = _of(world, "run_planner_session", "harness.session.completed")
    (requested,) = _of(world, "run_planner_session", "OrchestrationRequested")
    payload = started.payload
    assert started.occurrence_id == "session:planner:1"
    assert (payload["role"], payload["task"], payload["stepPath"], payload["attempt"]) == (
        "planner",
        {"kind": "plan"},
        "planner",
        1,
    )
    manifest = payload["manifest"]
    assert manifest["harnessId"] == DEFAULT_HARNESS_ID
    assert manifest["requestId"] == requested.payload["requestId"]
    assert manifest["requestHash"] == requested.payload["requestHash"]
    assert manifest["workflowDefinitionHash"] == requested.payload["workflowDefinitionHash"]
    assert manifest["capabilityManifestHash"] == requested.payload["capabilityManifestHash"]
    assert {"modelSlotId", "modelHash", "allowedToolsHash", "skillsHash"} <= set(manifest)
    assert payload["manifestHash"] == sha256_digest(manifest)
    assert completed.occurrence_id == "session-end:planner:1"
    assert completed.payload["output"]["result"]["lwir"] == valid_lwir()
    # The session wraps the model call it made.
    types = [e.type for e in world.list_events("run_planner_session")]
    assert types.index("harness.session.started") < types.index("harness.model.called")
    assert types.index("harness.model.responded") < types.index("harness.session.completed")


def test_a_delegating_planner_records_both_sessions(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    scripted_model.on(step="planner").reply_json(valid_lwir())
    wf = ticket_workflow(harness={"planner": _Planner(DelegateToDefault())})

    assert plan(world, "run_planner_delegates", wf) is not None

    sessions = _of(world, "run_planner_delegates", "harness.session.started")
    assert [s.occurrence_id for s in sessions] == [
        "session:planner:1",
        "session:planner:1:default",
    ]
    assert [s.payload["manifest"]["harnessId"] for s in sessions] == [
        "tests.customPlanner@1",
        DEFAULT_HARNESS_ID,
    ]


def test_a_custom_planner_that_answers_nonsense_fails_its_session() -> None:
    world = MemoryWorld()
    wf = ticket_workflow(harness={"planner": _Planner({"kind": "shrug"})})

    with pytest.raises(PlannerError, match=r"harness returned \{'kind': 'shrug'\} for a 'plan'"):
        plan(world, "run_planner_nonsense", wf)

    (failed,) = _of(world, "run_planner_nonsense", "harness.session.failed")
    assert failed.payload["error"]["name"] == "HarnessConfigError"


def test_a_fixed_plan_is_no_session() -> None:
    world = MemoryWorld()
    wf = ticket_workflow(plan=valid_lwir())

    assert plan(world, "run_planner_fixed", wf) is not None

    assert not [e for e in world.list_events("run_planner_fixed") if e.type.startswith("harness.")]


def test_a_custom_planner_session_without_a_model_call(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    wf = ticket_workflow(harness={"planner": _Planner(PlanResult(lwir=valid_lwir()))})

    assert plan(world, "run_planner_custom", wf) is not None

    types = [e.type for e in world.list_events("run_planner_custom") if e.type.startswith("h")]
    assert types == ["harness.session.started", "harness.session.completed"]
    assert scripted_model.calls == []
