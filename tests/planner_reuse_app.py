"""The workflow of the planner-reuse-files tests (``tests/test_planner_reuse_files*.py``): a
planned ticket summary, as ``tests.test_planner.ticket_workflow``. Fleet workers and the
attack runner (:mod:`tests.attack_runner`) import it, so it imports nothing from pytest.
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from little_dist.tools import tool

TICKET_SCHEMA = {
    "type": "object",
    "required": ["ticketId", "body"],
    "additionalProperties": False,
    "properties": {"ticketId": {"type": "string"}, "body": {"type": "string"}},
}
SUMMARY_SCHEMA = {
    "type": "object",
    "required": ["summary"],
    "additionalProperties": False,
    "properties": {"summary": {"type": "string"}},
}


@tool
def summarize(ticketId: str, body: str) -> dict[str, str]:
    """Summarize a ticket."""
    return {"summary": f"{ticketId}: {body}"}


summarizer = define_workflow(
    id="support.reuse_files",
    description="Summarize a support ticket.",
    input=TICKET_SCHEMA,
    output=SUMMARY_SCHEMA,
    model=model("scripted/planner", id="fast", pricing="openai/gpt-4o-mini"),
    tools=[summarize],
)


def summary_lwir(**metadata: Any) -> dict[str, Any]:
    """A valid plan of :data:`summarizer` (``metadata`` added to its ``metadata``)."""
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "support.reuse_files", "version": "0.1.0", **metadata},
        "input": {"schema": TICKET_SCHEMA},
        "output": {"schema": SUMMARY_SCHEMA},
        "permissions": {"models": [], "tools": ["summarize"], "secrets": [], "network": []},
        "steps": [
            {
                "id": "summarize",
                "uses": "tool.call",
                "with": {
                    "tool": "summarize",
                    "args": {"ticketId": "{{ input.ticketId }}", "body": "{{ input.body }}"},
                },
                "output": {"mode": "object", "schema": SUMMARY_SCHEMA},
            }
        ],
    }
