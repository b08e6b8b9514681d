"""The ``--app`` module of the live viewer's tests, beside ``tests.http_fleet_app``.

``viewer.echo``: one step whose tool answers ``{"text": input.text}`` (the run's output is
whatever the submitter wrote: the viewer must show it as text), or fails with that text as
its message when ``input.fail`` is true (both are required).
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from little_dist.tools import tool
from tests.lwir_builder import tool_step, workflow_doc

__all__ = ["echo", "echo_text"]

#: Never called: the plan is fixed and calls a tool only.
_SLOT = model("scripted/viewer", id="default", max_tokens=16)


@tool
def echo_text(text: str, fail: bool = False) -> dict[str, Any]:
    """Answer ``text``; or fail with it as the message."""
    if fail:
        raise RuntimeError(text)
    return {"text": text}


_INPUT = {
    "type": "object",
    "required": ["text", "fail"],
    "properties": {"text": {"type": "string"}, "fail": {"type": "boolean"}},
}

echo = define_workflow(
    id="viewer.echo",
    description="Echo the input's text (or fail with it).",
    input=_INPUT,
    output={"type": "object"},
    model=_SLOT,
    tools=[echo_text],
    plan=workflow_doc(
        "viewer.echo",
        [
            tool_step(
                "say",
                "echo_text",
                {"text": "{{ input.text }}", "fail": "{{ input.fail }}"},
            )
        ],
        input_schema=_INPUT,
    ),
)
