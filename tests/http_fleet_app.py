"""The ``--app`` module of the HTTP API tests (``little serve``, its worker).

``http.steps``: ``pause`` five times in a chain, each waiting ``input.sleep`` seconds, so
a run lasts long enough to watch (and reconnect to) its events mid-run; its output is the
last step's. ``http.broken``: one step whose tool raises (the run fails).
"""

from __future__ import annotations

import time
from typing import Any

from little_dist import define_workflow, model
from little_dist.tools import tool
from tests.lwir_builder import tool_step, workflow_doc

__all__ = ["STEPS", "broken", "explode", "pause", "steps"]

STEPS = 5
#: Never called: the plans are fixed and call tools only.
_SLOT = model("scripted/http", id="default", max_tokens=16)


@tool
def pause(n: int, sleep: float = 0.0) -> dict[str, Any]:
    """Wait ``sleep`` seconds; answer ``n``."""
    time.sleep(sleep)
    return {"n": n}


@tool
def explode(n: int = 0) -> dict[str, Any]:
    """Fail."""
    raise RuntimeError("this tool always fails")


_SLEEP_INPUT = {
    "type": "object",
    "required": ["sleep"],
    "properties": {"sleep": {"type": "number"}},
}

steps = define_workflow(
    id="http.steps",
    description="A chain of pauses.",
    input=_SLEEP_INPUT,
    output={"type": "object"},
    model=_SLOT,
    tools=[pause],
    plan=workflow_doc(
        "http.steps",
        [
            tool_step(
                f"s{index}",
                "pause",
                {"n": index, "sleep": "{{ input.sleep }}"},
                **({"needs": [f"s{index - 1}"]} if index else {}),
            )
            for index in range(STEPS)
        ],
        input_schema=_SLEEP_INPUT,
    ),
)

broken = define_workflow(
    id="http.broken",
    description="One step that fails.",
    input={"type": "object"},
    output={"type": "object"},
    model=_SLOT,
    tools=[explode],
    plan=workflow_doc("http.broken", [tool_step("boom", "explode", {"n": 1})]),
)
