"""The planner: draft -> validate -> repair -> register, recorded on the run; and reuse."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from little_dist import define_workflow, model, skill
from little_dist.api import run_workflow
from little_dist.authoring import RunFailedError, WorkflowDefinition
from little_dist.canonical import sha256_digest
from little_dist.compiler import WorkflowVersion
from little_dist.compiler.lock import concrete_input_structure
from little_dist.harness.types import DelegateToDefault, PlanResult
from little_dist.planner import (
    PlannerError,
    binding_findings,
    input_structure_compatible,
    orchestration_request,
    resolve_version,
    synthesize_simple_lwir,
)
from little_dist.testing import ScriptedModel, Usage
from little_dist.tools import tool
from little_dist.world.in_process import MemoryWorld

INPUT = {"ticketId": "T-1", "body": "Cannot export invoices."}
TICKET_SCHEMA = {
    "type": "object",
    "required": ["ticketId", "body"],
    "additionalProperties": False,
    "properties": {"ticketId": {"type": "string"}, "body": {"type": "string"}},
}
SUMMARY_SCHEMA = {
    "type": "object",
    "required": ["summary"],
    "additionalProperties": False,
    "properties": {"summary": {"type": "string"}},
}


@tool
def summarize(ticketId: str, body: str) -> dict[str, str]:
    """Summarize a ticket."""
    return {"summary": f"{ticketId}: {body}"}


def ticket_workflow(**overrides: Any) -> WorkflowDefinition:
    options: dict[str, Any] = {
        "id": "support.summarize",
        "description": "Summarize a support ticket.",
        "input": TICKET_SCHEMA,
        "output": SUMMARY_SCHEMA,
        "model": model("scripted/planner", id="fast", pricing="openai/gpt-4o-mini"),
        "tools": [summarize],
    }
    options.update(overrides)
    return define_workflow(**options)


def valid_lwir(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "support.summarize", "version": "0.1.0"},
        "input": {"schema": TICKET_SCHEMA},
        "output": {"schema": SUMMARY_SCHEMA},
        "permissions": {"models": [], "tools": ["summarize"], "secrets": [], "network": []},
        "steps": [
            {
                "id": "summarize",
                "uses": "tool.call",
                "with": {
                    "tool": "summarize",
                    "args": {"ticketId": "{{ input.ticketId }}", "body": "{{ input.body }}"},
                },
                "output": {"mode": "object", "schema": SUMMARY_SCHEMA},
            }
        ],
    }
    doc.update(changes)
    return doc


def invalid_lwir() -> dict[str, Any]:
    # Valid LWIR, but it names a model slot the workflow does not have: a binding finding.
    doc = valid_lwir()
    doc["permissions"] = {**doc["permissions"], "models": ["gpt-5"]}
    return doc


def planner_usage() -> Usage:
    return Usage(input=2400, output=600, cached=1800)


def types_of(world: MemoryWorld, run_id: str) -> list[str]:
    return [event.type for event in world.list_events(run_id)]


def payload_of(world: MemoryWorld, run_id: str, event_type: str) -> list[dict[str, Any]]:
    return [e.payload for e in world.list_events(run_id) if e.type == event_type]


def plan(world: MemoryWorld, run_id: str, wf: WorkflowDefinition, value: Any = INPUT) -> Any:
    data = wf.validate_input(value)
    return resolve_version(world, run_id, wf, data, capabilities=wf.capabilities())


# -- draft, validate, repair ------------------------------------------------------------------


def test_invalid_first_draft_gets_its_findings_back_and_the_second_registers(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    wf = ticket_workflow()
    rule = scripted_model.on(step="planner")
    rule.reply_json(invalid_lwir(), usage=planner_usage())
    rule.reply_text("```json\n" + json.dumps(valid_lwir()) + "\n```", usage=planner_usage())

    version = plan(world, "run_plan_repair", wf)

    assert isinstance(version, WorkflowVersion)
    assert types_of(world, "run_plan_repair") == [
        "OrchestrationRequested",
        "PlannerStarted",
        "harness.session.started",
        "harness.model.called",
        "harness.model.responded",
        "harness.session.completed",
        "PlannerDraftedWorkflow",
        "WorkflowValidationFailed",
        "PlannerStarted",
        "harness.session.started",
        "harness.model.called",
        "harness.model.responded",
        "harness.session.completed",
        "PlannerDraftedWorkflow",
        "WorkflowValidationSucceeded",
    ]
    started = payload_of(world, "run_plan_repair", "PlannerStarted")
    assert [(p["revision"], p["repair"]) for p in started] == [(1, False), (2, True)]
    drafted = payload_of(world, "run_plan_repair", "PlannerDraftedWorkflow")
    assert [p["valid"] for p in drafted] == [False, True]
    assert drafted[1]["lwir"] == valid_lwir()
    assert drafted[1]["lwirHash"] == sha256_digest(valid_lwir())
    (failed,) = payload_of(world, "run_plan_repair", "WorkflowValidationFailed")
    assert {(f["code"], f["path"]) for f in failed["findings"]} == {
        ("binding.model_disallowed", "$.permissions.models[0]")
    }
    (succeeded,) = payload_of(world, "run_plan_repair", "WorkflowValidationSucceeded")
    assert succeeded["workflowVersionId"] == version.id
    assert succeeded["lwirVersionId"] == version.lwir_version_id
    assert succeeded["validationHash"] == version.validation_hash
    # The findings went back to the planner, one line each, with the previous draft.
    first, second = scripted_model.calls_for(step="planner")
    system = second.messages[0]["content"]
    assert "- error binding.model_disallowed at $.permissions.models[0]:" in system
    assert "binding.model_disallowed" not in first.messages[0]["content"]
    # Registered, bound to the definition, indexed for reuse.
    assert world.get_version(version.id) == version.to_json()
    assert version.lock["workflowDefinitionHash"] == wf.definition_hash()
    assert version.lock["plannedInputStructure"] == concrete_input_structure(INPUT)
    assert world.indexed_versions(wf.definition_hash()) == [version.id]
    scripted_model.assert_all_used()


def test_planner_model_calls_are_recorded_and_priced_without_a_step(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    scripted_model.on(step="planner").reply_json(valid_lwir(), usage=planner_usage())
    plan(world, "run_plan_usage", ticket_workflow())
    (responded,) = payload_of(world, "run_plan_usage", "harness.model.responded")
    assert "stepPath" not in responded
    assert responded["model"] == {"provider": "openai", "modelId": "gpt-4o-mini"}
    assert responded["response"]["usage"] == {
        "inputTokens": 2400,
        "outputTokens": 600,
        "cachedInputTokens": 1800,
        "reasoningTokens": 0,
    }
    from little_dist.run_state import materialize_run_state

    state = materialize_run_state(world.list_events("run_plan_usage"))
    assert state.usage.input_tokens == 2400
    assert state.usage.cost_usd is not None and state.usage.cost_usd > 0
    assert dict(state.steps) == {}


def test_exhausted_revisions_fail_the_run_with_a_clear_error(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    wf = ticket_workflow(max_revisions=2)
    scripted_model.on(step="planner").reply_json(invalid_lwir(), times=None)
    with pytest.raises(RunFailedError) as caught:
        run_workflow(wf, INPUT, world=world, run_id="run_plan_exhausted")
    error = caught.value
    assert error.cause_code == "planner_validation_exhausted"
    assert error.workflow_version_id == "uncompiled"
    assert "within 2 revision(s)" in str(error)
    assert "binding.model_disallowed" in str(error)
    assert types_of(world, "run_plan_exhausted")[-2:] == ["RunStarted", "RunFailed"]
    assert types_of(world, "run_plan_exhausted").count("WorkflowValidationFailed") == 2
    assert len(scripted_model.calls_for(step="planner")) == 2
    assert world.indexed_versions(wf.definition_hash()) == []
    # The recorded failure is returned again without planning again.
    with pytest.raises(RunFailedError):
        run_workflow(wf, INPUT, world=world, run_id="run_plan_exhausted")
    assert len(scripted_model.calls_for(step="planner")) == 2


def test_a_toolless_workflow_falls_back_to_the_single_step_floor(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    wf = ticket_workflow(tools=[], max_revisions=1)
    scripted_model.on(step="planner").reply_text("I think you should summarize it.")
    version = plan(world, "run_plan_floor", wf)
    assert version is not None
    assert [step["id"] for step in version.lwir["steps"]] == ["generate"]
    drafted = payload_of(world, "run_plan_floor", "PlannerDraftedWorkflow")
    assert [(p["revision"], p["valid"]) for p in drafted] == [(1, False), (2, True)]
    assert "lwir" not in drafted[0]  # the reply was not a JSON object


def test_a_crashed_planning_session_resumes_without_paying_twice(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    wf = ticket_workflow()
    rule = scripted_model.on(step="planner")
    rule.reply_json(invalid_lwir())
    rule.raise_error("server")
    with pytest.raises(PlannerError):
        plan(world, "run_plan_resume", wf)
    assert types_of(world, "run_plan_resume")[-2:] == [
        "harness.model.failed",
        "harness.session.failed",
    ]
    scripted_model.on(step="planner").reply_json(valid_lwir())
    version = plan(world, "run_plan_resume", wf)
    assert version is not None
    # Revision 1's reply came from the log; only revision 2 was asked again.
    assert len(scripted_model.calls_for(step="planner")) == 3
    drafted = payload_of(world, "run_plan_resume", "PlannerDraftedWorkflow")
    assert [p["revision"] for p in drafted] == [1, 2]


# -- reuse ------------------------------------------------------------------------------------


def test_a_fixed_plan_needs_no_model_and_is_never_reused() -> None:
    world = MemoryWorld()
    wf = ticket_workflow(plan=valid_lwir())
    first = plan(world, "run_fixed_1", wf)
    second = plan(world, "run_fixed_2", wf)
    assert first is not None and second is not None
    assert first.lwir_hash == second.lwir_hash == sha256_digest(valid_lwir())
    assert "harness.model.called" not in types_of(world, "run_fixed_1")
    assert "PlannerReuseDecisionRecorded" not in types_of(world, "run_fixed_2")
    assert world.indexed_versions(wf.definition_hash()) == []


def _recorded(world: MemoryWorld, run_id: str) -> list[tuple[str, str | None, Any]]:
    return [(e.type, e.occurrence_id, e.payload) for e in world.list_events(run_id)]


def test_a_submitted_fixed_plan_records_what_the_planning_session_records_in_one_append(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from little_dist.fleet.client import submit_run
    from little_dist.planner import fixed

    world = MemoryWorld()
    wf = ticket_workflow(plan=valid_lwir())
    data = wf.validate_input(INPUT)
    # The slow path: the planning session, then the run's start.
    slow = plan(world, "run_fixed_slow", wf)
    assert slow is not None
    from little_dist.fleet.run_starts import record_start as _start

    _start(world, "run_fixed_slow", slow, data)
    appends: list[int] = []
    real_append_batch = world.append_batch

    def counting(run_id: str, events: Any, **options: Any) -> Any:
        appends.append(len(events))
        return real_append_batch(run_id, events, **options)

    monkeypatch.setattr(world, "append_batch", counting)
    submit_run(world, wf, INPUT, run_id="run_fixed_fast")
    assert _recorded(world, "run_fixed_fast") == _recorded(world, "run_fixed_slow")
    assert appends == [6]  # planning + start, one append
    # A second run validates and registers the LWIR no more (once per definition).
    compiled: list[Any] = []
    monkeypatch.setattr(fixed, "register_lwir", lambda *a, **k: compiled.append(a))
    submit_run(world, wf, INPUT, run_id="run_fixed_again")
    assert _recorded(world, "run_fixed_again") == _recorded(world, "run_fixed_slow")
    # Another input is planned for itself (its own request and version), the LWIR's
    # validation not done again either.
    other = {"ticketId": "T-2", "body": "Another one."}
    submit_run(world, wf, other, run_id="run_fixed_other")
    assert compiled == []
    started = payload_of(world, "run_fixed_other", "RunStarted")[0]
    assert started["input"] == other
    assert started["workflowVersionId"] != slow.id


def test_a_submitted_invalid_fixed_plan_takes_the_slow_path_and_fails_the_run() -> None:
    from little_dist.fleet.client import submit_run

    world = MemoryWorld()
    wf = ticket_workflow(plan=valid_lwir(metadata={"name": "some.other.workflow"}))
    for run_id in ("run_fixed_bad_1", "run_fixed_bad_2"):  # the second from the memo
        submit_run(world, wf, INPUT, run_id=run_id)
        assert types_of(world, run_id)[-3:] == [
            "WorkflowValidationFailed",
            "RunStarted",
            "RunFailed",
        ]


def test_an_invalid_fixed_plan_fails_the_run_naming_the_findings() -> None:
    world = MemoryWorld()
    bad = valid_lwir(metadata={"name": "some.other.workflow"})
    wf = ticket_workflow(plan=bad)
    with pytest.raises(RunFailedError) as caught:
        run_workflow(wf, INPUT, world=world, run_id="run_fixed_bad")
    assert caught.value.cause_code == "planner_validation_exhausted"
    assert "binding.workflow_name_mismatch" in str(caught.value)


# -- custom planner harnesses -------------------------------------------------------------------


class _Planner:
    harness_id = "tests.customPlanner@1"

    def __init__(self, result: Any) -> None:
        self.result = result
        self.tasks: list[Any] = []

    def run(self, task: Any, ctx: Any) -> Any:
        self.tasks.append(task)
        return self.result


def test_a_custom_planner_harness_drafts_and_can_delegate(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    custom = _Planner(PlanResult(lwir=valid_lwir()))
    wf = ticket_workflow(harness={"planner": custom})
    version = plan(world, "run_custom_planner", wf)
    assert version is not None and scripted_model.calls == []
    (task,) = custom.tasks
    assert task.kind == "plan"
    assert task.input == INPUT
    assert task.workflow_snapshot["workflowDefinitionHash"] == wf.definition_hash()
    assert "summarize" in task.system_message

    delegating = _Planner(DelegateToDefault())
    scripted_model.on(step="planner").reply_json(valid_lwir())
    version = plan(MemoryWorld(), "run_delegating_planner", ticket_workflow(harness=delegating))
    assert version is not None and len(scripted_model.calls) == 1


def test_the_planner_prompt_carries_goal_capabilities_skills_and_input(
    scripted_model: ScriptedModel,
) -> None:
    wf = ticket_workflow(
        skills=[skill("tone", "House style", "Be brief.")], system="Prefer tool steps."
    )
    scripted_model.on(step="planner").reply_json(valid_lwir())
    plan(MemoryWorld(), "run_prompt", wf)
    (call,) = scripted_model.calls
    system, user = call.messages[0]["content"], call.messages[1]["content"]
    assert "Prefer tool steps." in system
    assert "## tone\nHouse style\nBe brief." in system
    assert "- model slots (set as a step's with.model): fast" in system
    assert "summarize: Summarize a ticket." in system
    assert json.loads(user)["input"] == INPUT
    assert json.loads(user)["goal"] == "Summarize a support ticket."


# -- the pure parts -----------------------------------------------------------------------------


def test_binding_findings_follow_upstream() -> None:
    wf = ticket_workflow()
    request = orchestration_request(wf, INPUT)
    assert binding_findings(valid_lwir(), request) == []
    doc = copy.deepcopy(valid_lwir())
    doc["metadata"]["name"] = "x"
    doc["output"]["schema"] = {"type": "object"}
    doc["steps"][0]["with"]["tool"] = "delete_everything"
    codes = {(f.code, f.path) for f in binding_findings(doc, request)}
    assert codes == {
        ("binding.workflow_name_mismatch", "$.metadata.name"),
        ("binding.output_schema_mismatch", "$.output.schema"),
        ("binding.tool_disallowed", "$.steps[0].with.tool"),
    }
    assert [f.code for f in binding_findings("not json", request)] == ["binding.invalid"]


def test_orchestration_request_ids_are_deterministic_and_input_bound() -> None:
    wf = ticket_workflow()
    first = orchestration_request(wf, INPUT)
    assert first.request_id == orchestration_request(ticket_workflow(), INPUT).request_id
    assert first.request_id.startswith("orq_") and len(first.request_id) == 20
    other = orchestration_request(wf, {**INPUT, "body": "x"})
    assert other.request_id != first.request_id
    assert (
        other.body["locks"]["plannedInputStructureHash"]
        == (first.body["locks"]["plannedInputStructureHash"])
    )
    assert synthesize_simple_lwir(first) is None  # it has a tool


STRUCTURE_CASES = [
    ("value change", {"a": "x"}, {"a": "y"}, [], True),
    ("kind change", {"a": "x"}, {"a": ["x"]}, [], False),
    ("extra field", {"a": "x"}, {"a": "x", "b": 1}, [], False),
    ("array length class", {"c": [1]}, {"c": [1, 2]}, [], False),
    (
        "adaptive grows",
        {"c": [{"id": "A"}]},
        {"c": [{"id": "B"}, {"id": "C"}]},
        [(("c",), 5)],
        True,
    ),
    (
        "adaptive cap",
        {"c": [{"id": "A"}]},
        {"c": [{"id": str(i)} for i in range(6)]},
        [(("c",), 5)],
        False,
    ),
    (
        "other array still strict",
        {"c": [{"id": "A"}], "t": ["u"]},
        {"c": [{"id": "B"}, {"id": "C"}], "t": ["u", "v"]},
        [(("c",), 100)],
        False,
    ),
    ("adaptive element shape", {"c": [{"id": "A"}]}, {"c": [{"id": 1}]}, [(("c",), 5)], False),
]


@pytest.mark.parametrize(
    ("planned", "run", "adaptive", "expected"),
    [case[1:] for case in STRUCTURE_CASES],
    ids=[case[0] for case in STRUCTURE_CASES],
)
def test_input_structure_compatibility(
    planned: Any, run: Any, adaptive: list[Any], expected: bool
) -> None:
    assert input_structure_compatible(concrete_input_structure(planned), run, adaptive) is expected
