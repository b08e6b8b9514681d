"""The default harness's tool loop, usage and pricing, errors, tool.call, code.run, fixer,
per-role harnesses — all through the scripted litellm provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from little_dist.errors import LeaseLostError
from little_dist.event_types import typed
from little_dist.events import is_engine_event_type
from little_dist.harness import (
    DEFAULT_HARNESS_ID,
    DefaultHarness,
    DelegateToDefault,
    ExecuteStepResult,
    FixStepResult,
    FixStepTask,
    HarnessCancelled,
    HarnessConfigError,
    HarnessContext,
    HarnessRegistry,
    HarnessTask,
    ModelCallError,
    ResolvedModel,
    ToolCallError,
    TurnLimitError,
    envelope_for,
    role_for_step,
)
from little_dist.pricing import price_model_call
from little_dist.run_state import materialize_run_state
from little_dist.testing import ScriptedModel, ToolCall, Usage
from little_dist.tools import Tool, tool
from little_dist.world.base import run_lease_key
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.harness_helpers import RUN, ai_step, execute, make_ctx, of_type, tool_step


class Counter:
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def hit(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1


def make_tools(counter: Counter) -> list[Tool]:
    @tool
    def lookup(account_id: str) -> dict[str, Any]:
        """Find a customer."""
        counter.hit("lookup")
        return {"account": account_id, "name": "Ada"}

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        counter.hit("add")
        return a + b

    @tool
    def broken(reason: str) -> str:
        """Always fails."""
        counter.hit("broken")
        raise RuntimeError(f"backend down: {reason}")

    return [lookup, add, broken]


def test_tool_loop_with_two_tools_and_a_tool_error(scripted_model: ScriptedModel) -> None:
    counter = Counter()
    scripted_model.on(step="triage").call_tools(
        [ToolCall("lookup", {"account_id": "A1"}), ToolCall("broken", {"reason": "x"})]
    ).then_call_tool("add", {"a": 2, "b": 3}).then_reply_text("Ada, total 5")
    world = MemoryWorld()
    step = ai_step("triage")
    ctx = make_ctx(world, step_path="triage", tools=make_tools(counter))
    result = HarnessRegistry().run_step(execute(step, "who is A1?"), ctx)
    assert result.output == "Ada, total 5"
    assert counter.calls == {"lookup": 1, "broken": 1, "add": 1}
    # The model saw the tool results, the failure as an error object.
    results = scripted_model.calls[1].tool_results
    assert json.loads(results[0]["content"]) == {"account": "A1", "name": "Ada"}
    assert "backend down" in json.loads(results[1]["content"])["error"]
    assert scripted_model.calls[2].tool_results[-1]["content"] == "5"
    assert set(scripted_model.calls[0].tool_names) == {"lookup", "add", "broken"}

    events = world.list_events(RUN)
    started = of_type(events, "harness.tool_call.started")
    assert [
        (e.payload["toolName"], e.payload["turn"], e.payload["callIndex"]) for e in started
    ] == [
        ("lookup", 1, 1),
        ("broken", 1, 2),
        ("add", 2, 1),
    ]
    assert all(e.payload["caller"] == "model" for e in started)
    assert [e.occurrence_id for e in started] == [f"tool:triage:1:{k}" for k in (1, 2, 3)]
    failed = of_type(events, "harness.tool_call.failed")
    assert failed[0].payload["error"]["causeCode"] == "tool_error"
    assert failed[0].occurrence_id == "tool-end:triage:1:2"
    assert [e.occurrence_id for e in of_type(events, "harness.model.called")] == [
        f"model:triage:1:{turn}" for turn in (1, 2, 3)
    ]
    # Every upstream-typed event we wrote validates against the catalogue's payload models.
    for event in events:
        if not is_engine_event_type(event.type):
            typed(event)


def test_turn_limit(scripted_model: ScriptedModel) -> None:
    counter = Counter()
    scripted_model.on(step="draft").call_tool("add", {"a": 1, "b": 1}, times=None)
    ctx = make_ctx(MemoryWorld(), tools=make_tools(counter), max_turns=2)
    with pytest.raises(TurnLimitError) as caught:
        HarnessRegistry().run_step(execute(ai_step()), ctx)
    assert str(caught.value) == "Workflow execute_step task exceeded 2 model turns."
    assert envelope_for(caught.value)["causeCode"] == "max_turns_exceeded"
    assert envelope_for(caught.value)["retriable"] is False
    assert len(scripted_model.calls) == 2 and counter.calls == {"add": 2}


def test_structured_steps_get_no_tools_unless_listed(scripted_model: ScriptedModel) -> None:
    counter = Counter()
    scripted_model.on(step="draft").reply_json({"value": 1}, times=None)
    tools = make_tools(counter)
    spec = {"mode": "object", "schema": {"type": "object"}}
    HarnessRegistry().run_step(execute(ai_step(output=spec)), make_ctx(MemoryWorld(), tools=tools))
    assert scripted_model.calls[0].tool_names == []
    listed = ai_step(output=spec)
    listed["with"]["tools"] = ["add"]
    HarnessRegistry().run_step(execute(listed), make_ctx(MemoryWorld(), tools=tools))
    assert scripted_model.calls[1].tool_names == ["add"]


def test_usage_is_recorded_and_priced_by_the_fold(scripted_model: ScriptedModel) -> None:
    usage = Usage(1200, 80, cached=1000, reasoning=30)
    scripted_model.on(step="draft").reply_text("done", usage=usage)
    world = MemoryWorld()
    ctx = make_ctx(world, pricing_key="openai/gpt-4o-mini")
    HarnessRegistry().run_step(execute(ai_step()), ctx)
    events = world.list_events(RUN)
    responded = of_type(events, "harness.model.responded")[0].payload
    expected_usage = {
        "inputTokens": 1200,
        "outputTokens": 80,
        "cachedInputTokens": 1000,
        "reasoningTokens": 30,
    }
    assert responded["response"]["usage"] == expected_usage
    assert responded["model"] == {"provider": "openai", "modelId": "gpt-4o-mini"}
    completed = of_type(events, "harness.session.completed")[0].payload
    assert completed["usage"] == expected_usage
    state = materialize_run_state(events)
    priced = price_model_call("openai/gpt-4o-mini", expected_usage)
    assert priced.cost_usd is not None and priced.cost_usd > 0
    step_usage = state.steps["draft"].usage
    assert step_usage.cost_usd == pytest.approx(priced.cost_usd)
    assert step_usage.cached_input_tokens == 1000 and step_usage.reasoning_tokens == 30
    assert state.usage.priced_calls == 1


def test_scripted_slot_without_pricing_key_stays_unpriced(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="draft").reply_text("done")
    world = MemoryWorld()
    HarnessRegistry().run_step(execute(ai_step()), make_ctx(world))
    state = materialize_run_state(world.list_events(RUN))
    assert state.usage.unpriced_calls == 1 and state.usage.cost_usd is None


@pytest.mark.parametrize(
    ("kind", "cause", "retriable"),
    [
        ("rate_limit", "model_rate_limited", True),
        ("connection", "model_unavailable", True),
        ("timeout", "model_unavailable", True),
        ("unavailable", "model_unavailable", True),
        ("auth", "runtime_config_error", False),
        ("bad_request", "model_error", False),
        ("context_window", "model_error", False),
    ],
)
def test_provider_errors_map_to_envelopes(
    kind: str, cause: str, retriable: bool, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="draft").raise_error(kind)
    world = MemoryWorld()
    with pytest.raises(ModelCallError) as caught:
        HarnessRegistry().run_step(execute(ai_step()), make_ctx(world))
    envelope = envelope_for(caught.value)
    assert envelope["causeCode"] == cause
    assert envelope["retriable"] is retriable
    assert envelope["name"] == "ModelCallError"
    events = world.list_events(RUN)
    failed = of_type(events, "harness.model.failed")[0]
    assert failed.occurrence_id == "model-end:draft:1:1"
    assert failed.payload["error"] == envelope
    assert of_type(events, "harness.session.failed")[0].payload["error"] == envelope


def test_tool_call_step_is_recorded_with_caller_code_and_memoized() -> None:
    counter = Counter()
    tools = make_tools(counter)
    world = MemoryWorld()
    step = tool_step("fetch", "lookup")
    registry = HarnessRegistry()
    task = execute(step, {"account_id": "A7"})
    ctx = make_ctx(world, step_path="fetch", role="worker.tool-call", tools=tools)
    assert registry.run_step(task, ctx).output == {"account": "A7", "name": "Ada"}
    started = of_type(world.list_events(RUN), "harness.tool_call.started")[0].payload
    assert started["caller"] == "code" and "turn" not in started
    assert started["args"] == {"account_id": "A7"}
    # A retry (attempt 2) reuses the recorded result: the tool is not called again.
    ctx2 = make_ctx(world, step_path="fetch", attempt=2, role="worker.tool-call", tools=tools)
    assert registry.run_step(task, ctx2).output == {"account": "A7", "name": "Ada"}
    assert counter.calls == {"lookup": 1}
    reused = of_type(world.list_events(RUN), "little.harness.tool_call.memoized")
    assert reused[0].occurrence_id == "tool-end:fetch:2:1"


def test_tool_call_step_errors() -> None:
    counter = Counter()
    world = MemoryWorld()
    registry = HarnessRegistry()
    ctx = make_ctx(world, step_path="b", role="worker.tool-call", tools=make_tools(counter))
    with pytest.raises(ToolCallError) as caught:
        registry.run_step(execute(tool_step("b", "broken"), {"reason": "r"}), ctx)
    assert envelope_for(caught.value)["causeCode"] == "tool_error"
    assert envelope_for(caught.value)["retriable"] is True
    ctx = make_ctx(world, step_path="c", role="worker.tool-call", tools=make_tools(counter))
    with pytest.raises(ToolCallError) as caught:
        registry.run_step(execute(tool_step("c", "add"), {"a": "x"}), ctx)
    assert envelope_for(caught.value) | {"message": ""} == {
        "name": "ToolCallError",
        "message": "",
        "causeCode": "tool_input_error",
        "retriable": False,
    }
    ctx = make_ctx(world, step_path="d", role="worker.tool-call")
    with pytest.raises(ToolCallError) as caught:
        registry.run_step(execute(tool_step("d", "nowhere"), {}), ctx)
    assert envelope_for(caught.value)["causeCode"] == "runtime_config_error"


def test_a_code_run_step_that_cannot_be_run_safely_is_a_config_error() -> None:
    step = {
        "id": "compute",
        "uses": "code.run",
        "with": {
            "entrypoint": "main.js",
            "files": {"main.js": {"content": "x", "sha256": "sha256:00"}},
            "sandbox": {"network": "deny"},
        },
        "output": {"mode": "json"},
    }
    assert role_for_step(step) == "worker.code-run"
    world = MemoryWorld()
    with pytest.raises(HarnessConfigError) as caught:
        HarnessRegistry().run_step(
            execute(step, {}), make_ctx(world, step_path="compute", role="worker.code-run")
        )
    assert str(caught.value) == (
        "Workflow code.run step 'compute': code.run step 'compute': entrypoint must be a .ts file"
    )
    envelope = envelope_for(caught.value)
    assert (envelope["causeCode"], envelope["retriable"]) == ("runtime_config_error", False)
    failed = of_type(world.list_events(RUN), "harness.session.failed")[0]
    assert failed.occurrence_id == "session-end:compute:1"
    step["with"]["sandbox"] = {"network": "allow"}  # type: ignore[index]
    with pytest.raises(HarnessConfigError, match=r"only supports sandbox\.network deny"):
        HarnessRegistry().run_step(
            execute(step, {}), make_ctx(world, step_path="compute", role="worker.code-run")
        )


class CodeRunner:
    harness_id = "customCode@1.0.0"

    def __init__(self) -> None:
        self.tasks: list[HarnessTask] = []

    def run(self, task: HarnessTask, ctx: HarnessContext) -> Any:
        self.tasks.append(task)
        if task.kind == "execute_step" and task.step["uses"] == "code.run":
            return ExecuteStepResult({"value": 7})
        return DelegateToDefault()


def test_custom_harness_per_role_and_delegate_to_default(scripted_model: ScriptedModel) -> None:
    custom = CodeRunner()
    registry = HarnessRegistry(overrides={"worker.code-run": custom, "worker.ai-generate": custom})
    world = MemoryWorld()
    code = {"id": "compute", "uses": "code.run", "with": {}, "output": {"mode": "json"}}
    result = registry.run_step(
        execute(code, {}), make_ctx(world, step_path="compute", role="worker.code-run")
    )
    assert result.output == {"value": 7}
    # The ai.generate role's custom harness delegates; the default one answers.
    scripted_model.on(step="draft").reply_text("from default")
    assert registry.run_step(execute(ai_step()), make_ctx(world)).output == "from default"
    # A role without an override uses the default harness directly.
    assert registry.harness_for("fixer") is registry.default
    sessions = of_type(world.list_events(RUN), "harness.session.started")
    assert [(e.payload["stepPath"], e.payload["manifest"]["harnessId"]) for e in sessions] == [
        ("compute", "customCode@1.0.0"),
        ("draft", "customCode@1.0.0"),
        ("draft", DEFAULT_HARNESS_ID),
    ]
    assert [e.occurrence_id for e in sessions] == [
        "session:compute:1",
        "session:draft:1",
        "session:draft:1:default",
    ]
    assert sessions[0].payload["role"] == "worker.code-run"
    assert sessions[0].payload["task"] == {"kind": "execute_step"}
    assert sessions[0].payload["manifestHash"].startswith("sha256:")


def test_wrong_result_kind_is_a_config_error() -> None:
    class Confused:
        harness_id = "confused@1"

        def run(self, task: HarnessTask, ctx: HarnessContext) -> Any:
            return FixStepResult(1, "", 1)

    registry = HarnessRegistry(overrides={"worker.ai-generate": Confused()})
    with pytest.raises(HarnessConfigError, match="'fix_step' result for a 'execute_step'"):
        registry.run_step(execute(ai_step()), make_ctx(MemoryWorld()))


def test_fixer_flow(scripted_model: ScriptedModel) -> None:
    fixed = {"fixedSource": "async ({ input }) => ({ value: 42 })", "output": {"value": 42}}
    scripted_model.on(step="compute").reply_json(fixed)
    step = {
        "id": "compute",
        "uses": "code.run",
        "with": {},
        "onFailure": {
            "fixer": {"model": "model.fast", "maxAttempts": 2, "system": "Fix the code."}
        },
        "output": {"mode": "object", "schema": {"type": "object"}},
    }
    world = MemoryWorld()
    task = FixStepTask(step, {}, {"name": "Error", "message": "compute failed"}, 0)
    result = HarnessRegistry().run(task, make_ctx(world, step_path="compute", role="fixer"))
    assert isinstance(result, FixStepResult)
    assert result.output == {"value": 42}
    assert result.fixed_source == fixed["fixedSource"]
    assert result.attempts == 1
    request = scripted_model.calls[0]
    assert request.messages[0]["content"].startswith("Fix the code.")
    assert "compute failed" in request.last_user_text
    events = world.list_events(RUN)
    assert of_type(events, "harness.session.started")[0].payload["role"] == "fixer"
    completed = of_type(events, "harness.session.completed")[0].payload
    assert completed["output"]["result"]["fixedSource"] == fixed["fixedSource"]


def test_cancelled_attempt_calls_nothing(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="draft").reply_text("never")
    with pytest.raises(HarnessCancelled) as caught:
        HarnessRegistry().run_step(
            execute(ai_step()), make_ctx(MemoryWorld(), cancelled=lambda: True)
        )
    assert envelope_for(caught.value)["causeCode"] == "cancelled"
    assert scripted_model.calls == []


def test_a_superseded_attempt_cannot_record(tmp_path: Any, scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="draft").reply_text("late")
    world = LocalWorld(tmp_path / "world")
    key = run_lease_key(RUN, "step:draft")
    old = world.acquire_lease(key, "worker-a", 30)
    assert old is not None
    world.release_lease(old)
    newer = world.acquire_lease(key, "worker-b", 30)
    assert newer is not None and newer.token > old.token
    with pytest.raises(LeaseLostError):
        HarnessRegistry().run_step(execute(ai_step()), make_ctx(world, fence=old.fence))
    assert world.list_events(RUN) == []
    world.close()


def test_resolved_model_identity() -> None:
    model = ResolvedModel("model.fast", "scripted/demo", pricing_key="openai/gpt-4o-mini")
    assert model.identity() == {"provider": "openai", "modelId": "gpt-4o-mini"}
    assert ResolvedModel("s", "anthropic/claude-x").identity() == {
        "provider": "anthropic",
        "modelId": "claude-x",
    }
    assert ResolvedModel("s", "gpt-4o").identity() == {"provider": "openai", "modelId": "gpt-4o"}


def test_default_harness_is_a_harness() -> None:
    from little_dist.harness import Harness

    assert isinstance(DefaultHarness(), Harness)
    assert isinstance(CodeRunner(), Harness)
