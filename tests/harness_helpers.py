"""Shared helpers for the harness tests (steps, contexts, event filters); no tests here."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from little_dist.events import Event
from little_dist.harness import (
    EventRecorder,
    ExecuteStepTask,
    HarnessContext,
    HarnessRole,
    Memo,
    ResolvedModel,
    SkillDescriptor,
    StepContext,
)
from little_dist.tools import Tool
from little_dist.world.base import Fence, World

RUN = "run_harness"

OBJECT_SCHEMA = {
    "type": "object",
    "required": ["value"],
    "additionalProperties": False,
    "properties": {"value": {"type": "number"}},
}


def ai_step(
    step_id: str = "draft",
    output: dict[str, Any] | None = None,
    *,
    prompt: str = "Produce a value.",
    **extra: Any,
) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": step_id,
        "uses": "ai.generate",
        "with": {"model": "model.fast", "prompt": prompt},
        "output": output or {"mode": "text"},
    }
    step.update(extra)
    return step


def tool_step(step_id: str, tool: str) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "tool.call",
        "with": {"tool": tool, "args": {}},
        "output": {"mode": "json"},
    }


def make_ctx(
    world: World,
    *,
    step_path: str = "draft",
    attempt: int = 1,
    role: HarnessRole = "worker.ai-generate",
    tools: Sequence[Tool] = (),
    fence: Fence | None = None,
    pricing_key: str = "",
    model: str = "scripted/default",
    max_turns: int = 8,
    system: str | None = None,
    skills: Sequence[SkillDescriptor] = (),
    cancelled: Callable[[], bool] | None = None,
    inline_limit: int | None = None,
    run_id: str = RUN,
) -> HarnessContext:
    recorder = (
        EventRecorder(world, run_id, step_path, attempt, fence)
        if inline_limit is None
        else EventRecorder(world, run_id, step_path, attempt, fence, inline_limit=inline_limit)
    )
    memo = Memo.from_events(world.list_events(run_id), step_path, world=world)
    extra: dict[str, Any] = {} if cancelled is None else {"cancelled": cancelled}
    return HarnessContext(
        run_id=run_id,
        role=role,
        model=ResolvedModel("model.fast", model, pricing_key=pricing_key),
        recorder=recorder,
        memo=memo,
        system=system,
        tools={item.name: item for item in tools},
        skills=skills,
        max_turns=max_turns,
        **extra,
    )


def execute(step: dict[str, Any], step_input: Any = "Produce a value.", path: str = "") -> Any:
    return ExecuteStepTask(step, step_input, StepContext(path or step["id"], 0, 1))


def of_type(events: Iterable[Event], *types: str) -> list[Event]:
    return [event for event in events if event.type in types]
