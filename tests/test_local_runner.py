"""run_version end to end on LocalWorld: every step kind, resume after a crash, read-back."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import little_dist.local_runner.runner as local_runner  # (the runner loop decide is patched in)
from little_dist.compiler import WorkflowVersion, compile_lwir
from little_dist.events import EventInput
from little_dist.harness.types import ResolvedModel
from little_dist.local_runner import (
    RunInputError,
    RunMismatchError,
    RunnerBusyError,
    RunStalledError,
    run_version,
)
from little_dist.run_state import RunState
from little_dist.runtime import Capabilities
from little_dist.scheduling import Decision, RunContext
from little_dist.testing import ScriptedModel, Usage
from little_dist.tools import ToolRegistry, tool
from little_dist.world.base import World, run_lease_key
from little_dist.world.local import LocalWorld
from tests.workflows_for_tests import (
    FAN_IN_SCHEMA,
    chain_lwir,
    fan_out_lwir,
    single_tool_lwir,
    tool_step,
)
from tests.workflows_for_tests import tools as test_tools

RUN = "run_local_runner"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "world")
    yield opened
    opened.close()


class Calls:
    """Tools that count their real calls by name."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def registry(self) -> ToolRegistry:
        counts = self.counts

        @tool
        def add(a: int, b: int) -> dict[str, Any]:
            """Add two numbers."""
            counts["add"] += 1
            return {"sum": a + b}

        @tool
        def record_branch(key: str, sleep: float = 0.0) -> dict[str, Any]:
            """Return the key."""
            counts[f"branch:{key}"] += 1
            return {"key": key}

        return ToolRegistry([add, record_branch])


def mixed_lwir() -> dict[str, Any]:
    """tool.call -> ai.generate loop (maxVisits 3) <- decision -> parallel of tool.calls."""
    draft_schema = {
        "type": "object",
        "required": ["text", "good"],
        "properties": {"text": {"type": "string"}, "good": {"type": "boolean"}},
    }
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "tests.mixed"},
        "input": {
            "schema": {
                "type": "object",
                "required": ["a", "keys"],
                "properties": {
                    "a": {"type": "integer"},
                    "keys": {"type": "array", "items": {"type": "string"}},
                },
            }
        },
        "output": {"schema": {"type": "array"}},
        "permissions": {
            "models": ["model.fast"],
            "tools": ["add", "record_branch"],
            "secrets": [],
            "network": [],
        },
        "steps": [
            tool_step("lookup", "add", {"a": "{{ input.a }}", "b": 2}),
            {
                "id": "draft",
                "uses": "ai.generate",
                "needs": ["lookup"],
                "maxVisits": 3,
                "with": {
                    "model": "model.fast",
                    "prompt": "Draft a note about {{ steps.lookup.output.sum }}.",
                },
                "output": {"mode": "object", "schema": draft_schema},
            },
            {
                "id": "check",
                "uses": "decision",
                "needs": ["draft"],
                "maxVisits": 3,
                "with": {
                    "cases": [{"when": "{{ steps.draft.lastOutput.good }}", "to": "fan"}],
                    "default": "draft",
                },
            },
            {
                "id": "fan",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.keys }}",
                    "itemKey": "{{ item }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 10,
                    "maxConcurrency": 2,
                    "failureMode": "all_settled",
                    "fanIn": {"order": "input", "output": "array"},
                },
                "output": {"mode": "array", "schema": FAN_IN_SCHEMA},
                "steps": [tool_step("work", "record_branch", {"key": "{{ item }}"})],
            },
        ],
    }


MIXED_INPUT = {"a": 40, "keys": ["x", "y", "z"]}


def mixed_capabilities(calls: Calls) -> Capabilities:
    model = ResolvedModel("model.fast", "scripted/fast", pricing_key="openai/gpt-4o-mini")
    return Capabilities(tools=calls.registry(), models={"model.fast": model})


def script_drafts(script: ScriptedModel) -> None:
    usage = Usage(1000, 50)
    script.on(step="draft.visit[0]").reply_json({"text": "v1", "good": False}, usage=usage)
    script.on(step="draft.visit[1]").reply_json({"text": "v2", "good": True}, usage=usage)


def step_completions(world: World, run_id: str = RUN) -> Counter[str]:
    return Counter(
        e.payload["stepPath"] for e in world.list_events(run_id) if e.type == "StepCompleted"
    )


def test_mixed_workflow_end_to_end(world: LocalWorld, scripted_model: ScriptedModel) -> None:
    script_drafts(scripted_model)
    calls = Calls()
    version = compile_lwir(mixed_lwir(), input=MIXED_INPUT)
    seen: list[RunState] = []

    state = run_version(
        world,
        version,
        MIXED_INPUT,
        run_id=RUN,
        capabilities=mixed_capabilities(calls),
        progress=seen.append,
    )

    assert state.status == "completed", state.error
    assert [entry["itemKey"] for entry in state.output] == ["x", "y", "z"]
    assert [entry["output"] for entry in state.output] == [{"key": k} for k in "xyz"]
    assert state.steps["lookup"].output == {"sum": 42}
    assert state.steps["draft.visit[1]"].output == {"text": "v2", "good": True}
    assert state.steps["check.visit[0]"].output == {"chosen": "draft"}
    assert state.steps["check.visit[1]"].output == {"chosen": "fan"}
    assert "draft.visit[2]" not in state.steps
    assert calls.counts == Counter({"add": 1, "branch:x": 1, "branch:y": 1, "branch:z": 1})
    assert len(scripted_model.calls) == 2
    prompt = scripted_model.calls[0].last_user_text
    assert "42" in prompt
    assert all(count == 1 for count in step_completions(world).values())
    # Tokens from the scripted usage are folded into the run's usage; progress saw it grow.
    assert state.usage.input_tokens == 2000 and state.usage.output_tokens == 100
    assert state.usage.cost_usd is not None and state.usage.cost_usd > 0
    assert seen and seen[-1].status == "completed"
    assert [s.event_count for s in seen] == sorted(s.event_count for s in seen)
    kinds = [e.type for e in world.list_events(RUN)]
    assert kinds[:2] == ["WorkflowVersionRegistered", "RunStarted"]
    assert kinds[-1] == "RunCompleted"
    assert world.get_version(version.id)["id"] == version.id


def test_finished_run_is_read_back_without_any_call(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    script_drafts(scripted_model)
    calls = Calls()
    version = compile_lwir(mixed_lwir(), input=MIXED_INPUT)
    caps = mixed_capabilities(calls)
    first = run_version(world, version, MIXED_INPUT, run_id=RUN, capabilities=caps)
    events_before = len(world.list_events(RUN))
    model_calls = len(scripted_model.calls)
    tool_calls = sum(calls.counts.values())

    again = run_version(world, version, MIXED_INPUT, run_id=RUN, capabilities=caps)

    assert again == first
    assert len(world.list_events(RUN)) == events_before
    assert len(scripted_model.calls) == model_calls
    assert sum(calls.counts.values()) == tool_calls


class Crash(BaseException):
    """The process dies (not an Exception: nothing in the engine may swallow it)."""


def _run_until_it_dies(
    world: LocalWorld,
    version: Any,
    run_input: Any,
    caps: Capabilities,
    dies_at: Callable[[Sequence[Any]], bool],
) -> None:
    """Run the version until the first append ``dies_at`` picks (its batch is not written),
    where the process 'dies'; the world's appends work again afterwards."""
    original = world.append_batch

    def crashing_append_batch(run_id: str, events: Any, **kwargs: Any) -> Any:
        if dies_at(events):
            raise Crash()
        return original(run_id, events, **kwargs)

    world.append_batch = crashing_append_batch  # type: ignore[method-assign]
    try:
        with pytest.raises(Crash):
            run_version(world, version, run_input, run_id=RUN, capabilities=caps, lease_ttl=0.5)
    finally:
        world.append_batch = original  # type: ignore[method-assign]


def test_resume_after_an_in_process_crash_repeats_no_side_effect(world: LocalWorld) -> None:
    """The process 'dies' right after a branch committed its tool call; the rerun does not
    call it again, and finishes the other branches."""
    calls = Calls()
    caps = Capabilities(tools=calls.registry())
    run_input = {"keys": ["a", "b", "c", "d"], "sleep": 0}
    version = compile_lwir(fan_out_lwir(max_concurrency=1), input=run_input)

    # Die at the first append after the second branch's commit (its tool call is in it).
    _run_until_it_dies(
        world, version, run_input, caps, lambda _: bool(step_completions(world)["fan[b].work"])
    )
    # It died right after b's commit: a and b completed, c not started.
    assert step_completions(world) == Counter({"fan[a].work": 1, "fan[b].work": 1})
    assert calls.counts == Counter({"branch:a": 1, "branch:b": 1})

    state = run_version(world, version, run_input, run_id=RUN, capabilities=caps, lease_ttl=0.5)

    assert state.status == "completed", state.error
    assert calls.counts == Counter({f"branch:{k}": 1 for k in "abcd"})
    assert all(count == 1 for count in step_completions(world).values())


def test_a_crash_between_a_tool_and_its_commit_calls_the_tool_again(world: LocalWorld) -> None:
    """A ``tool.call`` step records its tool's result with its commit: a process that dies
    in between leaves the call in doubt (as one dying during the call does), and the retry,
    once the sweep has failed the dead attempt, calls the tool again."""
    calls = Calls()
    caps = Capabilities(tools=calls.registry())
    run_input = {"keys": ["a", "b"], "sleep": 0}
    version = compile_lwir(fan_out_lwir(max_concurrency=1), input=run_input)

    _run_until_it_dies(
        world,
        version,
        run_input,
        caps,
        lambda events: any(
            e.type == "StepOutputValidated" and e.payload["stepPath"] == "fan[b].work"
            for e in events
        ),
    )
    types = [e.type for e in world.list_events(RUN) if e.payload.get("stepPath") == "fan[b].work"]
    assert "harness.tool_call.started" in types and "harness.tool_call.succeeded" not in types

    state = run_version(world, version, run_input, run_id=RUN, capabilities=caps, lease_ttl=0.5)

    assert state.status == "completed", state.error
    assert calls.counts == Counter({"branch:a": 1, "branch:b": 2})
    events = world.list_events(RUN)
    swept = [
        e
        for e in events
        if e.type == "StepFailed" and e.payload["error"]["causeCode"] == "lease_expired"
    ]
    assert [e.payload["stepPath"] for e in swept] == ["fan[b].work"]
    assert all(count == 1 for count in step_completions(world).values())


def test_bad_input_leaves_the_world_untouched(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "w")
    run_input = {"keys": [1, 2], "sleep": 0}  # keys must be strings
    version = compile_lwir(fan_out_lwir(), input=run_input)
    with pytest.raises(RunInputError) as caught:
        run_version(world, version, run_input, run_id=RUN, capabilities=Capabilities())
    assert caught.value.problems and "keys/0" in caught.value.problems[0]
    assert world.list_run_ids() == []
    assert list((tmp_path / "w" / "versions").iterdir()) == []
    world.close()


def test_resume_with_another_input_is_refused(world: LocalWorld) -> None:
    version = compile_lwir(single_tool_lwir(), input={})
    caps = Capabilities(tools=test_tools)
    run_version(world, version, {}, run_id=RUN, capabilities=caps)
    other = compile_lwir(single_tool_lwir(), input={"x": 1})
    with pytest.raises(RunMismatchError):
        run_version(world, other, {"x": 1}, run_id=RUN, capabilities=caps)
    with pytest.raises(RunMismatchError):
        run_version(world, version, {"x": 1}, run_id=RUN, capabilities=caps)


def test_a_held_run_is_busy(world: LocalWorld) -> None:
    version = compile_lwir(single_tool_lwir(), input={})
    assert world.acquire_lease(run_lease_key(RUN, "runner"), "another-runner", 30) is not None
    notices: list[str] = []
    with pytest.raises(RunnerBusyError):
        run_version(
            world,
            version,
            {},
            run_id=RUN,
            capabilities=Capabilities(tools=test_tools),
            lock_wait=0.3,
            notice=notices.append,
        )
    assert notices and "another runner" in notices[0]
    assert world.list_events(RUN) == []


def test_minted_run_ids_are_fresh(world: LocalWorld) -> None:
    version = compile_lwir(chain_lwir(2), input={})
    caps = Capabilities(tools=test_tools)
    first = run_version(world, version, {}, capabilities=caps)
    second = run_version(world, version, {}, capabilities=caps)
    assert first.run_id != second.run_id
    assert first.run_id.startswith("run_") and len(first.run_id) == 36
    assert first.status == second.status == "completed"
    assert first.output == {"n": 1}


# -- the loop mechanics against a hand-written decide (the real one is tested above) --------


def stub_decide(ctx: RunContext, state: RunState) -> Decision:
    """Two tool steps dispatched together (ignoring needs), then RunCompleted with both."""
    steps = state.steps
    events: list[EventInput] = []
    if not steps:
        for path in ("left", "right"):
            events.append(
                EventInput(
                    type="StepScheduled",
                    occurrence_id=f"sched:{path}:1",
                    payload={"stepPath": path, "stepId": path, "uses": "tool.call"},
                )
            )
        return Decision(tuple(events), (), False)
    from little_dist.scheduling import StepDispatch

    pending = tuple(
        StepDispatch(ctx.run_id, path, path, 1, "worker", "execute_step")
        for path, step in steps.items()
        if step.status == "pending"
    )
    if state.status == "running" and all(s.status == "completed" for s in steps.values()):
        output = {path: step.output for path, step in steps.items()}
        end = EventInput(
            type="RunCompleted",
            occurrence_id="run-end",
            payload={"workflowVersionId": ctx.version.id, "output": output},
        )
        return Decision((end,), (), True)
    return Decision((), pending, state.status in ("completed", "failed"))


def two_step_version() -> WorkflowVersion:
    doc = single_tool_lwir()
    doc["steps"] = [
        tool_step("left", "add", {"a": 1, "b": 1}),
        tool_step("right", "add", {"a": 2, "b": 2}, needs=["left"]),
    ]
    return compile_lwir(doc, input={})


def test_loop_is_driven_by_decide_only(world: LocalWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    decisions: list[int] = []

    def counting(ctx: RunContext, state: RunState) -> Decision:
        decisions.append(state.event_count)
        return stub_decide(ctx, state)

    monkeypatch.setattr(local_runner, "decide", counting)
    calls = Calls()
    state = run_version(
        world, two_step_version(), {}, run_id=RUN, capabilities=Capabilities(tools=calls.registry())
    )
    assert state.status == "completed"
    assert state.output == {"left": {"sum": 2}, "right": {"sum": 4}}
    assert calls.counts == Counter({"add": 2})
    assert decisions == sorted(decisions)  # every decision saw a state at least as new


@pytest.mark.parametrize("step_timeout", [None, 0])
def test_the_runner_decides_once_per_step_of_a_chain(
    world: LocalWorld, monkeypatch: pytest.MonkeyPatch, step_timeout: float | None
) -> None:
    """With the default step timeout (attempts on the pool) and without one (inline): a
    decision that only scheduled the next step is not followed by another on its events."""
    calls: list[int] = []
    real = local_runner.decide

    def counting(ctx: RunContext, state: RunState) -> Decision:
        calls.append(state.event_count)
        return real(ctx, state)

    monkeypatch.setattr(local_runner, "decide", counting)
    version = compile_lwir(chain_lwir(20), input={})
    capabilities = Capabilities(tools=test_tools, step_timeout=step_timeout)
    state = run_version(world, version, {}, run_id=RUN, capabilities=capabilities)
    assert state.status == "completed"
    assert len(calls) == 20 + 2  # one per step, the one that completes the run, the last look


def test_a_chain_runs_each_attempt_on_the_loops_thread_and_progress_on_the_callers(
    world: LocalWorld,
) -> None:
    """With the default step timeout a lone attempt is not handed to the pool: every step of
    a chain runs on one thread (the loop's), and progress is reported on the calling one."""
    threads: list[str] = []

    @tool
    def add(a: int, b: int) -> dict[str, Any]:
        """Add two numbers."""
        threads.append(threading.current_thread().name)
        return {"sum": a + b}

    reported: set[str] = set()
    state = run_version(
        world,
        two_step_version(),
        {},
        run_id=RUN,
        capabilities=Capabilities(tools=ToolRegistry([add])),
        progress=lambda state: reported.add(threading.current_thread().name),
    )
    assert state.status == "completed"
    assert len(threads) == 2 and len(set(threads)) == 1, threads
    assert threads[0].startswith(f"little-loop-{RUN}-")
    assert reported == {threading.current_thread().name}


def test_a_decide_with_nothing_to_do_stalls_loudly(
    world: LocalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_runner, "decide", lambda ctx, state: Decision((), (), False))
    with pytest.raises(RunStalledError):
        run_version(world, two_step_version(), {}, run_id=RUN, capabilities=Capabilities())
    # The runner lock was released: another runner can take the run at once.
    assert world.acquire_lease(run_lease_key(RUN, "runner"), "next", 5) is not None


def test_every_event_a_run_records_has_upstreams_shape(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    # The writers (runner, runtime, recorder, decide) build payloads as dicts for speed; the
    # typed catalogue (little_dist.event_types) checks here that what they wrote is what
    # upstream's validators accept, field by field, and writes back unchanged.
    from little_dist.event_types import parse_event

    script_drafts(scripted_model)
    version = compile_lwir(mixed_lwir(), input=MIXED_INPUT)
    run_version(world, version, MIXED_INPUT, run_id=RUN, capabilities=mixed_capabilities(Calls()))
    log = [event.to_json() for event in world.list_events(RUN)]
    assert {event["type"] for event in log} >= {
        "RunStarted",
        "StepScheduled",
        "StepCompleted",
        "ParallelBranchCompleted",
        "harness.model.responded",
        "harness.tool_call.succeeded",
        "RunCompleted",
    }
    for event in log:
        assert parse_event(event).to_json() == event, event["type"]
