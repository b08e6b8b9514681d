"""Workflows whose steps never finish on their own: the step timeout's tests.

Loaded in process and by fleet workers (``--app tests.hung_app``). ``hang`` blocks its
thread for good (a tool that ignores every cancellation), and counts its calls in the file
named by ``$LITTLE_TEST_SIDE_EFFECTS`` when set. ``slow.model`` calls the scripted model
``scripted/silent``, which the tests script to answer after a day (a provider that never
answers). Both workflows allow a step ``STEP_TIMEOUT`` seconds.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from little_dist import define_workflow, model, tool
from little_dist.testing import ScriptedModel
from tests.lwir_builder import workflow_doc

__all__ = ["STEP_TIMEOUT", "hung_tool", "silent_model", "silent_script"]

STEP_TIMEOUT = 2.0
_FOREVER = threading.Event()  # never set


@tool
def hang(label: str) -> dict[str, Any]:
    """Block forever."""
    path = os.environ.get("LITTLE_TEST_SIDE_EFFECTS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(label + "\n")
    _FOREVER.wait()
    return {"label": label}


@tool
def noop(n: int = 0) -> dict[str, Any]:
    """Do nothing."""
    return {"n": n}


_SILENT = model("scripted/silent", id="model.silent", description="Answers after a day.")

hung_tool = define_workflow(
    id="tests.hung-tool",
    description="A tool step that never returns, then a step that never runs.",
    input={"type": "object"},
    output={"type": "object"},
    model=_SILENT,
    tools=[hang, noop],
    step_timeout=STEP_TIMEOUT,
    plan=workflow_doc(
        "tests.hung-tool",
        [
            {
                "id": "stuck",
                "uses": "tool.call",
                "with": {"tool": "hang", "args": {"label": "{{ input.label }}"}},
                "output": {"mode": "object", "schema": {"type": "object"}},
            },
            {
                "id": "after",
                "uses": "tool.call",
                "needs": ["stuck"],
                "with": {"tool": "noop", "args": {"n": 1}},
                "output": {"mode": "object", "schema": {"type": "object"}},
            },
        ],
        tools=["hang", "noop"],
        models=[],
    ),
)

silent_model = define_workflow(
    id="tests.silent-model",
    description="A model step whose provider never answers.",
    input={"type": "object"},
    output={"type": "object"},
    model=_SILENT,
    step_timeout=STEP_TIMEOUT,
    plan=workflow_doc(
        "tests.silent-model",
        [
            {
                "id": "think",
                "uses": "ai.generate",
                "with": {"model": "model.silent", "prompt": "Say something."},
                "output": {"mode": "object", "schema": {"type": "object"}},
            }
        ],
        tools=[],
        models=["model.silent"],
    ),
)


def silent_script() -> ScriptedModel:
    """A scripted provider that answers every request a day later."""
    script = ScriptedModel()
    script.otherwise().reply_json({"never": True}, latency=86_400.0, times=None)
    return script
