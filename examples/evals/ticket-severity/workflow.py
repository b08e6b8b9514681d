"""ticket-severity: rate a support ticket "high" or "low" (the workflow the example eval set
in ``examples/evals/`` checks).

Offline by default: a scripted model answers the ``rate`` step ("high" when the ticket
mentions fire, a crash or an outage; "low" otherwise). Set LITTLE_MODEL (and its key) to
rate tickets with a real model, and ``little eval run`` scores that model instead.
"""

from __future__ import annotations

import os

from little_dist import define_workflow, model

REAL_MODEL = os.environ.get("LITTLE_MODEL", "").strip()

if not REAL_MODEL:
    from little_dist.testing import ScriptedModel

    SCRIPT = ScriptedModel()
    for word in ("fire", "crash", "outage"):
        SCRIPT.on(step="rate", contains=word).reply_text("high", times=None)
    SCRIPT.on(step="rate").reply_text("low", times=None)
    SCRIPT.install(model="ticket-severity")

SLOT = model(
    REAL_MODEL or "scripted/ticket-severity",
    id="default",
    **({} if REAL_MODEL else {"pricing": "openai/gpt-4o-mini"}),
)

INPUT = {
    "type": "object",
    "required": ["ticket"],
    "additionalProperties": False,
    "properties": {"ticket": {"type": "string"}},
}
OUTPUT = {"type": "string", "enum": ["high", "low"]}

workflow = define_workflow(
    id="support.ticket-severity",
    description="Rate a support ticket's severity: high or low.",
    input=INPUT,
    output=OUTPUT,
    model=SLOT,
    plan={
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "support.ticket-severity", "version": "0.1.0"},
        "input": {"schema": INPUT},
        "output": {"schema": OUTPUT},
        "permissions": {"models": ["default"], "tools": [], "secrets": [], "network": []},
        "steps": [
            {
                "id": "rate",
                "uses": "ai.generate",
                "with": {
                    "model": "default",
                    "prompt": "Answer high or low: how severe is this ticket? {{ input.ticket }}",
                },
                "output": {"mode": "text"},
            }
        ],
    },
)
