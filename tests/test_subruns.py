"""Sub-runs in process: workflows as tools, the links both ways, exactly-once children,
a failed child as upstream's result envelope, bad input as a tool error, and the parent's
report rolling up the children."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import (
    InvalidInputError,
    RunFailedError,
    define_workflow,
    model,
    run_workflow,
    tool,
)
from little_dist.authoring import WorkflowDefinition
from little_dist.subruns import (
    SUB_RUN_ENDED,
    SUB_RUN_STARTED,
    as_tool,
    parent_link_of,
    sub_run_rollup,
    sub_runs_to_json,
)
from little_dist.testing import ScriptedModel, ToolCall, Usage
from little_dist.world.local import LocalWorld
from tests import zygote

KID_PRICE = "openai/gpt-4o-mini"
NUMBER_IN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["n"],
    "properties": {"n": {"type": "integer"}},
}
VALUE_OUT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["value"],
    "properties": {"value": {"type": "integer"}},
}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()


def _doc(wf_id: str, input_schema: Any, output_schema: Any, step: dict[str, Any]) -> dict[str, Any]:
    tools = step.pop("_tools", [])
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": wf_id, "version": "1.0.0"},
        "input": {"schema": input_schema},
        "output": {"schema": output_schema},
        "permissions": {"models": [step["with"]["model"]], "tools": tools},
        "steps": [step],
    }


def double_workflow() -> WorkflowDefinition:
    """The child: one ai.generate step that doubles ``n``."""
    step = {
        "id": "double",
        "uses": "ai.generate",
        "with": {"model": "kid", "prompt": "Double {{ input.n }}"},
        "output": {"mode": "object", "schema": VALUE_OUT},
    }
    return define_workflow(
        id="math.double",
        description="Double a number.",
        input=NUMBER_IN,
        output=VALUE_OUT,
        model=model("scripted/kid", id="kid", pricing=KID_PRICE),
        plan=_doc("math.double", NUMBER_IN, VALUE_OUT, step),
    )


def parent_workflow(child: WorkflowDefinition, *, retries: int = 1) -> WorkflowDefinition:
    """The parent: one text ai.generate step offered the child as a tool."""
    parent_in = {
        "type": "object",
        "required": ["a", "b"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    }
    step = {
        "id": "boss",
        "uses": "ai.generate",
        "with": {"model": "boss", "prompt": "Double {{ input.a }} and {{ input.b }}"},
        "output": {"mode": "text"},
        "retry": {"maxAttempts": retries},
        "_tools": ["math.double"],
    }
    return define_workflow(
        id="math.parent",
        input=parent_in,
        output=str,
        model=model("scripted/boss", id="boss", pricing=KID_PRICE),
        tools=[as_tool(child)],
        plan=_doc("math.parent", parent_in, {"type": "string"}, step),
    )


def _script_children(script: ScriptedModel) -> None:
    script.on(model="kid", contains="Double 7").reply_json({"value": 14}, usage=Usage(1000, 100))
    script.on(model="kid", contains="Double 5").reply_json({"value": 10}, usage=Usage(2000, 200))


def _types(world: LocalWorld, run_id: str, kind: str) -> list[Any]:
    return [event for event in world.list_events(run_id) if event.type == kind]


def test_a_parent_calls_a_workflow_tool_twice_and_gets_two_linked_children(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    _script_children(scripted_model)
    scripted_model.on(model="boss").call_tools(
        [ToolCall("math__double", {"n": 7}), ToolCall("math__double", {"n": 5})],
        usage=Usage(300, 30),
    ).then_reply_text("14 and 10", usage=Usage(400, 40))
    parent = parent_workflow(double_workflow())
    result = run_workflow(parent, {"a": 7, "b": 5}, world=world, run_id="run_parent1")
    assert result.output == "14 and 10"

    starts = _types(world, "run_parent1", SUB_RUN_STARTED)
    assert len(starts) == 2
    children = [event.payload["childRunId"] for event in starts]
    assert len(set(children)) == 2 and all(c.startswith("run_sub_") for c in children)
    tool_calls = _types(world, "run_parent1", "harness.tool_call.started")
    assert [event.payload["toolName"] for event in tool_calls] == ["math.double"] * 2
    for start, call in zip(starts, tool_calls, strict=True):
        assert start.payload["toolCallId"] == call.payload["callId"]
        assert start.payload["parentRunId"] == "run_parent1"
        assert start.payload["workflowId"] == "math.double"
        assert start.payload["stepPath"] == "boss"
    ends = _types(world, "run_parent1", SUB_RUN_ENDED)
    assert [(e.payload["childRunId"], e.payload["status"]) for e in ends] == [
        (child, "completed") for child in children
    ]

    # Each child: its own version and log, linked back to the parent's tool call.
    versions = set()
    for child, call, value in zip(children, tool_calls, (14, 10), strict=True):
        events = world.list_events(child)
        assert _types(world, child, "RunCompleted")[0].payload["output"] == {"value": value}
        link = parent_link_of(events)
        assert link == {
            "parentRunId": "run_parent1",
            "parentToolCallId": call.payload["callId"],
            "parentStepPath": "boss",
            "parentCallKey": starts[children.index(child)].payload["callKey"],
        }
        versions.add(_types(world, child, "RunStarted")[0].payload["workflowVersionId"])
    parent_version = _types(world, "run_parent1", "RunStarted")[0].payload["workflowVersionId"]
    # (a fixed plan's lock binds the planned input: each child input is its own version)
    assert all(v.startswith("wfver_") for v in versions) and parent_version not in versions

    # The model saw each child's result as upstream's harness hands it a workflow execution:
    # the compact envelope (the output summarized, not inline).
    second_turn = scripted_model.calls_for(model="boss")[1]
    seen = [json.loads(item["content"]) for item in second_turn.tool_results]
    assert [(item["status"], item["outputSummary"]) for item in seen] == [
        ("completed", '{"value":14}'),
        ("completed", '{"value":10}'),
    ]
    assert all(set(item) == {"status", "runId", "outputSummary"} for item in seen)
    assert [item["runId"] for item in seen] == children

    # The parent's report lists the children and rolls up their tokens and dollars.
    rollup = sub_run_rollup(world.list_events, "run_parent1")
    assert rollup is not None
    assert [(row.run_id, row.workflow_id, row.status) for row in rollup.rows] == [
        (child, "math.double", "completed") for child in children
    ]
    assert rollup.own.input_tokens == 700
    assert rollup.total.input_tokens == 700 + 3000
    assert rollup.total.output_tokens == 70 + 300
    child_costs = [row.usage.cost_usd for row in rollup.rows if row.usage is not None]
    assert rollup.own.cost_usd is not None and all(cost for cost in child_costs)
    assert rollup.total.cost_usd == pytest.approx(rollup.own.cost_usd + sum(child_costs))
    data = sub_runs_to_json(rollup)
    assert [item["runId"] for item in data["subRuns"]] == children
    assert data["totalWithSubRuns"]["inputTokens"] == 3700


def test_a_retried_parent_finds_its_child_and_never_runs_it_twice(
    world: LocalWorld, scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's first attempt dies after its first child ended and before the call's
    result was recorded; the retry replays the model turn, makes the same call, derives the
    same child id and takes the child's recorded end: one RunStarted per child."""
    from little_dist.harness.recorder import EventRecorder

    _script_children(scripted_model)
    scripted_model.on(model="boss").call_tools(
        [ToolCall("math__double", {"n": 7}), ToolCall("math__double", {"n": 5})]
    ).then_reply_text("14 and 10")
    real = EventRecorder.tool_succeeded
    died: list[str] = []

    def dies_once(self: EventRecorder, index: int, result: Any, **fields: Any) -> Any:
        if fields.get("tool_name") == "math.double" and not died:
            died.append(result["runId"])
            raise RuntimeError("worker died before recording the call's result")
        return real(self, index, result, **fields)

    monkeypatch.setattr(EventRecorder, "tool_succeeded", dies_once)
    parent = parent_workflow(double_workflow(), retries=2)
    result = run_workflow(parent, {"a": 7, "b": 5}, world=world, run_id="run_parent2")
    assert result.output == "14 and 10" and len(died) == 1

    failed = _types(world, "run_parent2", "StepFailed")
    assert [e.payload["attempt"] for e in failed] == [1]
    children = [e.payload["childRunId"] for e in _types(world, "run_parent2", SUB_RUN_STARTED)]
    assert children[0] == died[0] and len(children) == 2
    for child in children:
        assert len(_types(world, child, "RunStarted")) == 1
    # Each child's model ran once: the retry took the first child's recorded end.
    assert len(scripted_model.calls_for(model="kid")) == 2
    # The second attempt's first call found the ended child (no second start event).
    second = [e for e in _types(world, "run_parent2", "harness.tool_call.succeeded")]
    assert [e.payload["attempt"] for e in second] == [2, 2]
    assert [e.payload["result"]["runId"] for e in second] == children

    # Run again with the same id: the recorded result, nothing new anywhere.
    counts = {run: len(world.list_events(run)) for run in ["run_parent2", *children]}
    again = run_workflow(parent, {"a": 7, "b": 5}, world=world, run_id="run_parent2")
    assert again.output == "14 and 10"
    assert {run: len(world.list_events(run)) for run in counts} == counts
    assert len(scripted_model.calls_for(model="kid")) == 2


def test_a_failing_child_is_a_result_envelope_the_model_reads(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    # Upstream hands the calling model a failed child as a tool result (compactWorkflow-
    # Execution), not a tool error: this test pinned the error before.
    scripted_model.on(model="kid").raise_error("auth", message="bad key for the kid model")
    scripted_model.on(model="boss").call_tool("math__double", {"n": 7}).then_reply_text(
        "the child failed"
    )
    parent = parent_workflow(double_workflow())
    result = run_workflow(parent, {"a": 7, "b": 5}, world=world, run_id="run_parent3")
    assert result.output == "the child failed"

    (start,) = _types(world, "run_parent3", SUB_RUN_STARTED)
    child = start.payload["childRunId"]
    (child_failed,) = _types(world, child, "RunFailed")
    (end,) = _types(world, "run_parent3", SUB_RUN_ENDED)
    assert end.payload["status"] == "failed"
    assert end.payload["causeCode"] == "workflow_failed"
    assert end.payload["failedStepPath"] == "double"
    assert _types(world, "run_parent3", "harness.tool_call.failed") == []
    (succeeded,) = _types(world, "run_parent3", "harness.tool_call.succeeded")
    envelope = succeeded.payload["result"]
    assert set(envelope) == {"status", "runId", "causeCode", "message", "outputSummary"}
    assert envelope["status"] == "failed" and envelope["runId"] == child
    assert envelope["causeCode"] == "workflow_failed"
    assert "bad key for the kid model" in envelope["message"]
    run_cause = child_failed.payload["error"]["causeCode"]
    assert envelope["outputSummary"] == (
        f"Failed at step 'double' ({run_cause}): {envelope['message']}"
    )
    # What the model saw: the envelope, as the tool's result.
    seen = json.loads(scripted_model.calls_for(model="boss")[1].tool_results[0]["content"])
    assert seen == envelope


def test_a_failing_child_is_still_a_tool_error_for_a_tool_call_step(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    # A tool.call step (caller "code") has no model to read an envelope: it fails.
    scripted_model.on(model="kid").raise_error("auth", message="bad key for the kid model")
    child = double_workflow()
    step = {
        "id": "call",
        "uses": "tool.call",
        "input": {"n": "{{ input.n }}"},
        "with": {"tool": "math.double"},
        "output": {"mode": "json"},
    }
    doc = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "math.caller", "version": "1.0.0"},
        "input": {"schema": NUMBER_IN},
        "output": {"schema": {"type": "object"}},
        "permissions": {"models": [], "tools": ["math.double"]},
        "steps": [step],
    }
    caller = define_workflow(
        id="math.caller",
        input=NUMBER_IN,
        output={"type": "object"},
        model="scripted/none",
        tools=[as_tool(child)],
        plan=doc,
    )
    with pytest.raises(RunFailedError) as caught:
        run_workflow(caller, {"n": 7}, world=world, run_id="run_caller")
    assert "bad key for the kid model" in str(caught.value)
    (failed,) = _types(world, "run_caller", "harness.tool_call.failed")
    assert failed.payload["caller"] == "code"
    error = failed.payload["error"]
    assert error["name"] == "SubRunFailedError"
    assert error["causeCode"] == "workflow_failed" and error["retriable"] is False
    assert "failed at step 'double'" in error["message"]


def test_bad_input_to_a_workflow_tool_is_a_tool_error_and_starts_no_child(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(model="boss").call_tool("math__double", {"n": "seven"}).then_reply_text(
        "gave up"
    )
    parent = parent_workflow(double_workflow())
    result = run_workflow(parent, {"a": 7, "b": 5}, world=world, run_id="run_parent4")
    assert result.output == "gave up"
    assert _types(world, "run_parent4", SUB_RUN_STARTED) == []
    assert scripted_model.calls_for(model="kid") == []
    assert [run for run in world.list_run_ids() if run.startswith("run_sub_")] == []
    (failed,) = _types(world, "run_parent4", "harness.tool_call.failed")
    assert failed.payload["error"]["causeCode"] == "tool_input_error"
    seen = json.loads(scripted_model.calls_for(model="boss")[1].tool_results[0]["content"])
    assert seen["error"] == "tool 'math.double': invalid input: n: 'seven' is not of type 'integer'"


def test_a_workflow_tool_is_typed_by_the_workflow() -> None:
    child = double_workflow()
    wrapped = as_tool(child)
    assert wrapped.name == "math.double" and wrapped.description == "Double a number."
    assert wrapped.input_schema == NUMBER_IN and wrapped.output_schema == VALUE_OUT
    text_in = define_workflow(id="echo", input=str, output=str, model="scripted/x")
    assert as_tool(text_in, name="echo_it").input_schema == {
        "type": "object",
        "additionalProperties": False,
        "required": ["input"],
        "properties": {"input": {"type": "string"}},
    }
    with pytest.raises(InvalidInputError, match=r"runs workflow 'math\.double' as a sub-run"):
        wrapped.call({"n": 1})
    with pytest.raises(InvalidInputError, match="as_tool expects a workflow"):
        as_tool("math.double")  # type: ignore[arg-type]


def _little(*args: str) -> subprocess.CompletedProcess[str]:
    return zygote.run(
        args,
        timeout=120,
    )


def test_little_events_shows_the_parent_and_little_report_the_children(
    world: LocalWorld, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    _script_children(scripted_model)
    scripted_model.on(model="boss").call_tools(
        [ToolCall("math__double", {"n": 7}), ToolCall("math__double", {"n": 5})],
        usage=Usage(300, 30),
    ).then_reply_text("14 and 10", usage=Usage(400, 40))
    run_workflow(parent_workflow(double_workflow()), {"a": 7, "b": 5}, world=world, run_id="run_p5")
    children = [e.payload["childRunId"] for e in _types(world, "run_p5", SUB_RUN_STARTED)]
    data_dir = str(tmp_path / "data")

    events = _little("events", children[0], "--data-dir", data_dir)
    assert events.returncode == 0, events.stderr
    (started,) = [line for line in events.stdout.splitlines() if " RunStarted " in line]
    assert started.endswith("parent=run_p5")
    parent_events = _little("events", "run_p5", "--data-dir", data_dir, "--type", "little.subrun.*")
    assert [line.rsplit("child=", 1)[1] for line in parent_events.stdout.splitlines()] == [
        children[0],
        children[0],
        children[1],
        children[1],
    ]

    table = _little("report", "run_p5", "--data-dir", data_dir)
    assert table.returncode == 0, table.stderr
    section = table.stdout.split("SUB-RUNS\n", 1)[1].splitlines()
    assert [line.split()[:3] for line in section[:2]] == [
        [child, "math.double", "completed"] for child in children
    ]
    # gpt-4o-mini's rates: 3,700 input tokens at $0.15/M and 370 output at $0.60/M
    assert section[2] == "TOTAL WITH SUB-RUNS  in=3700 out=370 cached=0  0.000777"
    as_json = json.loads(_little("report", "run_p5", "--data-dir", data_dir, "--json").stdout)
    assert [row["runId"] for row in as_json["subRuns"]] == children
    assert [row["usage"]["inputTokens"] for row in as_json["subRuns"]] == [1000, 2000]
    assert as_json["totalWithSubRuns"]["inputTokens"] == 3700
    assert as_json["total"]["inputTokens"] == 700  # the parent's own row is unchanged
    upstream = _little("report", "run_p5", "--data-dir", data_dir, "--upstream")
    assert "SUB-RUNS" not in upstream.stdout


def test_cancelling_the_parent_cancels_the_running_child(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from little_dist.event_types.engine import CANCEL_EVENT_TYPE
    from little_dist.events import EventInput

    # The child's model answers slowly: the parent is cancelled while the child runs.
    scripted_model.on(model="kid").reply_json({"value": 14}, latency=3.0)
    scripted_model.on(model="boss", match=lambda r: bool(r.tool_results)).reply_text("late")
    scripted_model.on(model="boss").call_tool("math__double", {"n": 7})
    parent = parent_workflow(double_workflow())

    def cancel_when_the_child_runs() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            children = [r for r in world.list_run_ids() if r.startswith("run_sub_")]
            if children and _types(world, children[0], "harness.model.called"):
                world.append(
                    "run_parent6",
                    EventInput(type=CANCEL_EVENT_TYPE, occurrence_id="cancel", payload={}),
                )
                return
            time.sleep(0.05)

    canceller = threading.Thread(target=cancel_when_the_child_runs)
    canceller.start()
    with pytest.raises(RunFailedError) as caught:
        run_workflow(parent, {"a": 7, "b": 5}, world=world, run_id="run_parent6")
    canceller.join()
    assert caught.value.cause_code == "cancelled"
    (child,) = [r for r in world.list_run_ids() if r.startswith("run_sub_")]
    (request,) = _types(world, child, CANCEL_EVENT_TYPE)
    assert request.payload["parentRunId"] == "run_parent6"
    (failed,) = _types(world, child, "RunFailed")
    assert failed.payload["error"]["causeCode"] == "cancelled"
    # The child was stopped mid-call: its model's answer came after its end.
    assert _types(world, child, "harness.model.responded") == []


def test_a_child_whose_planning_fails_still_names_its_parent(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    @tool
    def lookup(n: int) -> int:
        """Look a number up."""
        return n

    # No plan=: the child's planner model drafts nothing valid, so the child fails planning.
    unplannable = define_workflow(
        id="math.unplannable",
        input=NUMBER_IN,
        output=VALUE_OUT,
        model="scripted/kid",
        tools=[lookup],
        max_revisions=1,
    )
    scripted_model.on(model="kid").reply_text("no plan today", times=None)
    scripted_model.on(model="boss", match=lambda r: bool(r.tool_results)).reply_text("ok")
    scripted_model.on(model="boss").call_tool("math__unplannable", {"n": 7})
    parent_in = {"type": "object"}
    step = {
        "id": "boss",
        "uses": "ai.generate",
        "with": {"model": "boss", "prompt": "go"},
        "output": {"mode": "text"},
        "_tools": ["math.unplannable"],
    }
    parent = define_workflow(
        id="math.parent2",
        input=parent_in,
        output=str,
        model=model("scripted/boss", id="boss"),
        tools=[as_tool(unplannable)],
        plan=_doc("math.parent2", parent_in, {"type": "string"}, step),
    )
    assert run_workflow(parent, {}, world=world, run_id="run_parent7").output == "ok"
    (child,) = [r for r in world.list_run_ids() if r.startswith("run_sub_")]
    (failed,) = _types(world, child, "RunFailed")
    assert failed.payload["error"]["causeCode"] == "planner_validation_exhausted"
    link = parent_link_of(world.list_events(child))
    assert link is not None and link["parentRunId"] == "run_parent7"
    (called,) = _types(world, "run_parent7", "harness.tool_call.succeeded")
    envelope = called.payload["result"]
    assert envelope["status"] == "failed" and envelope["runId"] == child
    assert envelope["causeCode"] == "workflow_failed"
    assert "outputSummary" not in envelope  # no step failed: planning did
