"""Planner-reviewed reuse (upstream's ``planner-reuse.ts``): a later run shows the planner the
newest completed run's version; the planner reuses it, adapts it or drafts afresh, and the
decision is recorded. ``always_fresh`` skips the review."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.api import run_workflow
from little_dist.canonical import sha256_digest
from little_dist.compiler.lock import concrete_input_structure
from little_dist.errors import InvalidInputError
from little_dist.planner.review import (
    ReuseDecisionError,
    reuse_brief,
    select_reuse_candidates,
    validate_reuse_decision,
)
from little_dist.testing import ScriptedModel
from little_dist.testing.scripted_request import ScriptedRequest
from little_dist.world.in_process import MemoryWorld
from tests.test_planner import (
    INPUT,
    SUMMARY_SCHEMA,
    payload_of,
    ticket_workflow,
    types_of,
    valid_lwir,
)

OTHER = {"ticketId": "T-2", "body": "Cannot import receipts."}
BRIEF = "# Planner Reuse Candidate"


def system_text(request: ScriptedRequest) -> str:
    return "".join(str(m.get("content")) for m in request.messages if m.get("role") == "system")


def reviewing(request: ScriptedRequest) -> bool:
    return BRIEF in system_text(request)


def first_run(world: MemoryWorld, scripted: ScriptedModel, **options: Any) -> Any:
    scripted.on(step="planner", run="run_first").reply_json(valid_lwir())
    return run_workflow(ticket_workflow(**options), INPUT, world=world, run_id="run_first")


def test_the_planner_is_shown_the_candidate_and_reuses_it_unchanged(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model)
    decision = {
        "kind": "reuse_unchanged",
        "workflowVersionId": first.workflow_version_id,
        "rationale": "Same workflow, same input shape.",
    }
    scripted_model.on(step="planner", match=reviewing).reply_json(decision)

    second = run_workflow(ticket_workflow(), OTHER, world=world, run_id="run_second")

    assert second.status == "completed"
    assert second.output == {"summary": "T-2: Cannot import receipts."}
    assert second.workflow_version_id == first.workflow_version_id
    (review_call,) = scripted_model.calls_for(step="planner", run="run_second")
    shown = system_text(review_call)
    assert f"Candidate WorkflowVersion: {first.workflow_version_id}" in shown
    assert "Workflow ID: support.summarize\nRun ID: run_first\n" in shown
    assert '```mermaid\ngraph TD\n  n0["summarize"]\n```' in shown
    assert "--- Prior cycle note ---" in shown and '"kind": "reuse_unchanged"' in shown
    types = types_of(world, "run_second")
    assert types[:6] == [
        "OrchestrationRequested",
        "PlannerStarted",
        "harness.session.started",
        "harness.model.called",
        "harness.model.responded",
        "harness.session.completed",
    ]
    assert types[6] == "PlannerReuseDecisionRecorded"
    assert "PlannerDraftedWorkflow" not in types
    (payload,) = payload_of(world, "run_second", "PlannerReuseDecisionRecorded")
    brief = reuse_brief(select_reuse_candidates(world, "support.summarize")[-1], None)
    assert payload == {
        "decisionKind": "reuse_unchanged",
        "rationale": "Same workflow, same input shape.",
        "inputHash": sha256_digest(OTHER),
        "inputStructure": concrete_input_structure(OTHER),
        "candidateBriefHash": payload["candidateBriefHash"],
        "resultingWorkflowVersionId": first.workflow_version_id,
        "candidateWorkflowVersionId": first.workflow_version_id,
        "acknowledgedWarnings": [],
    }
    assert payload["candidateBriefHash"] == sha256_digest(
        shown.split("--- Prior cycle note ---\n")[1].split("\nA previously compiled")[0]
    )
    assert brief.brief_hash.startswith("sha256:")


def test_the_planner_adapts_the_candidate(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model)
    adapted = valid_lwir(metadata={"name": "support.summarize", "version": "0.2.0"})
    scripted_model.on(step="planner", match=reviewing).reply_json(
        {
            "kind": "adapt",
            "baseWorkflowVersionId": first.workflow_version_id,
            "rationale": "Bump the version.",
            "lwir": adapted,
        }
    )
    second = run_workflow(ticket_workflow(), OTHER, world=world, run_id="run_second")
    assert second.workflow_version_id != first.workflow_version_id
    (drafted,) = payload_of(world, "run_second", "PlannerDraftedWorkflow")
    assert drafted["lwirHash"] == sha256_digest(adapted)
    (payload,) = payload_of(world, "run_second", "PlannerReuseDecisionRecorded")
    assert payload["decisionKind"] == "adapt"
    assert payload["baseWorkflowVersionId"] == first.workflow_version_id
    assert payload["candidateWorkflowVersionId"] == first.workflow_version_id
    assert payload["resultingWorkflowVersionId"] == second.workflow_version_id
    assert "acknowledgedWarnings" not in payload
    types = types_of(world, "run_second")
    assert types.index("WorkflowValidationSucceeded") < types.index("PlannerReuseDecisionRecorded")


def test_the_planner_drafts_fresh(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    first_run(world, scripted_model)
    scripted_model.on(step="planner", match=reviewing).reply_json(
        {"kind": "draft_fresh", "rationale": "Start over.", "lwir": valid_lwir()}
    )
    second = run_workflow(ticket_workflow(), OTHER, world=world, run_id="run_second")
    assert second.status == "completed"
    (payload,) = payload_of(world, "run_second", "PlannerReuseDecisionRecorded")
    assert payload["decisionKind"] == "draft_fresh"
    assert payload["resultingWorkflowVersionId"] == second.workflow_version_id
    assert "candidateWorkflowVersionId" not in payload


def test_a_plain_lwir_reply_to_a_review_records_no_decision(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    first_run(world, scripted_model)
    scripted_model.on(step="planner", match=reviewing).reply_json(valid_lwir())
    run_workflow(ticket_workflow(), OTHER, world=world, run_id="run_second")
    assert "PlannerReuseDecisionRecorded" not in types_of(world, "run_second")
    assert "PlannerDraftedWorkflow" in types_of(world, "run_second")


@pytest.mark.parametrize("where", ["definition", "call"])
def test_always_fresh_shows_no_candidate(scripted_model: ScriptedModel, where: str) -> None:
    world = MemoryWorld()
    options = {"workflow_version_reuse_strategy": "always_fresh"} if where == "definition" else {}
    first_run(world, scripted_model, **options)
    scripted_model.on(step="planner", run="run_second").reply_json(valid_lwir())
    call = {"workflow_version_reuse_strategy": "always_fresh"} if where == "call" else {}
    run_workflow(ticket_workflow(**options), OTHER, world=world, run_id="run_second", **call)
    (call_made,) = scripted_model.calls_for(step="planner", run="run_second")
    assert BRIEF not in system_text(call_made)
    assert "PlannerReuseDecisionRecorded" not in types_of(world, "run_second")


def test_the_call_strategy_wins_over_the_definitions(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model, workflow_version_reuse_strategy="always_fresh")
    scripted_model.on(step="planner", match=reviewing).reply_json(
        {
            "kind": "reuse_unchanged",
            "workflowVersionId": first.workflow_version_id,
            "rationale": "ok",
        }
    )
    second = run_workflow(
        ticket_workflow(workflow_version_reuse_strategy="always_fresh"),
        OTHER,
        world=world,
        run_id="run_second",
        workflow_version_reuse_strategy="planner_reviewed",
    )
    assert second.workflow_version_id == first.workflow_version_id


def test_an_unknown_strategy_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInputError, match=r"planner_reviewed, always_fresh.*'sometimes'"):
        ticket_workflow(workflow_version_reuse_strategy="sometimes")


def test_a_refused_decision_goes_back_to_the_planner_as_a_finding(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model)
    rule = scripted_model.on(step="planner", match=reviewing)
    rule.reply_json(
        {"kind": "reuse_unchanged", "workflowVersionId": "wfver_0000000000000000", "rationale": "x"}
    )
    rule.reply_json(
        {
            "kind": "reuse_unchanged",
            "workflowVersionId": first.workflow_version_id,
            "rationale": "y",
        }
    )
    second = run_workflow(ticket_workflow(), OTHER, world=world, run_id="run_second")
    assert second.workflow_version_id == first.workflow_version_id
    (failed,) = payload_of(world, "run_second", "WorkflowValidationFailed")
    (finding,) = failed["findings"]
    assert finding["code"] == "planner_reuse_decision_invalid"
    assert "missing candidate: wfver_0000000000000000" in finding["message"]
    repair = system_text(scripted_model.calls_for(step="planner", run="run_second")[1])
    assert "missing candidate" in repair


def test_a_changed_output_contract_blocks_unchanged_reuse_and_warns(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model)
    wider = {**SUMMARY_SCHEMA, "properties": {**SUMMARY_SCHEMA["properties"], "x": {}}}
    changed = ticket_workflow(output=wider)
    rule = scripted_model.on(step="planner", match=reviewing)
    rule.reply_json(
        {
            "kind": "reuse_unchanged",
            "workflowVersionId": first.workflow_version_id,
            "rationale": "Reuse anyway.",
            "acknowledgedWarnings": ["requested output hash changed"],
        }
    )
    rule.reply_json(
        valid_lwir(
            output={"schema": wider},
            steps=[{**valid_lwir()["steps"][0], "output": {"mode": "object", "schema": wider}}],
        )
    )
    run_workflow(changed, OTHER, world=world, run_id="run_second")
    (review_call, _repair) = scripted_model.calls_for(step="planner", run="run_second")
    assert "## Warnings\n\n- requested output hash changed\n" in system_text(review_call)
    (failed,) = payload_of(world, "run_second", "WorkflowValidationFailed")
    assert failed["findings"][0]["message"] == (
        "reuse_unchanged is blocked: requested output contract changed"
    )


def test_candidates_are_completed_runs_of_the_workflow_newest_first(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    first = first_run(world, scripted_model)
    scripted_model.on(step="planner", match=reviewing).reply_json(
        {
            "kind": "reuse_unchanged",
            "workflowVersionId": first.workflow_version_id,
            "rationale": "r",
        }
    )
    run_workflow(ticket_workflow(), OTHER, world=world, run_id="run_second")
    (candidate,) = select_reuse_candidates(world, "support.summarize")
    assert candidate.run_id == "run_second"  # one per version, the newest run
    assert candidate.workflow_version_id == first.workflow_version_id
    assert candidate.prior_output == {"summary": "T-2: Cannot import receipts."}
    assert select_reuse_candidates(world, "other.workflow") == []
    # A run that only planned (no RunCompleted) is no candidate.
    scripted_model.on(step="planner", run="run_plan_only").reply_json(valid_lwir())
    from tests.test_planner import plan

    plan(world, "run_plan_only", ticket_workflow(workflow_version_reuse_strategy="always_fresh"))
    assert [c.run_id for c in select_reuse_candidates(world, "support.summarize")] == ["run_second"]


def test_decision_validation_follows_upstream(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    first_run(world, scripted_model)
    candidates = select_reuse_candidates(world, "support.summarize")
    vid = candidates[0].workflow_version_id

    def refused(decision: Any, message: str, **options: Any) -> None:
        with pytest.raises(ReuseDecisionError, match=message):
            validate_reuse_decision(decision, candidates, **options)

    refused({"kind": "surprise"}, "Malformed planner reuse decision")
    refused({"kind": "draft_fresh", "rationale": " ", "lwir": {}}, "rationale")
    refused({"kind": "adapt", "baseWorkflowVersionId": vid, "rationale": "r"}, "lwir is required")
    refused(
        {"kind": "adapt", "baseWorkflowVersionId": "wfver_x", "rationale": "r", "lwir": {}},
        "missing candidate",
    )
    refused(
        {"kind": "draft_fresh", "rationale": "r", "lwir": {"kind": "Workflow", "steps": []}},
        "Invalid planner reuse decision LWIR",
    )
    unchanged = {"kind": "reuse_unchanged", "workflowVersionId": vid, "rationale": "r"}
    refused(
        unchanged,
        "must acknowledge candidate warnings: description changed",
        warnings=["description changed"],
    )
    assert validate_reuse_decision(
        {**unchanged, "acknowledgedWarnings": ["description changed"]},
        candidates,
        warnings=["description changed"],
    )["acknowledgedWarnings"] == ["description changed"]
    refused(
        unchanged,
        "reuse_unchanged is blocked: tool 'x' unavailable",
        blocks=["tool 'x' unavailable"],
    )


def test_version_reuse_policies_follow_upstream(scripted_model: ScriptedModel) -> None:
    from little_dist.compiler import WorkflowVersion
    from little_dist.planner.reuse import VersionReuseError, check_version_input

    world = MemoryWorld()
    first = first_run(world, scripted_model)
    version = WorkflowVersion.from_json(world.get_version(first.workflow_version_id))
    reshaped = {**INPUT, "extra": 1}

    check_version_input(version, "exact", INPUT)
    check_version_input(version, "structure", OTHER)
    check_version_input(version, "any", reshaped)
    for policy, value, message in [
        ("never", INPUT, "WorkflowVersion reuse is disabled."),
        ("exact", OTHER, "WorkflowVersion planned input hash does not match run input."),
        (
            "structure",
            reshaped,
            "WorkflowVersion planned input structure does not match run input.",
        ),
        ("sometimes", INPUT, 'Unknown WorkflowVersion reuse policy "sometimes".'),
    ]:
        with pytest.raises(VersionReuseError) as caught:
            check_version_input(version, policy, value)
        assert str(caught.value) == message
