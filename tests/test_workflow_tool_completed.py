"""Workflows as tools, a completed child, as upstream shapes it: the compact envelope a calling
model reads (``compactWorkflowExecution``: ``{status, runId, outputSummary?, outputPath?}``,
bytes from upstream's ``workflows.test.ts`` / ``harness-workflow.test.ts``), the whole
execution code reads (``asHarnessWorkflow``'s), a large output written to the step's scratch
for its bash, and ``definitionIdentity`` / ``executionMode`` / ``workflowBudgets``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import InvalidInputError, define_workflow, model, run_workflow
from little_dist.authoring import WorkflowDefinition
from little_dist.subruns import SUB_RUN_STARTED, as_tool
from little_dist.subruns.envelope import (
    MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS,
    completed_envelope,
    completed_execution,
    failure_summary,
    summarize_workflow_output,
)
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.world.local import LocalWorld
from tests.test_subruns import NUMBER_IN, _doc, double_workflow


def js_stringify(value: Any) -> str:
    """What upstream's ``JSON.stringify`` makes of a plain envelope (insertion order)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()


# --- the envelopes' bytes (upstream's cases as data) ----------------------------------------

ENVELOPES = [
    # workflows.test.ts "workflow tools call runForHarness ... return compact metadata"
    (
        ("run_candidate_review_call_1", "Candidate advances.", None),
        '{"status":"completed","runId":"run_candidate_review_call_1",'
        '"outputSummary":"Candidate advances."}',
    ),
    # compactWorkflowExecution of a completed execution without a summary
    (
        ("run_candidate_review_call_1", None, None),
        '{"status":"completed","runId":"run_candidate_review_call_1"}',
    ),
    # ... and with an outputPath: it comes after outputSummary
    (
        ("run_1", "…", "runs/run_1/output.json"),
        '{"status":"completed","runId":"run_1","outputSummary":"…",'
        '"outputPath":"runs/run_1/output.json"}',
    ),
]


@pytest.mark.parametrize(("args", "expected"), ENVELOPES)
def test_the_compact_envelope_of_a_completed_child(args: tuple[Any, ...], expected: str) -> None:
    assert js_stringify(completed_envelope(*args)) == expected


def test_the_whole_execution_as_as_harness_workflow_returns_it() -> None:
    # harness-workflow.test.ts "summarizes a completed run's output so the calling model can
    # see the result" (protocolVersion, status, runId, output, summary; in that order).
    assert js_stringify(completed_execution("run_summary", {"recommendation": "advance"})) == (
        '{"protocolVersion":1,"status":"completed","runId":"run_summary",'
        '"output":{"recommendation":"advance"},"summary":"{\\"recommendation\\":\\"advance\\"}"}'
    )


SUMMARIES = [
    # harness-workflow.test.ts summarizeWorkflowOutput
    (
        {"recommendation": "advance", "scores": [1, 2, 3], "notes": {"a": 1}},
        '{"recommendation":"advance","scores":[1,2,3],"notes":{"a":1}}',
    ),
    ("plain text result", "plain text result"),
    ("z" * 4096, "z" * 4096),  # exactly the cap: not cut
    (
        "y" * 9000,
        "y" * 4096
        + "…[truncated: 4096 of 9000 characters; the full value is recorded in run run_1]",
    ),
    (
        "a" * 4095 + "😀" * 10,  # the cap lands inside a pair: the lone high surrogate goes
        "a" * 4095
        + "…[truncated: 4095 of 4115 characters; the full value is recorded in run run_1]",
    ),
]


@pytest.mark.parametrize(("output", "expected"), SUMMARIES)
def test_upstreams_summaries(output: Any, expected: str) -> None:
    assert summarize_workflow_output(output, "run_1") == expected


def test_an_oversized_failure_summary_is_capped_at_the_marker() -> None:
    # harness-workflow.test.ts "caps an oversized failure summary"
    summary = failure_summary("run_loud", "review.score", "step_failed", "e" * 20000)
    assert summary is not None
    assert summary.index("…[truncated:") == MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS
    assert "the full value is recorded in run run_loud" in summary


# --- definitionIdentity, executionMode, workflowBudgets, result --------------------------------


def test_identity_and_mode_default_to_the_definition_hash_and_inline() -> None:
    child = double_workflow()
    kid = as_tool(child)
    assert kid.definition_identity == child.definition_hash()
    assert kid.definition_identity.startswith("sha256:")
    assert kid.execution_mode == "inline" and kid.result_shape == "auto"
    assert kid.identity() == {
        "definitionIdentity": child.definition_hash(),
        "executionMode": "inline",
    }


@pytest.mark.parametrize(
    "identity",
    ["sha256:test-candidate-review", {"notApplicable": True, "reason": "test fixture"}],
)
def test_an_explicit_identity_is_kept(identity: Any) -> None:
    # harness-workflow.test.ts "allows callers to provide an explicit workflow definition
    # identity" (and the durable execution mode)
    kid = as_tool(double_workflow(), definition_identity=identity, execution_mode="durable")
    assert kid.definition_identity == identity and kid.execution_mode == "durable"


@pytest.mark.parametrize(
    ("keyword", "value", "says"),
    [
        ("definition_identity", "", "definition_identity must be"),
        ("definition_identity", {"notApplicable": False}, "definition_identity must be"),
        ("definition_identity", {"notApplicable": True, "why": "x"}, "definition_identity must"),
        ("execution_mode", "detached", "execution_mode must be one of inline, durable"),
        ("result", "full", "result must be one of auto, compact, inline"),
        ("workflow_budgets", {"maxModelSteps": 3}, "bounds the calling step's max_turns"),
        ("workflow_budgets", {"maxRuns": 3}, "unknown budget 'maxRuns'"),
        ("workflow_budgets", {"maxQueuedWorkflowRuns": -1}, "max_queued_workflow_runs must"),
        ("workflow_budgets", [1], "workflow_budgets must be a mapping"),
    ],
)
def test_bad_options_are_refused_by_name(keyword: str, value: Any, says: str) -> None:
    with pytest.raises(InvalidInputError, match=r"as_tool\('math\.double'\)") as refused:
        as_tool(double_workflow(), **{keyword: value})
    assert says in str(refused.value)


def test_upstreams_budget_names_set_the_bounds() -> None:
    kid = as_tool(
        double_workflow(),
        workflow_budgets={"maxConcurrentWorkflowRuns": 4, "maxQueuedWorkflowRuns": 0},
    )
    assert (kid.max_concurrent_workflow_runs, kid.max_queued_workflow_runs) == (4, 0)


# --- in process: what each caller reads ----------------------------------------------------

TEXT_OUT = {"type": "string"}


def long_workflow() -> WorkflowDefinition:
    """A child whose text output is as long as its input ``n`` says (the scripted model's)."""
    step = {
        "id": "write",
        "uses": "ai.generate",
        "with": {"model": "kid", "prompt": "Write {{ input.n }}"},
        "output": {"mode": "text"},
    }
    return define_workflow(
        id="text.long",
        description="Write n characters.",
        input=NUMBER_IN,
        output=str,
        model=model("scripted/kid", id="kid"),
        plan=_doc("text.long", NUMBER_IN, TEXT_OUT, step),
    )


def boss_workflow(child: WorkflowDefinition, *, bash: bool, **options: Any) -> WorkflowDefinition:
    tools = ["text.long", "bash"] if bash else ["text.long"]
    step = {
        "id": "boss",
        "uses": "ai.generate",
        "with": {"model": "boss", "prompt": "Go.", "tools": tools},
        "output": {"mode": "text"},
        "_tools": ["text.long"],
    }
    return define_workflow(
        id="text.boss",
        input={"type": "object"},
        output=str,
        model=model("scripted/boss", id="boss"),
        tools=[as_tool(child, **options)],
        bash={} if bash else None,
        plan=_doc("text.boss", {"type": "object"}, TEXT_OUT, step),
    )


def _results(script: ScriptedModel, call: int) -> list[Any]:
    return [
        json.loads(item["content"]) for item in script.calls_for(model="boss")[call].tool_results
    ]


def _children(world: LocalWorld, run_id: str) -> list[str]:
    return [e.payload["childRunId"] for e in world.list_events(run_id) if e.type == SUB_RUN_STARTED]


def test_a_model_reads_the_compact_envelope_and_bash_reads_a_large_output(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    big = "y" * 5000
    scripted_model.on(model="kid", contains="Write 5000").reply_text(big)
    scripted_model.on(model="kid", contains="Write 10").reply_text("x" * 10)
    scripted_model.on(model="boss").call_tools(
        [ToolCall("text__long", {"n": 5000}), ToolCall("text__long", {"n": 10})]
    ).then_call_tool(
        "bash", {"cmd": "cat /mnt/scratch/own/workflow-results/*/output.json"}
    ).then_reply_text("read it")
    result = run_workflow(
        boss_workflow(long_workflow(), bash=True), {}, world=world, run_id="run_b"
    )
    assert result.output == "read it"
    large, small = _children(world, "run_b")
    first, second = _results(scripted_model, 1)
    path = f"/mnt/scratch/own/workflow-results/{large}/output.json"
    # the large one: its summary cut, the whole output in the step's scratch (the model's
    # text of any tool result has sorted keys: the envelope's own order is tested above)
    assert first == completed_envelope(large, summarize_workflow_output(big, large), path)
    assert first["outputSummary"].endswith(
        f"of 5000 characters; the full value is recorded in run {large}]"
    )
    # the small one: upstream's inline adapter's envelope exactly, no file
    assert second == {"status": "completed", "runId": small, "outputSummary": "x" * 10}
    read = _results(scripted_model, 2)[-1]
    assert json.loads(read["stdout"]) == big  # only the large one was written
    started = [e.payload for e in world.list_events("run_b") if e.type == SUB_RUN_STARTED]
    assert [(p["definitionIdentity"], p["executionMode"]) for p in started] == [
        (long_workflow().definition_hash(), "inline")
    ] * 2


def test_without_bash_a_large_output_is_only_summarized(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(model="kid").reply_text("y" * 5000)
    scripted_model.on(model="boss").call_tool("text__long", {"n": 5000}).then_reply_text("ok")
    run_workflow(boss_workflow(long_workflow(), bash=False), {}, world=world, run_id="run_nb")
    (seen,) = _results(scripted_model, 1)
    assert set(seen) == {"status", "runId", "outputSummary"}
    assert len(seen["outputSummary"]) > MAX_WORKFLOW_OUTPUT_SUMMARY_CHARACTERS


def test_result_inline_gives_the_model_the_whole_execution(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(model="kid").reply_text("hello")
    scripted_model.on(model="boss").call_tool("text__long", {"n": 5}).then_reply_text("ok")
    parent = boss_workflow(
        long_workflow(), bash=False, result="inline", definition_identity={"notApplicable": True}
    )
    run_workflow(parent, {}, world=world, run_id="run_in")
    (seen,) = _results(scripted_model, 1)
    (child,) = _children(world, "run_in")
    assert seen == completed_execution(child, "hello")
    (started,) = [e for e in world.list_events("run_in") if e.type == SUB_RUN_STARTED]
    assert started.payload["definitionIdentity"] == {"notApplicable": True}


def test_result_compact_gives_a_tool_call_step_the_envelope(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(model="kid").reply_text("hello", times=None)
    step = {
        "id": "call",
        "uses": "tool.call",
        "with": {"tool": "text.long", "args": {"n": 5}},
        "output": {"mode": "object", "schema": {"type": "object"}},
    }
    plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "text.caller", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "object"}},
        "permissions": {"models": [], "tools": ["text.long"]},
        "steps": [step],
    }
    for shape, expect_output in (("compact", False), ("auto", True)):
        parent = define_workflow(
            id="text.caller",
            input={"type": "object"},
            output={"type": "object"},
            model="scripted/none",
            tools=[as_tool(long_workflow(), result=shape)],
            plan=plan,
        )
        result = run_workflow(parent, {}, world=world, run_id=f"run_{shape}")
        (child,) = _children(world, f"run_{shape}")
        if expect_output:
            assert result.output == completed_execution(child, "hello")
        else:
            assert result.output == {
                "status": "completed",
                "runId": child,
                "outputSummary": "hello",
            }
