"""Support triage: look up the customer, search the knowledge base, classify, draft a reply.

Run it offline (scripted model, local world)::

    python -m examples.support_triage
    python -m examples.support_triage --planner      # let the planner design the LWIR
    little run examples.support_triage:workflow --input examples/inputs/support_triage.json

Set ``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``) to use a real model.

The fixed plan: two ``tool.call`` steps run side by side (``lookup-customer``,
``search-kb``), ``classify`` reads the customer and the ticket, and ``draft-reply`` writes
the answer from everything before it; its output is the workflow's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from examples._common import SLOT, install_script, model_slot
from examples._common import main as run_main
from little_dist import WorkflowDefinition, define_workflow, skill, tool

__all__ = [
    "PLAN",
    "SAMPLE_INPUT",
    "SCRIPT",
    "WORKFLOWS",
    "Ticket",
    "TriageResult",
    "build_script",
    "build_workflow",
    "lookup_customer",
    "main",
    "planned_workflow",
    "search_knowledge_base",
    "workflow",
]

# -- the domain: a tiny CRM and help centre ---------------------------------------------------

CUSTOMERS: dict[str, dict[str, Any]] = {
    "acme-42": {
        "accountId": "acme-42",
        "name": "Acme Logistics",
        "plan": "enterprise",
        "customerSince": "2021-03-14",
        "openTickets": 2,
    },
    "bloom-7": {
        "accountId": "bloom-7",
        "name": "Bloom Florists",
        "plan": "free",
        "customerSince": "2024-11-02",
        "openTickets": 0,
    },
}

ARTICLES: list[dict[str, str]] = [
    {
        "id": "KB-118",
        "title": "Exporting invoices to CSV",
        "snippet": "Large exports run in the background; split by month if an export times out.",
    },
    {
        "id": "KB-204",
        "title": "Invoice export timeouts on large accounts",
        "snippet": "Exports over 50k rows use the async exporter (Billing > Exports).",
    },
    {
        "id": "KB-031",
        "title": "Resetting your password",
        "snippet": "Use 'Forgot password' on the sign-in page; links expire after 30 minutes.",
    },
]


@tool
def lookup_customer(
    account_id: Annotated[str, Field(description="The customer's account id, e.g. acme-42")],
) -> dict[str, Any]:
    """Look up a customer's profile: name, plan, tenure and open tickets."""
    customer = CUSTOMERS.get(account_id)
    if customer is None:
        return {
            "accountId": account_id,
            "name": "Unknown customer",
            "plan": "free",
            "customerSince": "",
            "openTickets": 0,
        }
    return dict(customer)


@tool
def search_knowledge_base(
    query: Annotated[str, Field(description="Words to search the help centre for")],
    limit: Annotated[int, Field(description="How many articles to return", ge=1, le=5)] = 3,
) -> dict[str, Any]:
    """Search the help centre and return the best-matching articles."""
    words = {word.lower().strip(".,?!") for word in query.split() if len(word) > 2}
    scored = []
    for article in ARTICLES:
        text = f"{article['title']} {article['snippet']}".lower()
        score = sum(1 for word in words if word in text)
        if score:
            scored.append((score, article))
    scored.sort(key=lambda pair: (-pair[0], pair[1]["id"]))
    return {"articles": [article for _, article in scored[:limit]]}


# -- the workflow ------------------------------------------------------------------------------


class Ticket(BaseModel):
    """A support ticket as it arrives."""

    account_id: str = Field(description="The customer's account id.")
    subject: str
    message: str = Field(description="The ticket text as the customer wrote it.")


class TriageResult(BaseModel):
    """What support does with the ticket."""

    category: Literal["billing", "bug", "account", "how_to", "other"]
    severity: Literal["low", "medium", "high"]
    escalate: bool = Field(description="True when an engineer must look at it today.")
    reply: str = Field(description="The reply to send to the customer.")
    articles: list[str] = Field(description="Ids of the help articles the reply cites.")


_CUSTOMER_SCHEMA = {
    "type": "object",
    "required": ["accountId", "name", "plan", "openTickets"],
    "properties": {
        "accountId": {"type": "string"},
        "name": {"type": "string"},
        "plan": {"type": "string", "enum": ["free", "pro", "enterprise"]},
        "customerSince": {"type": "string"},
        "openTickets": {"type": "integer", "minimum": 0},
    },
}
_ARTICLES_SCHEMA = {
    "type": "object",
    "required": ["articles"],
    "properties": {
        "articles": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "title", "snippet"],
                "properties": {
                    "id": {"type": "string"},
                    "title": {"type": "string"},
                    "snippet": {"type": "string"},
                },
            },
        }
    },
}
_CLASSIFICATION_SCHEMA = {
    "type": "object",
    "required": ["category", "severity", "summary"],
    "additionalProperties": False,
    "properties": {
        "category": {"type": "string", "enum": ["billing", "bug", "account", "how_to", "other"]},
        "severity": {"type": "string", "enum": ["low", "medium", "high"]},
        "summary": {"type": "string", "maxLength": 280},
    },
}


def _plan(input_schema: Any, output_schema: Any) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {
            "name": "support.triage",
            "version": "1.0.0",
            "description": "Triage a support ticket and draft the reply.",
        },
        "input": {"schema": input_schema},
        "output": {"schema": output_schema},
        "permissions": {
            "models": [SLOT],
            "tools": ["lookup_customer", "search_knowledge_base"],
            "secrets": [],
            "network": [],
        },
        "steps": [
            {
                "id": "lookup-customer",
                "uses": "tool.call",
                "with": {
                    "tool": "lookup_customer",
                    "args": {"account_id": "{{ input.account_id }}"},
                },
                "output": {"mode": "object", "schema": _CUSTOMER_SCHEMA},
            },
            {
                "id": "search-kb",
                "uses": "tool.call",
                "with": {
                    "tool": "search_knowledge_base",
                    "args": {"query": "{{ input.subject }}", "limit": 3},
                },
                "output": {"mode": "object", "schema": _ARTICLES_SCHEMA},
            },
            {
                "id": "classify",
                "uses": "ai.generate",
                "needs": ["lookup-customer"],
                "with": {
                    "model": SLOT,
                    "prompt": (
                        "A {{ steps.lookup-customer.output.plan }} customer "
                        "({{ steps.lookup-customer.output.openTickets }} open tickets) wrote:\n"
                        "Subject: {{ input.subject }}\n\n{{ input.message }}\n\n"
                        "Classify the ticket. Severity is high only for outages, data loss or "
                        "security problems, or a blocked enterprise customer."
                    ),
                },
                "output": {"mode": "object", "schema": _CLASSIFICATION_SCHEMA},
            },
            {
                "id": "draft-reply",
                "uses": "ai.generate",
                "needs": ["lookup-customer", "search-kb", "classify"],
                "with": {
                    "model": SLOT,
                    "system": "You are a concise, friendly support agent.",
                    "prompt": (
                        "Customer: {{ steps.lookup-customer.output.name }} "
                        "({{ steps.lookup-customer.output.plan }} plan).\n"
                        "Ticket: {{ input.subject }}\n{{ input.message }}\n"
                        "Classification: {{ json(steps.classify.output) }}\n"
                        "Help articles: {{ json(steps.search-kb.output.articles) }}\n\n"
                        "Write the reply, cite the articles you used by id, and escalate when "
                        "the severity is high."
                    ),
                },
                "output": {"mode": "object", "schema": output_schema},
            },
        ],
    }


def build_workflow(*, fixed_plan: bool = True) -> WorkflowDefinition:
    """The triage workflow; ``fixed_plan=False`` leaves the design to the planner."""
    return define_workflow(
        id="support.triage",
        description=(
            "Triage a support ticket: look up the customer, search the knowledge base, "
            "classify the ticket and draft a reply that cites the help articles."
        ),
        input=Ticket,
        output=TriageResult,
        model=model_slot("support-triage", "General-purpose model for support work."),
        tools=[lookup_customer, search_knowledge_base],
        skills=[
            skill(
                "support-tone",
                "House style for customer replies",
                "Greet the customer by company name, keep replies under 120 words, never "
                "promise dates, and sign off as 'The Acme Cloud support team'.",
            )
        ],
        plan=PLAN if fixed_plan else None,
    )


# -- the offline script ------------------------------------------------------------------------


def build_script() -> Any:
    """Believable replies for every model call (and the planner), with realistic usage."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel(latency=0.05)
    script.on(step="planner").reply_json(PLAN, usage=Usage(6120, 1480, cached=4096), times=None)
    script.on(step="classify").reply_json(
        {
            "category": "billing",
            "severity": "high",
            "summary": "Enterprise customer cannot export invoices: CSV export times out "
            "before month-end close.",
        },
        usage=Usage(1380, 64, cached=1152),
        times=None,
    )
    script.on(step="draft-reply").reply_json(
        {
            "category": "billing",
            "severity": "high",
            "escalate": True,
            "reply": (
                "Hi Acme Logistics team, sorry the invoice export is timing out. Exports this "
                "large run on the async exporter: enable it under Billing > Exports (KB-204), "
                "or split the export by month in the meantime (KB-118). I have also asked an "
                "engineer to check your account today. - The Acme Cloud support team"
            ),
            "articles": ["KB-204", "KB-118"],
        },
        usage=Usage(2210, 142, cached=1792),
        times=None,
    )
    return script


SAMPLE_INPUT: dict[str, Any] = {
    "account_id": "acme-42",
    "subject": "Invoice export times out",
    "message": (
        "Our month-end close is tomorrow and the CSV invoice export has timed out three times "
        "today. We have about 80k invoices this month. Is there another way to get them?"
    ),
}

#: The workflow without a plan (the planner designs it); its schemas shape the fixed plan.
planned_workflow = build_workflow(fixed_plan=False)
PLAN = _plan(planned_workflow.input_schema, planned_workflow.output_schema)
#: The workflow ``little run examples.support_triage:workflow`` runs: the fixed plan.
workflow = build_workflow()
#: What a fleet worker started with ``--app examples.support_triage`` serves under the
#: workflow's id: the fixed plan, as ``little submit examples.support_triage:workflow`` runs it (one
#: workflow per id; the planned one: ``--app examples.support_triage:planned_workflow``).
WORKFLOWS = [workflow]
#: The installed offline script (``None`` when ``LITTLE_MODEL`` is set).
SCRIPT = install_script("support-triage", build_script)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.support_triage [--planner]``."""
    return run_main(
        argv,
        name="support_triage",
        fixed=workflow,
        planned=planned_workflow,
        sample_input=SAMPLE_INPUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
