"""The ``--app`` module of the quota tests and of ``bench/quota.py``: model calls under a
provider's rate limit.

``quota.fan``: one parallel step over ``input.keys``, each branch one ``ai.generate`` call
of ``scripted/quota`` (``max_tokens`` 64: what a call reserves for its output, beside its
prompt). A branch may try its call ``ATTEMPTS`` times (the engine retries at once: no
backoff), and every branch ends whatever the others did (``all_settled``), so a fleet without
the limiter, whose calls get 429s, still ends its runs. ``quota.one``: a single such call
(in-process tests).
:func:`build_script` is the scripted provider: a short reply after ``latency`` seconds, and
the provider's own limit (:class:`~little_dist.testing.provider_quota.ProviderQuota`).
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model, tool
from tests.lwir_builder import fan_in_schema, tool_step, workflow_doc

__all__ = [
    "ATTEMPTS",
    "MAX_TOKENS",
    "REPLY",
    "SLOT",
    "build_script",
    "fan",
    "note",
    "noted",
    "one",
    "two",
]

SLOT = "default"
MAX_TOKENS = 64
ATTEMPTS = 30
REPLY = "A short thought, about twenty tokens long, for the quota benchmark."

_SLOT = model("scripted/quota", id=SLOT, max_tokens=MAX_TOKENS)
_KEYS_INPUT = {
    "type": "object",
    "required": ["keys"],
    "properties": {
        "keys": {"type": "array", "items": {"type": "string"}},
        # Words added to every prompt: bigger calls (bench/quota.py --prompt-words).
        "pad": {"type": "string"},
    },
}


def _ask(attempts: int) -> dict[str, Any]:
    return {
        "id": "ask",
        "uses": "ai.generate",
        "with": {
            "model": SLOT,
            "prompt": "Think briefly about item {{ item }} and answer. {{ input.pad }}",
        },
        "output": {"mode": "text"},
        "retry": {"maxAttempts": attempts},
    }


fan = define_workflow(
    id="quota.fan",
    description="A parallel step of model calls under a provider quota.",
    input=_KEYS_INPUT,
    output={"type": "array"},
    model=_SLOT,
    plan=workflow_doc(
        "quota.fan",
        [
            {
                "id": "fan",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.keys }}",
                    "itemKey": "{{ item }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 100,
                    "maxConcurrency": 100,
                    # Every branch ends, a branch out of attempts too (bench/quota.py counts
                    # them when the limiter is off).
                    "failureMode": "all_settled",
                    "fanIn": {"order": "input", "output": "array"},
                },
                "output": {"mode": "array", "schema": fan_in_schema({"type": "string"})},
                "steps": [_ask(ATTEMPTS)],
            }
        ],
        input_schema=_KEYS_INPUT,
        output_schema={"type": "array"},
        models=[SLOT],
        version="1.0.0",
    ),
)

_ITEM_INPUT = {"type": "object", "properties": {"item": {"type": "string"}}}
one = define_workflow(
    id="quota.one",
    description="One model call under a provider quota.",
    input=_ITEM_INPUT,
    output={"type": "string"},
    model=_SLOT,
    plan=workflow_doc(
        "quota.one",
        [{**_ask(3), "with": {"model": SLOT, "prompt": "Think about {{ input.item }}."}}],
        input_schema=_ITEM_INPUT,
        output_schema={"type": "string"},
        models=[SLOT],
        version="1.0.0",
    ),
)


#: ``quota.two``: two model calls one after the other, each step allowed one attempt (a slot
#: given back for quota is free of it).
two = define_workflow(
    id="quota.two",
    description="Two model calls in a row under a provider quota.",
    input=_ITEM_INPUT,
    output={"type": "string"},
    model=_SLOT,
    plan=workflow_doc(
        "quota.two",
        [
            {
                **_ask(1),
                "id": "first",
                "with": {"model": SLOT, "prompt": "First: {{ input.item }}"},
            },
            {
                **_ask(1),
                "id": "second",
                "needs": ["first"],
                "with": {"model": SLOT, "prompt": "Then: {{ steps.first.output }}"},
            },
        ],
        input_schema=_ITEM_INPUT,
        output_schema={"type": "string"},
        models=[SLOT],
        version="1.0.0",
    ),
)


@tool
def note(item: str) -> dict[str, str]:
    """Note the item (no model call: work a slot can do while a call waits for quota)."""
    return {"noted": item}


#: ``quota.note``: one tool step, no model call.
noted = define_workflow(
    id="quota.note",
    description="A tool step and no model call.",
    input=_ITEM_INPUT,
    output={"type": "object"},
    model=_SLOT,
    tools=[note],
    plan=workflow_doc(
        "quota.note",
        [tool_step("note", "note", {"item": "{{ input.item }}"})],
        input_schema=_ITEM_INPUT,
        output_schema={"type": "object"},
        version="1.0.0",
    ),
)


def build_script(quota: Any, *, latency: float = 0.0) -> Any:
    """The provider: the reply after ``latency`` seconds, under ``quota`` (a ProviderQuota)."""
    from little_dist.testing import ScriptedModel

    script = ScriptedModel(latency=latency, quota=quota)
    script.otherwise().reply_text(REPLY, times=None)
    return script
