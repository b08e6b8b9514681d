"""A sub-run inherits its parent's denies (upstream's ``inheritPermissions``): the child of
a workflow tool can never call a tool its parent's permission rules deny, whatever its own
rules say; the parent's allows, asks and approver do not pass down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow, tool
from little_dist.authoring import WorkflowDefinition
from little_dist.subruns import SUB_RUN_STARTED, as_tool
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.test_subruns import _doc

NOTE_IN = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key"],
    "properties": {"key": {"type": "string"}},
}
PARENT_IN = {"type": "object", "properties": {}}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()


def child_workflow(seen: list[str], *, permissions: Any = None) -> WorkflowDefinition:
    """The child: one text ai.generate step offered ``lookup``."""

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        seen.append(key)
        return f"value of {key}"

    step = {
        "id": "find",
        "uses": "ai.generate",
        "with": {"model": "kid", "prompt": "Find {{ input.key }}"},
        "output": {"mode": "text"},
        "_tools": ["lookup"],
    }
    return define_workflow(
        id="notes.find",
        description="Find a note.",
        input=NOTE_IN,
        output=str,
        model=model("scripted/kid", id="kid"),
        tools=[lookup],
        plan=_doc("notes.find", NOTE_IN, {"type": "string"}, step),
        permissions=permissions,
    )


def parent_workflow(child: WorkflowDefinition) -> WorkflowDefinition:
    step = {
        "id": "boss",
        "uses": "ai.generate",
        "with": {"model": "boss", "prompt": "Find the note"},
        "output": {"mode": "text"},
        "_tools": ["notes.find"],
    }
    return define_workflow(
        id="notes.parent",
        input=PARENT_IN,
        output=str,
        model=model("scripted/boss", id="boss"),
        tools=[as_tool(child)],
        plan=_doc("notes.parent", PARENT_IN, {"type": "string"}, step),
    )


def _script(scripted_model: ScriptedModel) -> None:
    scripted_model.on(model="boss").call_tool("notes__find", {"key": "k1"}).then_reply_text(
        "parent done"
    )
    scripted_model.on(model="kid").call_tool("lookup", {"key": "k1"}).then_reply_text("child done")


def _child_run(world: LocalWorld, parent_run: str) -> str:
    starts = [e for e in world.list_events(parent_run) if e.type == SUB_RUN_STARTED]
    assert len(starts) == 1
    return str(starts[0].payload["childRunId"])


def _decisions(world: LocalWorld, run_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in world.list_events(run_id) if e.type == "harness.permission.decided"]


def _kid_saw(scripted_model: ScriptedModel) -> str:
    second = scripted_model.calls_for(model="kid")[1]
    return str(second.tool_results[0]["content"])


@pytest.mark.parametrize("where", ["run", "definition"])
def test_a_child_cannot_call_a_tool_its_parent_denies(
    world: LocalWorld, scripted_model: ScriptedModel, where: str
) -> None:
    _script(scripted_model)
    seen: list[str] = []
    # The child's own rules allow everything: the parent's deny still wins.
    child = child_workflow(seen, permissions=[{"tool": "*", "action": "allow"}])
    deny = [{"tool": "look*", "action": "deny"}]
    if where == "run":
        result = run_workflow(
            parent_workflow(child), {}, world=world, run_id="run_p1", permissions=deny
        )
    else:
        import dataclasses

        from little_dist.permissions import tool_permissions

        parent = dataclasses.replace(
            parent_workflow(child), permissions=tool_permissions(deny, "t")
        )
        result = run_workflow(parent, {}, world=world, run_id="run_p1")
    assert result.output == "parent done"
    assert seen == []  # the child's lookup never ran
    kid = _child_run(world, "run_p1")
    decided = [d for d in _decisions(world, kid) if d["toolName"] == "lookup"]
    assert [(d["decision"], d["reason"], d["rule"]) for d in decided] == [
        ("deny", "rule", {"tool": "look*", "action": "deny"})
    ]
    failed = [e for e in world.list_events(kid) if e.type == "harness.tool_call.failed"]
    assert [e.payload["error"]["causeCode"] for e in failed] == ["permission_denied"]
    assert (
        "denied by the workflow's permission rules" in json.loads(_kid_saw(scripted_model))["error"]
    )


def test_without_the_parents_deny_the_childs_call_runs(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    _script(scripted_model)
    seen: list[str] = []
    child = child_workflow(seen)
    # Parent rules that are not denies do not pass down (the child records no decision).
    allow = [{"tool": "notes__find", "action": "allow"}, {"tool": "lookup", "action": "ask"}]
    result = run_workflow(
        parent_workflow(child), {}, world=world, run_id="run_p2", permissions=allow
    )
    assert result.output == "parent done"
    assert seen == ["k1"]
    kid = _child_run(world, "run_p2")
    assert _decisions(world, kid) == []
    assert _kid_saw(scripted_model) == "value of k1"


def test_the_parents_approver_answers_the_childs_own_asks(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    _script(scripted_model)
    seen: list[str] = []
    child = child_workflow(seen, permissions=[{"tool": "lookup", "action": "ask"}])
    asked: list[Any] = []
    result = run_workflow(
        parent_workflow(child),
        {},
        world=world,
        run_id="run_p3",
        # (a run without rules keeps no approver: give the parent one rule)
        permissions=[{"tool": "notes__find", "action": "allow"}],
        on_ask=lambda request: asked.append(request) or True,
    )
    assert result.output == "parent done"
    assert asked == [{"tool": "lookup", "args": {"key": "k1"}}]
    assert seen == ["k1"]
    kid = _child_run(world, "run_p3")
    assert [(d["toolName"], d["decision"], d["reason"]) for d in _decisions(world, kid)] == [
        ("lookup", "allow", "approved")
    ]
