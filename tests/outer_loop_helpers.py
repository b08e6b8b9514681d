"""A workflow, its planner's LWIR and scripted replies for the outer-loop tests."""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from little_dist.authoring import WorkflowDefinition
from little_dist.testing import ScriptedModel
from little_dist.tools import tool

INPUT_SCHEMA = {
    "type": "object",
    "required": ["value"],
    "additionalProperties": False,
    "properties": {"value": {"type": "string"}},
}
OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["result"],
    "additionalProperties": False,
    "properties": {"result": {"type": "string"}},
}

#: Every call of the tool, in this process.
PROCESSED: list[str] = []


@tool
def process(value: str) -> dict[str, str]:
    """Process a value."""
    PROCESSED.append(value)
    if value == "explode":
        raise RuntimeError("the tool exploded")
    return {"result": f"processed:{value}"}


def simple_workflow(**overrides: Any) -> WorkflowDefinition:
    options: dict[str, Any] = {
        "id": "outer-loop-test.simple",
        "description": "A simple workflow for outer-loop tests.",
        "input": INPUT_SCHEMA,
        "output": OUTPUT_SCHEMA,
        "model": model("scripted/planner", id="fast", pricing="openai/gpt-4o-mini"),
        "tools": [process],
    }
    options.update(overrides)
    return define_workflow(**options)


def simple_lwir() -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "outer-loop-test.simple", "version": "0.1.0-alpha"},
        "input": {"schema": INPUT_SCHEMA},
        "output": {"schema": OUTPUT_SCHEMA},
        "permissions": {"tools": ["process"], "models": [], "secrets": [], "network": []},
        "steps": [
            {
                "id": "process",
                "uses": "tool.call",
                "with": {"tool": "process", "args": {"value": "{{ input.value }}"}},
                "output": {"mode": "object", "schema": OUTPUT_SCHEMA},
            }
        ],
    }


def script_planner(script: ScriptedModel, times: int | None = None) -> None:
    """The planner drafts :func:`simple_lwir` (``times`` times; forever when ``None``)."""
    script.on(step="planner").reply_json(simple_lwir(), times=times)


def script_decisions(script: ScriptedModel, *decisions: dict[str, Any]) -> None:
    """The supervisor answers ``decisions`` in order (upstream's JSON form), once each."""
    rule = script.on(step="supervisor")
    for decision in decisions:
        rule.reply_json(decision)


def user_text(call: Any) -> str:
    return str(call.last_user_text)


def system_text(call: Any) -> str:
    return "\n".join(
        str(message.get("content") or "")
        for message in call.messages
        if message.get("role") == "system"
    )
