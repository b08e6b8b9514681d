"""A support triage step that learns across runs through its workflow's memory.

Run it twice offline (scripted model, local world; the commands run in the kernel sandbox, so
bubblewrap must be installed, as the README's setup does)::

    python -m examples.known_issues     # a new issue: recorded in memory
    python -m examples.known_issues     # the same ticket again: a known issue
    little memory cat --workflow support.known-issues known-issues.md

Set ``LITTLE_MODEL=openai/gpt-4o-mini`` (and ``OPENAI_API_KEY``) to use a real model.

The fixed plan has one ``ai.generate`` step, ``triage``, whose model has the ``bash`` tool.
Its prompt asks it to read ``/mnt/memory/workflow/known-issues.md`` (the workflow's memory
store, writable, kept across runs: files under ``.little-workflow/memory/`` here, S3 objects
and a Redis index on the fleet), say whether the ticket is a known issue, and append the issue
when it is new. What the command writes there is published with the step's commit (a
``harness.file.created`` event, root ``memory``), so the next run (on this machine or on any
worker) reads it. ``/mnt/memory/org/`` (the organisation's notes) is mounted read-only beside
it. The skill folder ``examples/skills/known-issues/`` says how the list is kept; the model
reads its ``SKILL.md`` at ``/mnt/skills/known-issues/`` (read-only). In the offline script the
first run finds no notes and records the issue; a later run finds it and answers that it is
known.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from examples._common import SLOT, install_script, model_slot
from examples._common import main as run_main
from little_dist import WorkflowDefinition, define_workflow, skill

__all__ = [
    "ISSUE",
    "NOTES",
    "PLAN",
    "SAMPLE_INPUT",
    "SCRIPT",
    "SKILLS",
    "SKILL_FILE",
    "WORKFLOWS",
    "Ticket",
    "build_script",
    "build_workflow",
    "main",
    "planned_workflow",
    "workflow",
]

#: The memory file the workflow keeps its known issues in.
NOTES = "/mnt/memory/workflow/known-issues.md"
#: The issue the sample ticket is about (the offline script's answer).
ISSUE = "csv-export-timeout"

#: Where the triage step's model reads the team's notes convention: the skill folder
#: ``examples/skills/known-issues/`` (its ``SKILL.md``), mounted read-only for bash.
SKILLS: tuple[Any, ...] = (skill("skills/known-issues"),)
#: The skill's instructions, as the model's bash sees them.
SKILL_FILE = "/mnt/skills/known-issues/SKILL.md"


class Ticket(BaseModel):
    """A support ticket to triage."""

    subject: str = Field(min_length=1)
    body: str = ""


def _plan(input_schema: Any, output_schema: Any) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {
            "name": "support.known-issues",
            "version": "1.0.0",
            "description": "Triage a ticket against the known issues kept in memory.",
        },
        "input": {"schema": input_schema},
        "output": {"schema": output_schema, "from": "${{ steps.triage.output }}"},
        "permissions": {"models": [SLOT], "tools": [], "secrets": [], "network": []},
        "steps": [
            {
                "id": "triage",
                "uses": "ai.generate",
                "with": {
                    "model": SLOT,
                    "tools": ["bash"],
                    "prompt": (
                        f"Ticket: {{{{ input.subject }}}}. {{{{ input.body }}}}\n"
                        f"Read {NOTES} with bash (it may not exist yet). If the ticket is one "
                        "of the issues listed there, say so in one sentence. If it is new, "
                        f"append one line '- <issue-id>: <summary>' to {NOTES} and say that "
                        "you recorded it."
                    ),
                },
                "output": {"mode": "text"},
            }
        ],
    }


def build_workflow(*, fixed_plan: bool = True) -> WorkflowDefinition:
    """The known-issues workflow; ``fixed_plan=False`` leaves the design to the planner."""
    return define_workflow(
        id="support.known-issues",
        description=(
            "Triage a support ticket: read the known issues kept in the workflow's memory "
            f"({NOTES}) with bash, answer whether the ticket is a known issue, and record it "
            "there when it is new, so later runs know it."
        ),
        input=Ticket,
        output=str,
        model=model_slot("known-issues", "General-purpose model with a bash tool."),
        plan=PLAN if fixed_plan else None,
        bash={"python": False},
        memory={"workflow": "rw", "org": "ro"},
        skills=SKILLS,
    )


SAMPLE_INPUT: dict[str, Any] = {
    "subject": "Export to CSV times out",
    "body": "Exporting the yearly report to CSV spins for a minute, then fails.",
}

_READ = f"cat {SKILL_FILE}; cat {NOTES} 2>/dev/null || echo '(no known issues yet)'"
_RECORD = f"echo '- {ISSUE}: CSV export of large reports times out' >> {NOTES}"
NEW_ANSWER = f"New issue {ISSUE}: recorded in known-issues.md for the next runs."
KNOWN_ANSWER = f"Known issue {ISSUE} (recorded by an earlier run): CSV export of large reports."


def _results(request: Any) -> list[str]:
    return [str(message.get("content", "")) for message in request.tool_results]


def build_script() -> Any:
    """The triage model's calls, by what its commands printed so far."""
    from little_dist.testing import ScriptedModel, Usage

    script = ScriptedModel(latency=0.05)
    script.on(step="planner").reply_json(PLAN, usage=Usage(4210, 900, cached=2048), times=None)
    usage = Usage(520, 60, cached=384)
    # After reading and recording: the answer for a new issue.
    script.on(step="triage", match=lambda r: len(_results(r)) >= 2).reply_text(
        NEW_ANSWER, usage=usage, times=None
    )
    # After reading: record the issue when the notes do not list it, else answer.
    script.on(
        step="triage", match=lambda r: len(_results(r)) == 1 and ISSUE not in _results(r)[0]
    ).call_tool("bash", {"cmd": _RECORD}, usage=usage, times=None)
    script.on(step="triage", match=lambda r: len(_results(r)) == 1).reply_text(
        KNOWN_ANSWER, usage=usage, times=None
    )
    # First: read the skill's convention and the notes.
    script.on(step="triage").call_tool("bash", {"cmd": _READ}, usage=usage, times=None)
    return script


#: The workflow without a plan (the planner designs it); its schemas shape the fixed plan.
planned_workflow = build_workflow(fixed_plan=False)
PLAN = _plan(planned_workflow.input_schema, planned_workflow.output_schema)
#: The workflow ``little run examples.known_issues:workflow`` runs: the fixed plan.
workflow = build_workflow()
#: What a fleet worker started with ``--app examples.known_issues`` serves under the
#: workflow's id: the fixed plan, as ``little submit examples.known_issues:workflow`` runs it (one
#: workflow per id; the planned one: ``--app examples.known_issues:planned_workflow``).
WORKFLOWS = [workflow]
#: The installed offline script (``None`` when ``LITTLE_MODEL`` is set).
SCRIPT = install_script("known-issues", build_script)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.known_issues [--planner]``."""
    return run_main(
        argv,
        name="known_issues",
        fixed=workflow,
        planned=planned_workflow,
        sample_input=SAMPLE_INPUT,
    )


if __name__ == "__main__":
    raise SystemExit(main())
