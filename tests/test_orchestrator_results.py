"""Model-facing sub-run results as upstream's orchestrator gives them: with bash (its result
store), the output is a file in the attempt's scratch (``outputPath``) plus a summary; the
file is readable by the orchestrator's bash, by a later step's, and again after a replay."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from little_dist import define_workflow, model
from little_dist.api import run_workflow
from little_dist.scratch import scratch_files
from little_dist.subruns import orchestrator_tools, output_summary, run_orchestration
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.tools import tool
from little_dist.world.local import LocalWorld
from tests.test_subruns import double_workflow

BOSS = model("scripted/boss", id="boss", pricing="openai/gpt-4o-mini")
RESULT_GLOB = "/mnt/scratch/own/workflow-results/*/output.json"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()


def tool_results(script: ScriptedModel, call: int) -> list[Any]:
    return [
        json.loads(item["content"]) for item in script.calls_for(model="boss")[call].tool_results
    ]


def test_with_bash_the_output_is_a_file_the_orchestrators_bash_reads(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(model="kid", contains="Double 7").reply_json({"value": 14})
    scripted_model.on(model="boss").call_tool(
        "start_workflow", {"workflowId": "math.double", "input": {"n": 7}}
    ).then_call_tool("bash", {"cmd": f"cat {RESULT_GLOB}"}).then_reply_text("14")

    result = run_orchestration(
        [double_workflow()], {}, model=BOSS, world=world, run_id="run_files", bash={}
    )
    assert result.output == "14"

    (started,) = tool_results(scripted_model, 1)
    child = started["runId"]
    assert "output" not in started
    assert started["status"] == "completed"
    assert started["outputPath"] == f"/mnt/scratch/own/workflow-results/{child}/output.json"
    assert started["outputSummary"] == output_summary({"value": 14})
    assert started["outputSummary"]["fields"] == ["value"]
    read = tool_results(scripted_model, 2)[-1]
    assert json.loads(read["stdout"]) == {"value": 14}
    # Published with the step's scratch: what a later step sees as its peer's files.
    published = scratch_files(world.list_events("run_files"))["orchestrate"]
    assert f"workflow-results/{child}/output.json" in published


def test_a_later_steps_bash_reads_the_file(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    double = double_workflow()
    tools = orchestrator_tools([double])
    steps = [
        {
            "id": "fan",
            "uses": "ai.generate",
            "with": {"model": "boss", "prompt": "Double 5.", "tools": ["start_workflow", "bash"]},
            "output": {"mode": "text"},
        },
        {
            "id": "read",
            "uses": "ai.generate",
            "needs": ["fan"],
            "with": {"model": "boss", "prompt": "Read it.", "tools": ["bash"]},
            "output": {"mode": "text"},
        },
    ]
    plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "two.steps", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["boss"], "tools": ["start_workflow"]},
        "steps": steps,
    }
    wf = define_workflow(
        id="two.steps",
        input={"type": "object"},
        output=str,
        model=BOSS,
        tools=tools,
        bash={},
        plan=plan,
    )
    scripted_model.on(model="kid", contains="Double 5").reply_json({"value": 10})
    scripted_model.on(model="boss", step="fan").call_tool(
        "start_workflow", {"workflowId": "math.double", "input": {"n": 5}}
    ).then_reply_text("started")
    scripted_model.on(model="boss", step="read").call_tool(
        "bash", {"cmd": "cat /mnt/scratch/peer-steps/fan/workflow-results/*/output.json"}
    ).then_reply_text("done")

    result = run_workflow(wf, {}, world=world, run_id="run_two")
    assert result.output == "done"
    read_call = scripted_model.calls_for(model="boss", step="read")[1]
    (read,) = [json.loads(item["content"]) for item in read_call.tool_results]
    assert json.loads(read["stdout"]) == {"value": 10}


def test_a_replayed_call_writes_the_file_again(
    world: LocalWorld, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    scripted_model.on(model="kid", contains="Double 3").reply_json({"value": 6})
    scripted_model.on(model="boss").call_tool(
        "start_workflow", {"workflowId": "math.double", "input": {"n": 3}}
    ).then_reply_text("6")
    tools = orchestrator_tools([double_workflow()])
    run_orchestration([double_workflow()], {}, model=BOSS, world=world, run_id="run_r", bash={})
    (value,) = tool_results(scripted_model, 1)

    own = tmp_path / "own"  # a retried attempt's scratch: empty
    own.mkdir()
    bash = SimpleNamespace(own_folder=lambda: own)
    ctx = SimpleNamespace(tools={"bash": bash}, recorder=SimpleNamespace(world=world))
    start = next(item for item in tools if item.name == "start_workflow")
    start.replayed_in_context(value, ctx)  # type: ignore[attr-defined]
    written = own / "workflow-results" / value["runId"] / "output.json"
    assert json.loads(written.read_text()) == {"value": 6}
    assert written.read_text() == json.dumps({"value": 6}, indent=2) + "\n"


def test_a_failed_child_is_an_error_result_not_a_file(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(model="kid").raise_error("server", times=None)
    scripted_model.on(model="boss").call_tool(
        "start_workflow", {"workflowId": "math.double", "input": {"n": 2}}
    ).then_reply_text("failed")
    run_orchestration([double_workflow()], {}, model=BOSS, world=world, run_id="run_f", bash={})
    (failed,) = tool_results(scripted_model, 1)
    assert failed["status"] == "failed"
    assert set(failed) == {"workflowVersionId", "runId", "status", "error"}
    assert failed["error"]["message"]


# -- maxConcurrentSubRuns ----------------------------------------------------------------------

_active = {"now": 0, "most": 0}
_lock = threading.Lock()


@tool
def probe(n: int) -> dict[str, int]:
    """Hold a place for a moment and count how many are held at once."""
    with _lock:
        _active["now"] += 1
        _active["most"] = max(_active["most"], _active["now"])
    time.sleep(0.3)
    with _lock:
        _active["now"] -= 1
    return {"value": n}


def _probe_workflow() -> Any:
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    out = {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}
    step = {
        "id": "probe",
        "uses": "tool.call",
        "with": {"tool": "probe", "args": {"n": "{{ input.n }}"}},
        "output": {"mode": "object", "schema": out},
    }
    return define_workflow(
        id="math.probe",
        input=schema,
        output=out,
        model=model("scripted/kid", id="kid"),
        tools=[probe],
        plan={
            "apiVersion": "littleworkflow.dev/v0.1",
            "kind": "Workflow",
            "metadata": {"name": "math.probe", "version": "1.0.0"},
            "input": {"schema": schema},
            "output": {"schema": out},
            "permissions": {"models": [], "tools": ["probe"]},
            "steps": [step],
        },
    )


FAN_OUT = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["itemKey", "status", "output", "outputRef", "artifacts"],
        "properties": {
            "itemKey": {"type": "string"},
            "status": {"const": "completed"},
            "output": {"type": "string"},
            "outputRef": {"type": "string"},
            "artifacts": {"type": "array", "items": {"type": "string"}},
        },
    },
}


def _fan_out(limit: int) -> Any:
    """Three parallel branches, each a model that starts a sub-run, sharing one gate."""
    tools = orchestrator_tools([_probe_workflow()], max_concurrent_sub_runs=limit)
    branch = {
        "id": "start",
        "uses": "ai.generate",
        "with": {"model": "boss", "prompt": "Start {{ item }}", "tools": ["start_workflow"]},
        "output": {"mode": "text"},
    }
    fan = {
        "id": "fan",
        "uses": "parallel",
        "with": {
            "items": "{{ input.items }}",
            "itemKey": "{{ item }}",
            "cardinality": {"kind": "matches_items"},
            "maxBranches": 3,
            "maxConcurrency": 3,
            "failureMode": "fail_fast",
            "fanIn": {"order": "input", "output": "array"},
        },
        "steps": [branch],
        "output": {"mode": "array", "schema": FAN_OUT},
    }
    schema = {"type": "object", "properties": {"items": {"type": "array"}}}
    return define_workflow(
        id=f"fan.{limit}",
        input=schema,
        output=FAN_OUT,
        model=BOSS,
        tools=tools,
        plan={
            "apiVersion": "littleworkflow.dev/v0.1",
            "kind": "Workflow",
            "metadata": {"name": f"fan.{limit}", "version": "1.0.0"},
            "input": {"schema": schema},
            "output": {"schema": FAN_OUT},
            "permissions": {"models": ["boss"], "tools": ["start_workflow"]},
            "steps": [fan],
        },
    )


@pytest.mark.parametrize(("limit", "most"), [(1, 1), (3, 3)])
def test_max_concurrent_sub_runs_gates_concurrent_calls(
    world: LocalWorld, scripted_model: ScriptedModel, limit: int, most: int
) -> None:
    _active.update(now=0, most=0)
    for n in (1, 2, 3):
        scripted_model.on(model="boss", contains=f"Start {n}").call_tools(
            [ToolCall("start_workflow", {"workflowId": "math.probe", "input": {"n": n}})]
        ).then_reply_text(f"started {n}")
    result = run_workflow(_fan_out(limit), {"items": ["1", "2", "3"]}, world=world)
    assert result.status == "completed"
    # Calls over the limit wait for a place (upstream's gate); none is refused.
    assert _active["most"] == most
