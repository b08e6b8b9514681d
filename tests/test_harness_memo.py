"""Memoized resume and large payloads: a retried attempt repeats no side effect and pays
for no token twice; big request/response/tool payloads go to artifacts."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.harness import HarnessRegistry, Memo, ModelCallError
from little_dist.run_state import materialize_run_state
from little_dist.testing import ScriptedModel, ToolCall, Usage
from little_dist.tools import Tool, tool
from little_dist.world.base import World
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.harness_helpers import RUN, ai_step, execute, make_ctx, of_type


def side_effect_tools(counter: dict[str, int]) -> list[Tool]:
    @tool
    def charge(amount: int) -> dict[str, Any]:
        """Charge the card (a side effect)."""
        counter["charge"] = counter.get("charge", 0) + 1
        return {"charged": amount}

    @tool
    def email(to: str) -> str:
        """Send an email (a side effect)."""
        counter["email"] = counter.get("email", 0) + 1
        return f"sent to {to}"

    return [charge, email]


def crash_then_resume(world: World, script: ScriptedModel) -> tuple[dict[str, int], Any]:
    counter: dict[str, int] = {}
    tools = side_effect_tools(counter)
    script.on(step="pay").call_tools(
        [ToolCall("charge", {"amount": 5}, id="c1"), ToolCall("email", {"to": "ada"}, id="c2")],
        usage=Usage(100, 10, cached=40),
    ).then_raise_error("server").then_reply_text("paid and told", usage=Usage(150, 20))
    step = ai_step("pay")
    registry = HarnessRegistry()
    # Attempt 1: turn 1 asks for two tools, both run, then the attempt dies on turn 2.
    with pytest.raises(ModelCallError):
        registry.run_step(execute(step, "pay 5"), make_ctx(world, step_path="pay", tools=tools))
    assert counter == {"charge": 1, "email": 1}
    assert len(script.calls) == 2
    # Attempt 2: turn 1 and both tool results come from the log; only turn 2 is live.
    ctx = make_ctx(world, step_path="pay", attempt=2, tools=tools)
    assert len(ctx.memo) == 3
    result = registry.run_step(execute(step, "pay 5"), ctx)
    return counter, result


@pytest.mark.parametrize("world_kind", ["memory", "local"])
def test_retried_attempt_replays_turns_and_tools(
    world_kind: str, tmp_path: Any, scripted_model: ScriptedModel
) -> None:
    world: World = MemoryWorld() if world_kind == "memory" else LocalWorld(tmp_path / "w")
    counter, result = crash_then_resume(world, scripted_model)
    assert result.output == "paid and told"
    assert counter == {"charge": 1, "email": 1}  # no side effect repeated
    assert len(scripted_model.calls) == 3  # attempt 2 made one provider call
    # The live turn 2 of attempt 2 saw the same conversation a live run would have.
    replayed = scripted_model.calls[2]
    assert [item["content"] for item in replayed.tool_results] == ['{"charged": 5}', "sent to ada"]
    assert replayed.messages[:-2] == scripted_model.calls[1].messages[:-2]

    events = world.list_events(RUN)
    model_reuse = of_type(events, "little.harness.model.memoized")
    tool_reuse = of_type(events, "little.harness.tool_call.memoized")
    assert [e.occurrence_id for e in model_reuse] == ["model-end:pay:2:1"]
    assert [e.occurrence_id for e in tool_reuse] == ["tool-end:pay:2:1", "tool-end:pay:2:2"]
    original = of_type(events, "harness.model.responded")[0]
    assert model_reuse[0].payload["memoizedFrom"] == original.event_id
    assert model_reuse[0].payload["memoized"] is True
    assert "usage" not in model_reuse[0].payload
    # Attempt 2's own live turn is turn 2; the provider failure of attempt 1 stays recorded.
    assert [e.occurrence_id for e in of_type(events, "harness.model.called")] == [
        "model:pay:1:1",
        "model:pay:1:2",
        "model:pay:2:2",
    ]
    # Priced once: turn 1 (attempt 1) and turn 2 (attempt 2); the reuse is not counted.
    usage = materialize_run_state(events).steps["pay"].usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) == (250, 30, 40)
    completed = of_type(events, "harness.session.completed")[0]
    assert completed.payload["usage"]["inputTokens"] == 150
    if isinstance(world, LocalWorld):
        world.close()


class Crash(BaseException):
    """Stands in for the process dying mid-attempt: nothing records an end."""


def test_in_process_resume_of_the_same_attempt_appends_nothing_twice(
    scripted_model: ScriptedModel,
) -> None:
    calls: list[str] = []

    @tool
    def charge(amount: int) -> str:
        """Charge."""
        calls.append("charge")
        return "charged"

    @tool
    def email(to: str) -> str:
        """Email; the process dies during the first call."""
        calls.append("email")
        if calls.count("email") == 1:
            raise Crash()
        return "sent"

    scripted_model.on(step="pay").call_tools(
        [ToolCall("charge", {"amount": 1}, id="c1"), ToolCall("email", {"to": "a"}, id="c2")]
    ).then_reply_text("ok")
    world = MemoryWorld()
    registry = HarnessRegistry()
    with pytest.raises(Crash):
        registry.run_step(
            execute(ai_step("pay")), make_ctx(world, step_path="pay", tools=[charge, email])
        )
    before = world.list_events(RUN)
    assert [e.type for e in before][-1] == "harness.tool_call.started"
    # The same attempt resumed in process: finished facts resolve to their recorded events,
    # only the in-flight tool call runs again.
    ctx = make_ctx(world, step_path="pay", tools=[charge, email])
    assert registry.run_step(execute(ai_step("pay")), ctx).output == "ok"
    assert calls == ["charge", "email", "email"]
    assert len(scripted_model.calls) == 2
    after = world.list_events(RUN)
    assert after[: len(before)] == before
    new_types = [event.type for event in after[len(before) :]]
    assert "little.harness.model.memoized" not in new_types
    assert "little.harness.tool_call.memoized" not in new_types
    assert new_types == [
        "harness.tool_call.succeeded",
        "harness.model.called",
        "harness.model.responded",
        "harness.execute_step.succeeded",
        "harness.session.completed",
    ]


def test_failed_tool_calls_run_again_on_retry(scripted_model: ScriptedModel) -> None:
    attempts: list[int] = []

    @tool
    def flaky(n: int) -> str:
        """Fails the first time."""
        attempts.append(n)
        if len(attempts) == 1:
            raise RuntimeError("transient")
        return "fine"

    scripted_model.on(step="s").call_tool("flaky", {"n": 1}, id="f1").then_raise_error(
        "server"
    ).then_reply_text("done")
    world = MemoryWorld()
    registry = HarnessRegistry()
    with pytest.raises(ModelCallError):
        registry.run_step(execute(ai_step("s")), make_ctx(world, step_path="s", tools=[flaky]))
    result = registry.run_step(
        execute(ai_step("s")), make_ctx(world, step_path="s", attempt=2, tools=[flaky])
    )
    assert result.output == "done"
    assert attempts == [1, 1]
    assert scripted_model.calls[-1].tool_results[0]["content"] == "fine"


def test_large_payloads_go_to_artifacts_and_still_replay(scripted_model: ScriptedModel) -> None:
    big = "x" * 2000
    counter: dict[str, int] = {}

    @tool
    def dump() -> str:
        """Return a lot of text."""
        counter["dump"] = counter.get("dump", 0) + 1
        return big

    scripted_model.on(step="big").call_tool(
        "dump", {}, id="d1", usage=Usage(10, 1)
    ).then_raise_error("server").then_reply_text("y" * 1500, usage=Usage(20, 2))
    world = MemoryWorld()
    registry = HarnessRegistry()
    with pytest.raises(ModelCallError):
        registry.run_step(
            execute(ai_step("big")),
            make_ctx(
                world,
                step_path="big",
                tools=[dump],
                inline_limit=1024,
                pricing_key="openai/gpt-4o-mini",
            ),
        )
    ctx = make_ctx(
        world,
        step_path="big",
        attempt=2,
        tools=[dump],
        inline_limit=1024,
        pricing_key="openai/gpt-4o-mini",
    )
    result = registry.run_step(execute(ai_step("big")), ctx)
    assert result.output == "y" * 1500
    assert counter == {"dump": 1}  # the big result was read back from its artifact
    events = world.list_events(RUN)
    succeeded = of_type(events, "harness.tool_call.succeeded")[0].payload
    assert succeeded["result"] is None
    assert world.get_artifact(succeeded["resultRef"]).payload == big
    called = [e.payload for e in of_type(events, "harness.model.called")]
    with_ref = [p for p in called if "requestRef" in p]
    assert with_ref and with_ref[0]["request"]["messages"] == []
    stored = world.get_artifact(with_ref[0]["requestRef"]).payload
    assert stored["messages"][-1]["content"] == big
    responded = of_type(events, "harness.model.responded")[-1].payload
    assert set(responded["response"]) == {"usage"}
    assert world.get_artifact(responded["responseRef"]).payload["text"] == "y" * 1500
    exec_done = of_type(events, "harness.execute_step.succeeded")[0].payload
    assert "output" not in exec_done and exec_done["outputRef"].startswith("artifact://")
    # The usage stayed inline, so both live calls are priced.
    assert materialize_run_state(events).usage.priced_calls == 2


def test_memo_without_a_world_misses_refs() -> None:
    world = MemoryWorld()
    memo = Memo.from_events(world.list_events(RUN), "nothing")
    assert len(memo) == 0
    assert memo.model_turn(1, "sha256:00") is None
    assert memo.tool_result(None, 1, "t", "sha256:00") is None
