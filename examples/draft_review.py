"""Draft -> review -> decision loop: rewrite until the reviewer approves, then publish.

Run it offline (scripted model, local world)::

    python -m examples.draft_review
    little run examples.draft_review:workflow --input examples/inputs/draft_review.json
    python -m examples.draft_review --planner      # let the planner design the LWIR

Set ``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``) to use a real model.

The fixed plan loops: ``draft`` writes (or rewrites, using the reviewer's last notes),
``review`` checks the draft against the brief, and the ``route`` decision sends an approved
draft on to ``publish`` and anything else back to ``draft``. Every step in the loop has
``maxVisits: 3``, so a draft that is never approved fails the run with causeCode
``max_visits_exceeded`` instead of looping forever. Loop steps run at paths
``draft.visit[0]``, ``draft.visit[1]``, ... (see ``little report``). In the offline script the
reviewer asks for changes once, so the run takes two rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from examples._common import SLOT, install_script, model_slot
from examples._common import main as run_main
from little_dist import WorkflowDefinition, define_workflow, skill

__all__ = [
    "MAX_ROUNDS",
    "PLAN",
    "SAMPLE_INPUT",
    "SCRIPT",
    "WORKFLOWS",
    "Brief",
    "Published",
    "build_script",
    "build_workflow",
    "main",
    "planned_workflow",
    "workflow",
]

#: ``maxVisits`` of the loop's steps: at most this many drafts.
MAX_ROUNDS = 3


class Brief(BaseModel):
    """What to write."""

    topic: str
    audience: str
    key_points: list[str] = Field(description="Points the piece must make.")
    max_words: int = Field(ge=50, le=1000)


class Published(BaseModel):
    """The approved piece."""

    title: str
    body: str
    word_count: int = Field(ge=0)
    review_notes: str = Field(description="What the reviewer said when approving it.")


_DRAFT_SCHEMA = {
    "type": "object",
    "required": ["title", "body"],
    "additionalProperties": False,
    "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
}
_REVIEW_SCHEMA = {
    "type": "object",
    "required": ["approved", "score", "feedback"],
    "additionalProperties": False,
    "properties": {
        "approved": {"type": "boolean"},
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "feedback": {"type": "string"},
    },
}


def _plan(input_schema: Any, output_schema: Any) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {
            "name": "content.draft-review",
            "version": "1.0.0",
            "description": "Draft, review and revise until approved, then publish.",
        },
        "input": {"schema": input_schema},
        "output": {"schema": output_schema},
        "permissions": {"models": [SLOT], "tools": [], "secrets": [], "network": []},
        "steps": [
            {
                "id": "draft",
                "uses": "ai.generate",
                "maxVisits": MAX_ROUNDS,
                "with": {
                    "model": SLOT,
                    "prompt": (
                        "Write a piece on '{{ input.topic }}' for {{ input.audience }} in at "
                        "most {{ input.max_words }} words. It must make these points: "
                        "{{ json(input.key_points) }}. If reviewer notes follow, address "
                        "every one of them."
                    ),
                },
                "output": {"mode": "object", "schema": _DRAFT_SCHEMA},
            },
            {
                "id": "review",
                "uses": "ai.generate",
                "needs": ["draft"],
                "maxVisits": MAX_ROUNDS,
                "with": {
                    "model": SLOT,
                    "prompt": (
                        "Review this draft against the brief (audience: {{ input.audience }}; "
                        "points: {{ json(input.key_points) }}; at most {{ input.max_words }} "
                        "words).\n\n# {{ steps.draft.lastOutput.title }}\n"
                        "{{ steps.draft.lastOutput.body }}\n\n"
                        "Approve it only if it makes every point clearly and fits the limit."
                    ),
                },
                "output": {"mode": "object", "schema": _REVIEW_SCHEMA},
            },
            {
                "id": "route",
                "uses": "decision",
                "needs": ["review"],
                "maxVisits": MAX_ROUNDS,
                "with": {
                    "cases": [{"when": "{{ steps.review.lastOutput.approved }}", "to": "publish"}],
                    "default": "draft",
                },
            },
            {
                "id": "publish",
                "uses": "ai.generate",
                "needs": ["draft", "review"],
                "with": {
                    "model": SLOT,
                    "prompt": (
                        "Final copy-edit, without changing the meaning:\n"
                        "# {{ steps.draft.lastOutput.title }}\n{{ steps.draft.lastOutput.body }}"
                        "\n\nReviewer notes: {{ steps.review.lastOutput.feedback }}\n"
                        "Return the title, the body, its word count and the reviewer notes."
                    ),
                },
                "output": {"mode": "object", "schema": output_schema},
            },
        ],
    }


def build_workflow(*, fixed_plan: bool = True) -> WorkflowDefinition:
    """The draft-review workflow; ``fixed_plan=False`` leaves the design to the planner."""
    return define_workflow(
        id="content.draft-review",
        description=(
            "Write a short piece from a brief: draft it, have a reviewer check it against the "
            "brief, revise until the reviewer approves (at most three rounds), then publish."
        ),
        input=Brief,
        output=Published,
        model=model_slot("draft-review", "General-purpose writing model."),
        skills=[
            skill(
                "house-style",
                "The publication's house style",
                "Plain English, active voice, no exclamation marks, sentence-case titles.",
            )
        ],
        plan=PLAN if fixed_plan else None,
    )


SAMPLE_INPUT: dict[str, Any] = {
    "topic": "Why idempotency keys make payment retries safe",
    "audience": "product managers new to payments",
    "key_points": [
        "Networks fail after the charge, not only before it",
        "An idempotency key lets the server recognise a retry",
        "Keys must be stored with the result, not just the request",
    ],
    "max_words": 180,
}

_FIRST_DRAFT = {
    "title": "Retries without double charges",
    "body": "When a payment request times out, the app cannot tell whether the charge went "
    "through. Retrying blindly can charge the customer twice. Idempotency keys fix this: the "
    "client sends the same key with every retry.",
}
_SECOND_DRAFT = {
    "title": "Retries without double charges",
    "body": "A payment request can fail after the bank has already charged the card: the "
    "response is lost, not the charge. Retrying blindly would charge the customer twice. An "
    "idempotency key solves this. The client creates one key per payment and sends it with "
    "every retry, so the server recognises a retry and returns the first result instead of "
    "charging again. That only works if the server stores the key together with the result "
    "of the first attempt - storing the request alone would not tell it what to answer.",
}


def build_script() -> Any:
    """Believable replies for every model call (and the planner), with realistic usage:
    the reviewer asks for changes once, so the loop runs two rounds."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel(latency=0.05)
    script.on(step="planner").reply_json(PLAN, usage=Usage(6420, 1650, cached=4352), times=None)
    script.on(step="draft.visit[0]").reply_json(
        _FIRST_DRAFT, usage=Usage(980, 96, cached=768), times=None
    )
    script.on(step="review.visit[0]").reply_json(
        {
            "approved": False,
            "score": 3,
            "feedback": "Say that the failure can happen after the charge, and explain that "
            "the server must store the key with the result of the first attempt.",
        },
        usage=Usage(1160, 58, cached=1024),
        times=None,
    )
    script.on(step="draft.visit[1]").reply_json(
        _SECOND_DRAFT, usage=Usage(1040, 142, cached=768), times=None
    )
    script.on(step="review.visit[1]").reply_json(
        {"approved": True, "score": 5, "feedback": "All three points land; fits the limit."},
        usage=Usage(1220, 31, cached=1024),
        times=None,
    )
    script.on(step="publish").reply_json(
        {
            **_SECOND_DRAFT,
            "word_count": len(_SECOND_DRAFT["body"].split()),
            "review_notes": "All three points land; fits the limit.",
        },
        usage=Usage(1130, 150, cached=896),
        times=None,
    )
    return script


#: The workflow without a plan (the planner designs it); its schemas shape the fixed plan.
planned_workflow = build_workflow(fixed_plan=False)
PLAN = _plan(planned_workflow.input_schema, planned_workflow.output_schema)
#: The workflow ``little run examples.draft_review:workflow`` runs: the fixed plan.
workflow = build_workflow()
#: What a fleet worker started with ``--app examples.draft_review`` serves under the
#: workflow's id: the fixed plan, as ``little submit examples.draft_review:workflow`` runs it (one
#: workflow per id; the planned one: ``--app examples.draft_review:planned_workflow``).
WORKFLOWS = [workflow]
#: The installed offline script (``None`` when ``LITTLE_MODEL`` is set).
SCRIPT = install_script("draft-review", build_script)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.draft_review [--planner]``."""
    return run_main(
        argv,
        name="draft_review",
        fixed=workflow,
        planned=planned_workflow,
        sample_input=SAMPLE_INPUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
