"""The ``--app`` module of the metrics and traces tests: tool calls and priced model calls.

``metrics.fan``: a ``noop`` tool step, then a parallel step of ``ai.generate`` calls over
``input.keys`` (slot ``default``: ``scripted/metrics`` priced as ``openai/gpt-4o-mini``, so
calls cost dollars), each branch allowed ``ATTEMPTS`` attempts (a 429 fails an attempt and
the engine retries it). ``metrics.broken``: one step whose tool raises (the run fails).
:func:`build_script` replies with fixed usage (``USAGE``), under an optional provider quota.
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from little_dist.tools import tool
from tests.lwir_builder import fan_in_schema, workflow_doc

__all__ = ["ATTEMPTS", "USAGE", "broken", "build_script", "explode", "fan", "noop"]

SLOT = "default"
ATTEMPTS = 30
#: (input, output) tokens of every reply.
USAGE = (200, 10)

_SLOT = model("scripted/metrics", id=SLOT, pricing="openai/gpt-4o-mini", max_tokens=32)


@tool
def noop(n: int = 0) -> dict[str, Any]:
    """Do nothing."""
    return {"n": n}


@tool
def explode(n: int = 0) -> dict[str, Any]:
    """Fail."""
    raise RuntimeError("this tool always fails")


_KEYS_INPUT = {
    "type": "object",
    "required": ["keys"],
    "properties": {"keys": {"type": "array", "items": {"type": "string"}}},
}

fan = define_workflow(
    id="metrics.fan",
    description="A tool step, then a parallel step of priced model calls.",
    input=_KEYS_INPUT,
    output={"type": "array"},
    model=_SLOT,
    tools=[noop],
    plan=workflow_doc(
        "metrics.fan",
        [
            {
                "id": "prep",
                "uses": "tool.call",
                "with": {"tool": "noop", "args": {"n": 1}},
                "output": {"mode": "object", "schema": {"type": "object"}},
            },
            {
                "id": "fan",
                "uses": "parallel",
                "needs": ["prep"],
                "with": {
                    "items": "{{ input.keys }}",
                    "itemKey": "{{ item }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 50,
                    "maxConcurrency": 50,
                    "failureMode": "fail_fast",
                    "fanIn": {"order": "input", "output": "array"},
                },
                "output": {"mode": "array", "schema": fan_in_schema({"type": "string"})},
                "steps": [
                    {
                        "id": "ask",
                        "uses": "ai.generate",
                        "with": {"model": SLOT, "prompt": "Say something about {{ item }}."},
                        "output": {"mode": "text"},
                        "retry": {"maxAttempts": ATTEMPTS},
                    }
                ],
            },
        ],
        input_schema=_KEYS_INPUT,
        output_schema={"type": "array"},
        tools=["noop"],
        models=[SLOT],
        version="1.0.0",
    ),
)

broken = define_workflow(
    id="metrics.broken",
    description="One step whose tool fails.",
    input={"type": "object"},
    output={"type": "object"},
    model=_SLOT,
    tools=[explode],
    plan=workflow_doc(
        "metrics.broken",
        [
            {
                "id": "boom",
                "uses": "tool.call",
                "with": {"tool": "explode", "args": {"n": 1}},
                "output": {"mode": "object", "schema": {"type": "object"}},
            }
        ],
        input_schema={"type": "object"},
        output_schema={"type": "object"},
        tools=["explode"],
        models=[],
        version="1.0.0",
    ),
)


def build_script(quota: Any = None, *, latency: float = 0.0) -> Any:
    """The provider: a short reply with :data:`USAGE`, under ``quota`` when given."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel(latency=latency, quota=quota)
    script.otherwise().reply_text("noted", usage=Usage(*USAGE), times=None)
    return script
