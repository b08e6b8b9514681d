"""A tool defined with ``read_only=True`` (``@tool(read_only=True)``) has its call recorded
with the attempt's commit, not in a write of its own before it runs: a ``tool.call`` step of
it is one append to the world where a plain tool's is two. Its events are the same, in the
same order. A crash mid-call leaves nothing of the call in the log, so the retry makes it
again (which is why only a tool that changes nothing may say so)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow
from little_dist.errors import InvalidInputError
from little_dist.events import EventInput
from little_dist.tools import Tool, tool
from little_dist.world.in_process import MemoryWorld
from tests.lwir_builder import workflow_doc

CALLS: list[str] = []


@tool(read_only=True)
def look_up(key: str) -> dict[str, Any]:
    """Read something."""
    CALLS.append(key)
    return {"key": key, "found": True}


@tool
def write_down(key: str) -> dict[str, Any]:
    """Write something (a plain tool: its call is made durable before it runs)."""
    CALLS.append(key)
    return {"key": key, "written": True}


class CountingWorld(MemoryWorld):
    """The in-memory world, noting the event types of each append."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def _append_batch(self, run_id: str, events: Sequence[EventInput], **options: Any) -> Any:
        self.batches.append([event.type for event in events])
        return super()._append_batch(run_id, events, **options)


def _one_step(tool_item: Tool) -> Any:
    step = {
        "id": "call",
        "uses": "tool.call",
        "with": {"tool": tool_item.name, "args": {"key": "k1"}},
        "output": {"mode": "object", "schema": {"type": "object"}},
    }
    plan = workflow_doc(
        f"tools.{tool_item.name}",
        [step],
        input_schema={"type": "object"},
        output_schema={"type": "object"},
        tools=[tool_item.name],
        models=[],
        version="1.0.0",
    )
    return define_workflow(
        id=f"tools.{tool_item.name}",
        description="One tool call.",
        input={"type": "object"},
        output={"type": "object"},
        model=model("scripted/tools", id="slot", description="unused"),
        tools=[tool_item],
        plan=plan,
    )


def _attempt_batches(world: CountingWorld) -> list[list[str]]:
    """The appends from the attempt's start to its commit."""
    first = next(i for i, b in enumerate(world.batches) if "StepAttemptStarted" in b)
    last = next(i for i, b in enumerate(world.batches) if "StepCompleted" in b)
    return world.batches[first : last + 1]


@pytest.mark.parametrize(
    ("tool_item", "appends"), [(look_up, 1), (write_down, 2)], ids=["read_only", "plain"]
)
def test_a_read_only_tool_call_is_recorded_with_the_commit(tool_item: Tool, appends: int) -> None:
    world = CountingWorld()
    CALLS.clear()
    result = run_workflow(_one_step(tool_item), {}, world=world)
    assert result.status == "completed", result
    assert CALLS == ["k1"]
    batches = _attempt_batches(world)
    assert len(batches) == appends, batches
    # The same events either way, in the same order: started before succeeded, both before
    # the step's end.
    types = [kind for batch in batches for kind in batch]
    calls = [t for t in types if t.startswith("harness.tool_call.")]
    assert calls == ["harness.tool_call.started", "harness.tool_call.succeeded"]
    assert types.index("StepAttemptStarted") < types.index("harness.tool_call.started")
    assert types.index("harness.tool_call.succeeded") < types.index("StepCompleted")
    if appends == 2:  # a plain tool's call is in the log before it runs
        assert batches[0][-1] == "harness.tool_call.started"


def test_read_only_is_a_bool_and_says_so() -> None:
    assert look_up.read_only and look_up.records_lazily
    assert not write_down.read_only and not write_down.records_lazily
    schema_tool = Tool.from_json_schema("peek", {"type": "object"}, read_only=True)
    assert schema_tool.records_lazily
    with pytest.raises(InvalidInputError, match="read_only must be True or False"):
        Tool.from_json_schema("peek", {"type": "object"}, read_only="yes")  # type: ignore[arg-type]
