"""Candidate screening: score every candidate in parallel, then write a shortlist.

Run it offline (scripted model, local world)::

    python -m examples.candidate_screening
    little run examples.candidate_screening:workflow \\
        --input examples/inputs/candidate_screening.json
    python -m examples.candidate_screening --planner   # let the planner design the LWIR

Set ``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``) to use a real model.

The fixed plan: a ``parallel`` step fans out over ``input.candidates`` (one branch per
candidate, at most four at a time, every branch settles even if one fails); each branch runs
one ``ai.generate`` scoring step; ``shortlist`` reads the fanned-in scores and writes the
recommendation, which is the workflow's output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from examples._common import SLOT, install_script, model_slot
from examples._common import main as run_main
from little_dist import WorkflowDefinition, define_workflow, skill

__all__ = [
    "PLAN",
    "SAMPLE_INPUT",
    "SCRIPT",
    "WORKFLOWS",
    "Candidate",
    "Screening",
    "Shortlist",
    "build_script",
    "build_workflow",
    "main",
    "planned_workflow",
    "workflow",
]


class Candidate(BaseModel):
    candidate_id: str
    name: str
    resume: str = Field(description="The resume as plain text.")


class Screening(BaseModel):
    """A role and the candidates who applied for it."""

    role: str
    requirements: list[str] = Field(description="What the role needs, most important first.")
    candidates: list[Candidate] = Field(max_length=20)


class Ranked(BaseModel):
    candidate_id: str
    score: float = Field(ge=0, le=10)
    recommendation: Literal["advance", "hold", "reject"]


class Shortlist(BaseModel):
    """Who to interview, and why."""

    shortlist: list[str] = Field(description="Candidate ids to interview, best first.")
    ranking: list[Ranked]
    summary: str


_SCORE_SCHEMA = {
    "type": "object",
    "required": ["candidate_id", "score", "strengths", "concerns", "recommendation"],
    "additionalProperties": False,
    "properties": {
        "candidate_id": {"type": "string"},
        "score": {"type": "number", "minimum": 0, "maximum": 10},
        "strengths": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "concerns": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "recommendation": {"type": "string", "enum": ["advance", "hold", "reject"]},
    },
}


def _plan(input_schema: Any, output_schema: Any) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {
            "name": "hiring.candidate-screening",
            "version": "1.0.0",
            "description": "Score candidates in parallel and shortlist them.",
        },
        "input": {"schema": input_schema},
        "output": {"schema": output_schema},
        "permissions": {"models": [SLOT], "tools": [], "secrets": [], "network": []},
        "steps": [
            {
                "id": "screen",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.candidates }}",
                    "itemKey": "{{ item.candidate_id }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 20,
                    "maxConcurrency": 4,
                    "failureMode": "all_settled",
                    "fanIn": {"order": "input", "output": "array"},
                },
                "steps": [
                    {
                        "id": "score",
                        "uses": "ai.generate",
                        "with": {
                            "model": SLOT,
                            "prompt": (
                                "Role: {{ input.role }}\n"
                                "Requirements: {{ json(input.requirements) }}\n\n"
                                "Candidate {{ item.candidate_id }} ({{ item.name }}):\n"
                                "{{ item.resume }}\n\n"
                                "Score the candidate from 0 to 10 against the requirements, "
                                "list up to three strengths and concerns, and recommend "
                                "advance, hold or reject."
                            ),
                        },
                        "output": {"mode": "object", "schema": _SCORE_SCHEMA},
                    }
                ],
                "output": {
                    "mode": "array",
                    "schema": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["itemKey", "status", "output", "outputRef", "artifacts"],
                            "properties": {
                                "itemKey": {"type": "string"},
                                "status": {"const": "completed"},
                                "output": _SCORE_SCHEMA,
                                "outputRef": {"type": "string"},
                                "artifacts": {"type": "array", "items": {"type": "string"}},
                            },
                        },
                    },
                },
            },
            {
                "id": "shortlist",
                "uses": "ai.generate",
                "needs": ["screen"],
                "with": {
                    "model": SLOT,
                    "prompt": (
                        "Screening scores for the {{ input.role }} role:\n"
                        "{{ json(steps.screen.output) }}\n\n"
                        "Rank every candidate, shortlist the ones worth interviewing (best "
                        "first) and summarise the decision in two sentences."
                    ),
                },
                "output": {"mode": "object", "schema": output_schema},
            },
        ],
    }


def build_workflow(*, fixed_plan: bool = True) -> WorkflowDefinition:
    """The screening workflow; ``fixed_plan=False`` leaves the design to the planner."""
    return define_workflow(
        id="hiring.candidate-screening",
        description=(
            "Screen job candidates: score each candidate against the role's requirements "
            "independently, then rank them and shortlist who to interview."
        ),
        input=Screening,
        output=Shortlist,
        model=model_slot("candidate-screening", "General-purpose model for screening."),
        skills=[
            skill(
                "fair-screening",
                "How to score candidates fairly",
                "Score only against the listed requirements. Ignore names, ages, gaps and "
                "schools; evidence from shipped work counts more than titles.",
            )
        ],
        plan=PLAN if fixed_plan else None,
    )


SAMPLE_INPUT: dict[str, Any] = {
    "role": "Senior Backend Engineer (payments)",
    "requirements": [
        "5+ years building production backend services",
        "Python or Go",
        "Distributed systems: queues, retries, idempotency",
        "Payments or other regulated domains",
    ],
    "candidates": [
        {
            "candidate_id": "c-101",
            "name": "Priya N.",
            "resume": "8 years backend (Go, Python). Led the ledger service at a fintech: "
            "idempotent payment APIs, Kafka, exactly-once reconciliation.",
        },
        {
            "candidate_id": "c-102",
            "name": "Tom B.",
            "resume": "3 years full-stack (TypeScript, React, some Node). Built an internal "
            "admin dashboard and a Stripe checkout integration.",
        },
        {
            "candidate_id": "c-103",
            "name": "Mei L.",
            "resume": "6 years Python at a logistics company: Celery pipelines, Postgres "
            "tuning, on-call lead. No payments experience.",
        },
    ],
}

_SCORES: dict[str, dict[str, Any]] = {
    "c-101": {
        "candidate_id": "c-101",
        "score": 9.1,
        "strengths": ["Payments ledger ownership", "Idempotent API design", "Go and Python"],
        "concerns": ["May expect a staff-level scope"],
        "recommendation": "advance",
    },
    "c-102": {
        "candidate_id": "c-102",
        "score": 4.2,
        "strengths": ["Stripe integration", "Product sense"],
        "concerns": ["Limited backend depth", "Under 5 years experience"],
        "recommendation": "reject",
    },
    "c-103": {
        "candidate_id": "c-103",
        "score": 7.4,
        "strengths": ["Queues and retries at scale", "Operational maturity"],
        "concerns": ["No payments or regulated-domain experience"],
        "recommendation": "advance",
    },
}


def build_script() -> Any:
    """Believable replies for every model call (and the planner), with realistic usage."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel(latency=0.05)
    script.on(step="planner").reply_json(PLAN, usage=Usage(6840, 1910, cached=4608), times=None)
    for candidate_id, score in _SCORES.items():
        script.on(step=f"screen[{candidate_id}].score").reply_json(
            score, usage=Usage(1240, 118, cached=1024), times=None
        )
    script.on(step="shortlist").reply_json(
        {
            "shortlist": ["c-101", "c-103"],
            "ranking": [
                {"candidate_id": "c-101", "score": 9.1, "recommendation": "advance"},
                {"candidate_id": "c-103", "score": 7.4, "recommendation": "advance"},
                {"candidate_id": "c-102", "score": 4.2, "recommendation": "reject"},
            ],
            "summary": "Priya brings direct payments-ledger experience and is the clear first "
            "choice; Mei's distributed-systems depth makes her a strong second despite no "
            "payments background.",
        },
        usage=Usage(2050, 186, cached=1536),
        times=None,
    )
    return script


#: The workflow without a plan (the planner designs it); its schemas shape the fixed plan.
planned_workflow = build_workflow(fixed_plan=False)
PLAN = _plan(planned_workflow.input_schema, planned_workflow.output_schema)
#: The workflow ``little run examples.candidate_screening:workflow`` runs: the fixed plan.
workflow = build_workflow()
#: What a fleet worker started with ``--app examples.candidate_screening`` serves under the
#: workflow's id: the fixed plan, as ``little submit examples.candidate_screening:workflow``
#: runs it (one workflow per id; the planned one:
#: ``--app examples.candidate_screening:planned_workflow``).
WORKFLOWS = [workflow]
#: The installed offline script (``None`` when ``LITTLE_MODEL`` is set).
SCRIPT = install_script("candidate-screening", build_script)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.candidate_screening [--planner]``."""
    return run_main(
        argv,
        name="candidate_screening",
        fixed=workflow,
        planned=planned_workflow,
        sample_input=SAMPLE_INPUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
