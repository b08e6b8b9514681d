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

from little_dist import define_workflow, model
from tests.lwir_builder import fan_in_schema, workflow_doc

__all__ = ["ATTEMPTS", "MAX_TOKENS", "REPLY", "SLOT", "build_script", "fan", "one"]

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


def build_script(quota: Any, *, latency: float = 0.0) -> Any:
    """The provider: the reply after ``latency`` seconds, under ``quota`` (a ProviderQuota)."""
    from little_dist.testing import ScriptedModel

    script = ScriptedModel(latency=latency, quota=quota)
    script.otherwise().reply_text(REPLY, times=None)
    return script
