"""The app for the standalone LWIR documents in ``examples/lwir/``: their tool and model slots.

An LWIR document names capabilities (``lookupCustomer``, ``model.fast``, ...) that the process
running it provides. This module provides them to ``little run --app examples.lwir_app``
(and to a worker with ``--app examples.lwir_app``)::

    little run examples/lwir/support-triage.json --app examples.lwir_app \\
        --input examples/lwir/inputs/support-triage.json

Offline by default: every slot is bound to ``scripted/lwir-examples``, whose script (canned
replies for the sample inputs in ``examples/lwir/inputs/``, priced as ``openai/gpt-4o-mini``)
is installed for that model name when this module is imported. Set ``LITTLE_MODEL`` (any
litellm model string, and the provider's key) to bind every slot to that model instead.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import Field

from examples._common import MODEL_ENV, PRICING_KEY, install_script, offline
from little_dist import tool
from little_dist.harness.types import ResolvedModel

__all__ = ["MODEL_NAME", "SCRIPT", "SLOTS", "build_script", "lookup_customer", "models", "tools"]

#: The model slots the documents in ``examples/lwir/`` name.
SLOTS = ("model.fast", "model.structured", "model.text")
#: The scripted model every slot is bound to offline (``scripted/<MODEL_NAME>``).
MODEL_NAME = "lwir-examples"

_CUSTOMERS: dict[str, dict[str, Any]] = {
    "acme-42": {"name": "Acme Logistics", "plan": "enterprise", "openTickets": 2},
    "T-1001": {"name": "Bloom Florists", "plan": "pro", "openTickets": 1},
}


@tool(name="lookupCustomer")
def lookup_customer(
    accountId: Annotated[str, Field(description="The customer's account id")],
) -> dict[str, Any]:
    """Look up a customer's name, plan and open tickets by account id."""
    found = _CUSTOMERS.get(accountId, {"name": "Unknown customer", "plan": "free"})
    return {"accountId": accountId, "openTickets": 0, **found}


def _bind(slot: str) -> ResolvedModel:
    if offline():
        return ResolvedModel(
            slot_id=slot, litellm_model=f"scripted/{MODEL_NAME}", pricing_key=PRICING_KEY
        )
    return ResolvedModel(slot_id=slot, litellm_model=os.environ[MODEL_ENV].strip())


tools = [lookup_customer]
models: dict[str, ResolvedModel] = {slot: _bind(slot) for slot in SLOTS}


def build_script() -> Any:
    """Replies for every model step of the three documents, for their sample inputs."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel(latency=0.05)
    # support-triage.json: classify, then (severity high) escalate; reply is there for other
    # routes.
    script.on(step="classify").reply_json(
        {
            "severity": "high",
            "category": "billing",
            "summary": "Enterprise customer's CSV invoice export keeps timing out before "
            "month-end close.",
        },
        usage=Usage(420, 48, cached=256),
        times=None,
    )
    script.on(step="escalate").reply_json(
        {
            "escalated": True,
            "message": "Billing export outage for Acme Logistics (enterprise): CSV invoice "
            "export times out; month-end close tomorrow. Please check the async exporter.",
        },
        usage=Usage(380, 52, cached=256),
        times=None,
    )
    script.on(step="reply").reply_json(
        {"escalated": False, "message": "Thanks for writing in - here is how to fix it."},
        usage=Usage(360, 30, cached=256),
        times=None,
    )
    # summarize-ticket.json
    script.on(step="summarize").reply_json(
        {
            "summary": "The customer cannot sign in since the password reset; the reset "
            "link expired before they used it.",
            "severity": "medium",
        },
        usage=Usage(310, 40, cached=128),
        times=None,
    )
    # candidate-review.json: one scoring branch per sample candidate, then the shortlist.
    for candidate, score in (("c-1", 8.5), ("c-2", 6.0), ("c-3", 9.0)):
        script.on(step=f"score-candidates[{candidate}].score").reply_json(
            {"candidateId": candidate, "score": score},
            usage=Usage(290, 20, cached=128),
            times=None,
        )
    script.on(step="shortlist").reply_json(
        {
            "shortlist": ["c-3", "c-1"],
            "rationale": "c-3 and c-1 have shipped payment systems at scale. c-2 is strong "
            "on frontend work but light on the backend experience the role needs.",
        },
        usage=Usage(520, 64, cached=256),
        times=None,
    )
    return script


#: The installed offline script (``None`` when ``LITTLE_MODEL`` is set).
SCRIPT = install_script(MODEL_NAME, build_script)
