"""Workflows as tools, as upstream shapes them for a calling model: the failed-child envelope
(its bytes, from upstream's ``workflows.test.ts`` and ``workflow-concurrency.ts``) and the
``maxConcurrentWorkflowRuns`` / ``maxQueuedWorkflowRuns`` bounds of a fleet's model turn."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from little_dist import InvalidInputError, define_workflow
from little_dist.harness import HarnessRegistry
from little_dist.harness.errors import SubRunPending
from little_dist.harness.tool_calls import ToolCallInfo
from little_dist.subruns import as_tool
from little_dist.subruns.engine import child_run_id_for
from little_dist.subruns.envelope import (
    failed_envelope,
    failure_summary,
    queue_overflow,
    summarize_workflow_output,
)
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.tools import Tool
from little_dist.world.in_process import MemoryWorld
from tests.harness_helpers import ai_step, execute, make_ctx


def js_stringify(value: Any) -> str:
    """What upstream's ``JSON.stringify`` makes of a plain envelope (insertion order)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --- the envelope's bytes ------------------------------------------------------------------


def test_a_failed_child_with_a_failed_step_as_upstream_forwards_it() -> None:
    # workflows.test.ts: "forwards a failed execution's summary to the model alongside the
    # cause code"; the summary as harness-workflow.ts's runFailureSummary writes it.
    run_id = "run_candidate_review_call_1"
    envelope = failed_envelope(
        status="failed",
        run_id=run_id,
        cause_code="workflow_failed",
        message="scoring service unavailable",
        summary=failure_summary(
            run_id, "review.score", "step_failed", "scoring service unavailable"
        ),
    )
    assert js_stringify(envelope) == (
        '{"status":"failed","runId":"run_candidate_review_call_1",'
        '"causeCode":"workflow_failed","message":"scoring service unavailable",'
        '"outputSummary":"Failed at step \'review.score\' (step_failed): '
        'scoring service unavailable"}'
    )


def test_a_cancelled_child_without_a_summary_has_no_output_summary() -> None:
    # workflows.test.ts: "omits outputSummary from a failed execution that carries no summary";
    # the message is mapWorkflowError's default for a cancelled run.
    envelope = failed_envelope(
        status="cancelled",
        run_id="run_candidate_review_call_1",
        cause_code="cancelled",
        message=None,
        summary=failure_summary("run_candidate_review_call_1", None, "cancelled", ""),
    )
    assert js_stringify(envelope) == (
        '{"status":"cancelled","runId":"run_candidate_review_call_1",'
        '"causeCode":"cancelled","message":"Run was cancelled."}'
    )


@pytest.mark.parametrize(
    ("cause", "message"),
    [
        ("workflow_failed", "Workflow run failed."),
        ("timeout", "Run timed out."),
        ("input_validation", "Input validation failed."),
    ],
)
def test_upstreams_default_messages(cause: str, message: str) -> None:
    envelope = failed_envelope(status="failed", run_id="run_x", cause_code=cause, message="")
    assert envelope["message"] == message


def test_the_queue_overflow_envelope_names_the_budget() -> None:
    # workflows.test.ts: "queueing past maxQueuedWorkflowRuns fails the call and names the
    # budget" (one run admitted, two queued, maxQueuedWorkflowRuns 2: the fourth call).
    refused = queue_overflow("run_candidate_review_call_3", 1, 2, 1, 2)
    assert refused is not None
    assert js_stringify(refused) == (
        '{"status":"failed","runId":"run_candidate_review_call_3",'
        '"causeCode":"max_queued_workflow_runs","message":"Maximum queued workflow runs '
        "exceeded: maxQueuedWorkflowRuns is 2 and 2 workflow runs are already queued for "
        "this session. Wait for the runs in flight to finish before launching more, or raise "
        'the maxQueuedWorkflowRuns workflow budget."}'
    )


@pytest.mark.parametrize(
    ("active", "queued", "limit", "max_queued", "admitted"),
    [
        (0, 0, 1, 0, True),
        (1, 0, 1, 0, False),
        (1, 0, 1, 1, True),
        (1, 1, 1, 1, False),
        (2, 0, 3, 0, True),
        (3, 0, 3, 0, False),
        (10, 99, 10, 100, True),
        (10, 100, 10, 100, False),
        (0, 0, 0, 0, True),  # a limit below 1 is 1, as upstream clamps it
    ],
)
def test_upstreams_queue_formula(
    active: int, queued: int, limit: int, max_queued: int, admitted: bool
) -> None:
    assert (queue_overflow("run_x", active, queued, limit, max_queued) is None) is admitted


def test_a_summary_is_cut_in_utf16_units_and_never_splits_a_pair() -> None:
    # JavaScript counts a string's length in UTF-16 code units: "😀" is two.
    text = "a" + "😀" * 3  # 7 units
    cut = summarize_workflow_output(text, "run_x", max_characters=4)
    assert cut == "a😀…[truncated: 3 of 7 characters; the full value is recorded in run run_x]"
    assert summarize_workflow_output(text, "run_x", max_characters=7) == text


# --- the bounds of a fleet's model turn -----------------------------------------------------


class _Host:
    """A sub-run host that must not be reached."""

    def start(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a child was started")

    def start_many(self, starts: list[Any]) -> None:
        raise AssertionError("a child was started")


def _child() -> Any:
    return define_workflow(
        id="math.kid",
        input={"type": "object"},
        output={"type": "object"},
        model="scripted/kid",
        plan={
            "apiVersion": "littleworkflow.dev/v0.1",
            "kind": "Workflow",
            "metadata": {"name": "math.kid"},
            "input": {"schema": {"type": "object"}},
            "output": {"schema": {"type": "object"}},
            "permissions": {"models": [], "tools": []},
            "steps": [
                {
                    "id": "echo",
                    "uses": "code.run",
                    "with": {"entrypoint": "m.ts", "files": {}, "sandbox": {}},
                }
            ],
        },
    )


def _info(in_flight: int, queued: int, *, started: bool = False) -> ToolCallInfo:
    ctx = SimpleNamespace(
        run_id="run_parent",
        recorder=SimpleNamespace(step_path="boss"),
        sub_runs=_Host(),
        memo=SimpleNamespace(sub_run_started=lambda child: started),
    )
    return ToolCallInfo(
        ctx,  # type: ignore[arg-type]  # the fields the bounds read
        "tool:boss:1:3",
        "math.kid",
        1,
        3,
        "sha256:args",
        "model",
        in_flight,
        queued,
    )


def test_a_call_past_the_concurrent_runs_waits_without_starting_its_child() -> None:
    kid = as_tool(_child(), max_concurrent_workflow_runs=2, max_queued_workflow_runs=5)
    with pytest.raises(SubRunPending) as held:
        kid.call_in_context({}, _info(in_flight=2, queued=4))
    assert held.value.held and held.value.child_run_ids == [] and held.value.starts == []


def test_a_call_past_the_queue_is_refused_with_upstreams_envelope() -> None:
    kid = as_tool(_child(), max_concurrent_workflow_runs=2, max_queued_workflow_runs=5)
    info = _info(in_flight=2, queued=5)
    refused = kid.call_in_context({}, info)
    assert refused["status"] == "failed"
    assert refused["causeCode"] == "max_queued_workflow_runs"
    assert refused["runId"] == child_run_id_for(info)  # the id it would have had
    assert "maxQueuedWorkflowRuns is 5 and 5 workflow runs" in refused["message"]


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("max_concurrent_workflow_runs", 0),
        ("max_concurrent_workflow_runs", 1.5),
        ("max_queued_workflow_runs", -1),
        ("max_queued_workflow_runs", True),
    ],
)
def test_bad_budgets_are_refused(keyword: str, value: Any) -> None:
    with pytest.raises(InvalidInputError, match=f"{keyword} must be an integer"):
        as_tool(_child(), **{keyword: value})


class _Waits(Tool):
    """A tool whose calls wait for a sub-run (``wait``) or are held back, recording what the
    model loop told each about its turn."""

    def __init__(self, name: str, seen: list[tuple[str, int, int]]) -> None:
        super().__init__(name, None, description=name, input_schema={"type": "object"})
        self.seen = seen

    def call_in_context(self, arguments: Any, info: ToolCallInfo) -> Any:
        self.seen.append((self.name, info.in_flight, info.queued))
        if self.name == "held":
            raise SubRunPending([], held=True)
        raise SubRunPending([f"run_child_{info.call_index}"])


def test_the_model_loop_tells_each_call_how_many_of_its_turn_wait(
    scripted_model: ScriptedModel,
) -> None:
    seen: list[tuple[str, int, int]] = []
    scripted_model.on(step="boss").call_tools(
        [
            ToolCall("wait", {}),
            ToolCall("wait", {}),
            ToolCall("held", {}),
            ToolCall("wait", {}),
            ToolCall("held", {}),
        ]
    )
    ctx = make_ctx(
        MemoryWorld(), step_path="boss", tools=[_Waits("wait", seen), _Waits("held", seen)]
    )
    with pytest.raises(SubRunPending) as pending:
        HarnessRegistry().run_step(execute(ai_step("boss")), ctx)
    assert seen == [("wait", 0, 0), ("wait", 1, 0), ("held", 2, 0), ("wait", 2, 1), ("held", 3, 1)]
    assert pending.value.held and len(pending.value.child_run_ids) == 3
