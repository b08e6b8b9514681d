"""The ``--app`` module of the fleet tests of skills and capability drift
(``tests/test_skills_fleet.py``).

Fleet workers import it (``little worker --app tests.skills_fleet_app``), so it imports
nothing from pytest. ``refunds`` has one ``ai.generate`` step whose model (the script of
:func:`build_script`) reads the ``refund-policy`` skill with bash, calls ``lookup_order``,
then answers. ``lookup_order``'s description comes from :data:`NOTE_ENV` and it sleeps
:data:`SLEEP_ENV` seconds first: a worker started with another note has another tool.
"""

from __future__ import annotations

import os
import time
from typing import Any

from little_dist import define_workflow, model, skill, tool

__all__ = ["NOTE_ENV", "READ", "SLEEP_ENV", "build_script", "refunds"]

NOTE_ENV = "LITTLE_TEST_LOOKUP_NOTE"
SLEEP_ENV = "LITTLE_TEST_LOOKUP_SLEEP"
READ = "cat /mnt/skills/refund-policy/SKILL.md /mnt/skills/refund-policy/references/limits.md"


@tool(description=os.environ.get(NOTE_ENV, "Look an order up."))
def lookup_order(order: int) -> dict[str, Any]:
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    return {"order": order, "total": 30}


refunds = define_workflow(
    id="fleet.refunds",
    description="Answers a refund question with the refund-policy skill.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/refunds", id="default", description="Scripted model."),
    tools=[lookup_order],
    skills=[skill("skills_fixture/refund-policy")],
    bash={"python": False},
    plan={
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "fleet.refunds", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {
            "models": ["default"],
            "tools": ["lookup_order"],
            "secrets": [],
            "network": [],
        },
        "steps": [
            {
                "id": "answer",
                "uses": "ai.generate",
                "with": {"model": "default", "prompt": "May order 7 be refunded?"},
                "output": {"mode": "text"},
            }
        ],
    },
)


def build_script() -> Any:
    from little_dist.testing import ScriptedModel, ToolCall

    script = ScriptedModel()
    script.on(step="answer").call_tool("bash", {"cmd": READ}, id="read").then_call_tools(
        [ToolCall("lookup_order", {"order": 7}, id="look")]
    ).then_reply_text("refund it")
    return script
