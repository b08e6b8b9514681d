"""The orchestrator role in process: plan_workflow / run_workflow / start_workflow, each run a
sub-run of the orchestrator's run, upstream's results and errors, maxConcurrentSubRuns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import InvalidInputError, model
from little_dist.planner.fixed import fixed_plan_events
from little_dist.subruns import (
    SUB_RUN_STARTED,
    run_orchestration,
    sub_run_rollup,
    workflow_snapshots,
)
from little_dist.testing import ScriptedModel, ToolCall, Usage
from little_dist.world.local import LocalWorld
from tests.test_subruns import double_workflow

BOSS = model("scripted/boss", id="boss", pricing="openai/gpt-4o-mini")
TASK = {"type": "object", "required": ["numbers"], "properties": {"numbers": {"type": "array"}}}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()


def _script_kid(script: ScriptedModel) -> None:
    for n in (7, 5, 3):
        script.on(model="kid", contains=f"Double {n}").reply_json(
            {"value": 2 * n}, usage=Usage(1000 * n, 10 * n)
        )


def test_an_orchestrator_plans_once_runs_many_and_starts_one_as_sub_runs(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    double = double_workflow()
    planned = fixed_plan_events(double, {"n": 7})
    assert planned is not None
    version_id = planned.version.id
    _script_kid(scripted_model)
    scripted_model.on(model="boss").call_tool(
        "plan_workflow", {"workflowId": "math.double", "input": {"n": 7}}, usage=Usage(100, 10)
    ).then_call_tools(
        [
            ToolCall("run_workflow", {"workflowVersionId": version_id, "input": {"n": 7}}),
            ToolCall("run_workflow", {"workflowVersionId": version_id, "input": {"n": 5}}),
            ToolCall("start_workflow", {"workflowId": "math.double", "input": {"n": 3}}),
            ToolCall("run_workflow", {"workflowVersionId": "wfver_nope", "input": {"n": 1}}),
            ToolCall("start_workflow", {"workflowId": "math.triple", "input": {"n": 1}}),
        ],
        usage=Usage(200, 20),
    ).then_reply_text("14, 10 and 6", usage=Usage(300, 30))

    result = run_orchestration(
        [double],
        {"numbers": [7, 5, 3]},
        model=BOSS,
        input_schema=TASK,
        world=world,
        run_id="run_orch1",
        max_concurrent_sub_runs=2,
    )
    assert result.output == "14, 10 and 6"

    # The orchestrator was told the workflows, and offered the three tools.
    first = scripted_model.calls_for(model="boss")[0]
    assert sorted(first.tool_names) == ["plan_workflow", "run_workflow", "start_workflow"]
    system = " ".join(str(m["content"]) for m in first.messages if m["role"] == "system")
    assert json.dumps(workflow_snapshots([double]), sort_keys=True) in system

    seen = [
        json.loads(item["content"])
        for item in scripted_model.calls_for(model="boss")[1].tool_results
    ]
    assert seen[0] == {"workflowVersionId": version_id}
    results = scripted_model.calls_for(model="boss")[2].tool_results[1:]  # (turn 2's)
    (run7, run5, start3, unknown_version, unknown_workflow) = [
        json.loads(item["content"]) for item in results
    ]
    assert (run7["status"], run7["output"]) == ("completed", {"value": 14})
    # No bash, so no result store: the output is inline, without a summary (as upstream).
    assert "outputSummary" not in run7 and "outputPath" not in run7
    assert (run5["status"], run5["output"]) == ("completed", {"value": 10})
    assert start3["workflowVersionId"] != version_id  # planned for its own input
    assert (start3["status"], start3["output"]) == ("completed", {"value": 6})
    assert unknown_version == {
        "error": "tool 'run_workflow' failed: Unknown workflowVersionId 'wfver_nope'."
    }
    assert unknown_workflow == {
        "error": "tool 'start_workflow' failed: Unknown workflow id 'math.triple'."
    }

    # Both run_workflow children ran the planned version; each child ran once.
    for child in (run7["runId"], run5["runId"]):
        (started,) = [e for e in world.list_events(child) if e.type == "RunStarted"]
        assert started.payload["workflowVersionId"] == version_id
        assert started.payload["parentRunId"] == "run_orch1"
    assert len(scripted_model.calls_for(model="kid")) == 3

    starts = [e.payload for e in world.list_events("run_orch1") if e.type == SUB_RUN_STARTED]
    assert [(p["toolName"], p["disposition"]) for p in starts] == [
        ("plan_workflow", "plan"),
        ("run_workflow", "await"),
        ("run_workflow", "await"),
        ("start_workflow", "plan"),
        ("start_workflow", "await"),
    ]

    # The report: the planning runs and the children, and the whole tree's tokens.
    rollup = sub_run_rollup(world.list_events, "run_orch1")
    assert rollup is not None
    assert [row.status for row in rollup.rows] == [
        "planned",
        "completed",
        "completed",
        "planned",
        "completed",
    ]
    assert rollup.own.input_tokens == 600
    assert rollup.total.input_tokens == 600 + 7000 + 5000 + 3000

    # Resumed with the same id: the recorded result, nothing runs again.
    counts = {
        run: len(world.list_events(run)) for run in ["run_orch1", *(r.run_id for r in rollup.rows)]
    }
    again = run_orchestration(
        [double],
        {"numbers": [7, 5, 3]},
        model=BOSS,
        input_schema=TASK,
        world=world,
        run_id="run_orch1",
    )
    assert again.output == "14, 10 and 6"
    assert {run: len(world.list_events(run)) for run in counts} == counts


def test_run_workflow_refuses_an_input_of_another_shape(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    double = double_workflow()
    planned = fixed_plan_events(double, {"n": 7})
    assert planned is not None
    scripted_model.on(model="boss").call_tool(
        "plan_workflow", {"workflowId": "math.double", "input": {"n": 7}}
    ).then_call_tool(
        "run_workflow", {"workflowVersionId": planned.version.id, "input": {"n": "x"}}
    ).then_reply_text("gave up")
    result = run_orchestration(
        [double], {"numbers": []}, model=BOSS, input_schema=TASK, world=world, run_id="run_orch2"
    )
    assert result.output == "gave up"
    (error,) = [
        json.loads(item["content"])["error"]
        for item in scripted_model.calls_for(model="boss")[2].tool_results[1:]
    ]
    assert error == "tool 'run_workflow': invalid input: input.n: 'x' is not of type 'integer'"
    assert scripted_model.calls_for(model="kid") == []


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_max_concurrent_sub_runs_must_be_a_positive_integer(limit: Any) -> None:
    with pytest.raises(InvalidInputError, match=r"maxConcurrentSubRuns must be an integer >= 1\.$"):
        run_orchestration([double_workflow()], {}, model=BOSS, max_concurrent_sub_runs=limit)


def test_a_budgeted_orchestrations_sub_runs_and_planning_runs_spend_from_its_budget(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from little_dist.run_state import materialize_run_state

    double = double_workflow()
    planned = fixed_plan_events(double, {"n": 7})
    assert planned is not None
    _script_kid(scripted_model)
    scripted_model.on(model="boss").call_tool(
        "plan_workflow", {"workflowId": "math.double", "input": {"n": 7}}, usage=Usage(100, 10)
    ).then_call_tools(
        [
            ToolCall("run_workflow", {"workflowVersionId": planned.version.id, "input": {"n": 7}}),
            ToolCall("start_workflow", {"workflowId": "math.double", "input": {"n": 5}}),
        ],
        usage=Usage(200, 20),
    ).then_reply_text("14 and 10", usage=Usage(300, 30))
    budget = 0.05
    result = run_orchestration(
        [double],
        {"numbers": [7, 5]},
        model=BOSS,
        input_schema=TASK,
        world=world,
        run_id="run_orch_budget",
        budget_usd=budget,
    )
    assert result.output == "14 and 10"
    ended = [
        e.payload for e in world.list_events("run_orch_budget") if e.type == "little.subrun.ended"
    ]
    assert len(ended) == 4 and all("spentUsd" in p for p in ended)  # 2 planning runs, 2 kids
    kids = [p["childRunId"] for p in ended if p["status"] == "completed"]
    for child in [p["childRunId"] for p in ended]:  # each borrows from the orchestration
        child_state = materialize_run_state(world.list_events(child), run_id=child)
        assert child_state.budget_parent_run_id == "run_orch_budget"
    spent = [
        materialize_run_state(world.list_events(kid), run_id=kid).committed_usd for kid in kids
    ]
    state = materialize_run_state(world.list_events("run_orch_budget"), run_id="run_orch_budget")
    assert state.budget_usd == budget and all(s > 0 for s in spent)
    assert state.sub_runs_usd == pytest.approx(sum(spent))
    assert 0 < state.committed_usd <= budget
