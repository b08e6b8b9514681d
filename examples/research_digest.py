"""A research digest: an orchestrator model fans the work out to two workflows as sub-runs.

Run it offline (scripted model, local world)::

    python -m examples.research_digest
    little report RUN_ID      # the orchestrator's steps, its two sub-runs, the rolled-up cost
    little events RUN_ID      # little.subrun.started / .ended name each child run

Set ``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``) to use a real model.
Offline, every reply is canned for the sample input (``examples/inputs/research_digest.json``):
the scripted orchestrator passes the sample's sources to both tools whatever ``--input`` says.

Three workflows, each defined with ``define_workflow`` and a fixed plan:

* ``digest.summarise`` — a ``parallel`` step summarises each source (one branch per source),
  then ``overview`` writes one paragraph over the per-source summaries;
* ``digest.action-items`` — ``extract`` lists who has to do what, and by when;
* ``digest.research`` (the module's ``workflow``), the orchestrator: one ``ai.generate``
  step, ``orchestrate``, whose model is offered the other two as tools
  (:func:`~little_dist.as_tool`: ``summarise_sources`` and ``extract_action_items``). It
  calls both in one turn; each call is a sub-run — a run of its own, with its own
  WorkflowVersion and event log, whose ``RunStarted`` names the orchestrator's run
  (``parentRunId``) — and the model combines the two results into the digest, the run's
  output.

``little report`` of the orchestrator's run lists the two children (``SUB-RUNS``) and the
tokens and dollars of the whole tree (``TOTAL WITH SUB-RUNS``). A child's run id is derived
from the tool call that started it, so a resumed orchestrator (``--run-id``) finds its
children instead of running them again.

On the fleet, ``little worker --app examples.research_digest`` serves all three workflows
(the module defines each at its top level) and ``little submit
examples.research_digest:workflow --input examples/inputs/research_digest.json --wait`` runs
the digest there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from examples._common import SLOT, install_script, model_slot
from examples._common import main as run_main
from little_dist import WorkflowDefinition, as_tool, define_workflow

__all__ = [
    "ACTION_ITEMS",
    "DIGEST",
    "PLAN",
    "SAMPLE_INPUT",
    "SCRIPT",
    "SUMMARIES",
    "WORKFLOWS",
    "ActionItem",
    "Digest",
    "DigestRequest",
    "Source",
    "action_items_workflow",
    "build_script",
    "build_workflow",
    "main",
    "planned_workflow",
    "summarise_workflow",
    "workflow",
]

#: The tools the orchestrator's model calls: one per child workflow.
SUMMARISE_TOOL = "summarise_sources"
ACTIONS_TOOL = "extract_action_items"


class Source(BaseModel):
    """One document to digest."""

    id: str = Field(min_length=1, description="A short key: letters, digits, dashes.")
    title: str = Field(min_length=1)
    text: str = Field(min_length=1)


class DigestRequest(BaseModel):
    """What to digest: a topic and its sources."""

    topic: str = Field(min_length=1)
    sources: list[Source] = Field(min_length=1, max_length=10)


class SourceSummary(BaseModel):
    source_id: str
    summary: str


class Summaries(BaseModel):
    """``digest.summarise``'s output."""

    overview: str
    per_source: list[SourceSummary]


class ActionItem(BaseModel):
    owner: str
    task: str
    due: str = Field(description="A date (YYYY-MM-DD) or 'unspecified'.")


class ActionItems(BaseModel):
    """``digest.action-items``'s output."""

    action_items: list[ActionItem]


class Digest(BaseModel):
    """The orchestrator's output: the two sub-runs' results, combined."""

    headline: str
    overview: str
    action_items: list[ActionItem]
    source_count: int = Field(ge=0)


_PER_SOURCE = {
    "type": "object",
    "required": ["source_id", "summary"],
    "additionalProperties": False,
    "properties": {"source_id": {"type": "string"}, "summary": {"type": "string"}},
}


def _lwir(name: str, description: str, io: WorkflowDefinition, steps: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "1.0.0", "description": description},
        "input": {"schema": io.input_schema},
        "output": {"schema": io.output_schema},
        "permissions": {"models": [SLOT], "tools": [], "secrets": [], "network": []},
        "steps": steps,
    }


def _summarise_plan(io: WorkflowDefinition) -> dict[str, Any]:
    fanned = {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["itemKey", "status", "output", "outputRef", "artifacts"],
            "properties": {
                "itemKey": {"type": "string"},
                "status": {"const": "completed"},
                "output": _PER_SOURCE,
                "outputRef": {"type": "string"},
                "artifacts": {"type": "array", "items": {"type": "string"}},
            },
        },
    }
    return _lwir(
        "digest.summarise",
        "Summarise each source, then write an overview.",
        io,
        [
            {
                "id": "per_source",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.sources }}",
                    "itemKey": "{{ item.id }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 10,
                    "maxConcurrency": 4,
                    "failureMode": "fail_fast",
                    "fanIn": {"order": "input", "output": "array"},
                },
                "steps": [
                    {
                        "id": "summarise",
                        "uses": "ai.generate",
                        "with": {
                            "model": SLOT,
                            "prompt": (
                                "Topic: {{ input.topic }}\n"
                                "Source {{ item.id }}: {{ item.title }}\n{{ item.text }}\n\n"
                                "Summarise what this source says about the topic in two "
                                "sentences."
                            ),
                        },
                        "output": {"mode": "object", "schema": _PER_SOURCE},
                    }
                ],
                "output": {"mode": "array", "schema": fanned},
            },
            {
                "id": "overview",
                "uses": "ai.generate",
                "needs": ["per_source"],
                "with": {
                    "model": SLOT,
                    "prompt": (
                        "Topic: {{ input.topic }}\n"
                        "Per-source summaries: {{ json(steps.per_source.output) }}\n\n"
                        "Write a one-paragraph overview, and keep each source's summary."
                    ),
                },
                "output": {"mode": "object", "schema": io.output_schema},
            },
        ],
    )


def _actions_plan(io: WorkflowDefinition) -> dict[str, Any]:
    return _lwir(
        "digest.action-items",
        "List the action items the sources contain.",
        io,
        [
            {
                "id": "extract",
                "uses": "ai.generate",
                "with": {
                    "model": SLOT,
                    "prompt": (
                        "Topic: {{ input.topic }}\nSources: {{ json(input.sources) }}\n\n"
                        "List every action item: who owns it, what to do, and the due date "
                        "when one is given."
                    ),
                },
                "output": {"mode": "object", "schema": io.output_schema},
            }
        ],
    )


def _orchestrator_plan(io: WorkflowDefinition) -> dict[str, Any]:
    plan = _lwir(
        "digest.research",
        "Digest the sources by running the summary and action-item workflows.",
        io,
        [
            {
                "id": "orchestrate",
                "uses": "ai.generate",
                "with": {
                    "model": SLOT,
                    "tools": [SUMMARISE_TOOL, ACTIONS_TOOL],
                    "prompt": (
                        "Digest these sources on '{{ input.topic }}': "
                        "{{ json(input.sources) }}\n\n"
                        f"Call {SUMMARISE_TOOL} and {ACTIONS_TOOL} with the topic and the "
                        "sources (both at once), then combine their results: a one-line "
                        "headline, the overview, every action item, and how many sources "
                        "you digested."
                    ),
                },
                "output": {"mode": "object", "schema": io.output_schema},
            }
        ],
    )
    plan["permissions"]["tools"] = [SUMMARISE_TOOL, ACTIONS_TOOL]
    return plan


def _child(
    workflow_id: str, description: str, output: type[BaseModel], plan: Any
) -> WorkflowDefinition:
    """A child workflow, its fixed plan made from its own schemas."""
    options: dict[str, Any] = {
        "id": workflow_id,
        "description": description,
        "input": DigestRequest,
        "output": output,
        "model": model_slot("research-digest", "General-purpose model."),
    }
    return define_workflow(**options, plan=plan(define_workflow(**options)))


#: The two workflows the orchestrator runs as sub-runs.
summarise_workflow = _child(
    "digest.summarise",
    "Summarise each source of a topic in two sentences (one model call per source, in "
    "parallel), then write a one-paragraph overview.",
    Summaries,
    _summarise_plan,
)
action_items_workflow = _child(
    "digest.action-items",
    "Extract the action items of a topic's sources: owner, task and due date of each.",
    ActionItems,
    _actions_plan,
)


def build_workflow(*, fixed_plan: bool = True) -> WorkflowDefinition:
    """The orchestrator; ``fixed_plan=False`` leaves its design to the planner (the children
    keep their fixed plans)."""
    return define_workflow(
        id="digest.research",
        description=(
            "Digest a topic's sources: run the summary workflow and the action-item workflow "
            f"as sub-runs (tools {SUMMARISE_TOOL} and {ACTIONS_TOOL}), then combine their "
            "results into a headline, an overview and the action items."
        ),
        input=DigestRequest,
        output=Digest,
        model=model_slot("research-digest", "Orchestrator model with the two workflows as tools."),
        tools=[
            as_tool(summarise_workflow, name=SUMMARISE_TOOL),
            as_tool(action_items_workflow, name=ACTIONS_TOOL),
        ],
        plan=PLAN if fixed_plan else None,
    )


SAMPLE_INPUT: dict[str, Any] = {
    "topic": "Checkout latency regression in the 4.2 release",
    "sources": [
        {
            "id": "incident-notes",
            "title": "Incident notes, 12 March",
            "text": "p95 checkout latency rose from 420 ms to 1.9 s after 4.2 shipped. The "
            "new fraud-score call runs before the payment call instead of beside it. "
            "Rolled back at 16:40; latency recovered within ten minutes.",
        },
        {
            "id": "retro",
            "title": "Retro meeting, 14 March",
            "text": "Agreed: Dana runs the fraud-score call in parallel again by 21 March; "
            "Luis adds a p95 latency budget check to the release pipeline by 28 March; "
            "Priya writes to the three merchants who saw timeouts this week.",
        },
        {
            "id": "support-thread",
            "title": "Support thread with Acme Shop",
            "text": "Acme saw 312 abandoned checkouts during the incident and asks for a "
            "written explanation and the date the fix ships.",
        },
    ],
}

#: What each child's model answers for the sample input.
SUMMARIES: dict[str, Any] = {
    "overview": "Release 4.2 made the fraud-score call run before the payment call, which "
    "quadrupled p95 checkout latency until the rollback; the team agreed to parallelise the "
    "call again and to gate releases on a latency budget, and merchants such as Acme want "
    "an explanation and a ship date.",
    "per_source": [
        {
            "source_id": "incident-notes",
            "summary": "p95 checkout latency went from 420 ms to 1.9 s after 4.2 because "
            "the fraud-score call was serialised before payment. A rollback restored it.",
        },
        {
            "source_id": "retro",
            "summary": "The retro assigned the fix (parallel fraud-score call), a release "
            "latency check, and merchant outreach, each with an owner.",
        },
        {
            "source_id": "support-thread",
            "summary": "Acme Shop lost 312 checkouts during the incident and wants a written "
            "explanation and the fix's ship date.",
        },
    ],
}
ACTION_ITEMS: dict[str, Any] = {
    "action_items": [
        {
            "owner": "Dana",
            "task": "Run the fraud-score call in parallel again",
            "due": "2026-03-21",
        },
        {
            "owner": "Luis",
            "task": "Add a p95 latency budget check to the release pipeline",
            "due": "2026-03-28",
        },
        {
            "owner": "Priya",
            "task": "Write to the merchants who saw timeouts, Acme Shop first",
            "due": "unspecified",
        },
    ]
}
#: The orchestrator's final answer: the two results combined.
DIGEST: dict[str, Any] = {
    "headline": "4.2's serialised fraud-score call quadrupled checkout latency; fix due 21 March",
    "overview": SUMMARIES["overview"],
    "action_items": ACTION_ITEMS["action_items"],
    "source_count": 3,
}


def build_script() -> Any:
    """Believable replies for every model call of the three workflows (and the planner)."""
    from little_dist.testing import ScriptedModel, ToolCall, Usage

    script = ScriptedModel(latency=0.05)
    script.on(step="planner").reply_json(PLAN, usage=Usage(5120, 1380, cached=3072), times=None)
    for item in SUMMARIES["per_source"]:
        script.on(step=f"per_source[{item['source_id']}].summarise").reply_json(
            item, usage=Usage(980, 120, cached=512), times=None
        )
    script.on(step="overview").reply_json(
        SUMMARIES, usage=Usage(1460, 210, cached=1024), times=None
    )
    script.on(step="extract").reply_json(
        ACTION_ITEMS, usage=Usage(2140, 260, cached=1536), times=None
    )
    # The orchestrator: with both results in hand, the digest; before, both calls at once.
    script.on(step="orchestrate", match=lambda request: len(request.tool_results) >= 2).reply_json(
        DIGEST, usage=Usage(2630, 310, cached=1792), times=None
    )
    request = {"topic": SAMPLE_INPUT["topic"], "sources": SAMPLE_INPUT["sources"]}
    script.on(step="orchestrate").call_tools(
        [ToolCall(SUMMARISE_TOOL, request), ToolCall(ACTIONS_TOOL, request)],
        usage=Usage(1850, 240, cached=1024),
        times=None,
    )
    return script


#: The orchestrator without a plan (the planner designs it); its schemas shape the fixed plan.
planned_workflow = build_workflow(fixed_plan=False)
PLAN = _orchestrator_plan(planned_workflow)
#: The workflow ``little run examples.research_digest:workflow`` runs: the fixed plan.
workflow = build_workflow()
#: What a fleet worker started with ``--app examples.research_digest`` serves under the
#: workflow's id: the fixed plan, as ``little submit examples.research_digest:workflow``
#: runs it (one workflow per id; the planned one:
#: ``--app examples.research_digest:planned_workflow``).
WORKFLOWS = [workflow]
#: The installed offline script (``None`` when ``LITTLE_MODEL`` is set).
SCRIPT = install_script("research-digest", build_script)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.research_digest [--planner]``."""
    return run_main(
        argv,
        name="research_digest",
        fixed=workflow,
        planned=planned_workflow,
        sample_input=SAMPLE_INPUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
