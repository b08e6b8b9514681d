"""What ``little init`` and ``little add workflow`` write: a starter workflow that runs offline
at once (a scripted model answers it) and on a real model with one setting (``LITTLE_MODEL``).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "INPUT_EXAMPLE",
    "JUDGE_REPLY",
    "REVIEW_TEXT",
    "files_for_workflow",
    "gitignore",
    "starter_lwir",
    "workflow_id_for",
]

#: The starter workflow's example input (``input.example.json``).
INPUT_EXAMPLE: dict[str, Any] = {
    "name": "Ada Lovelace",
    "notes": "Wrote the first published program; strong in mathematics; asks good questions.",
}

#: What the scripted model answers the starter's ``review`` step (the starter eval set's label).
REVIEW_TEXT = (
    "A strong candidate: the notes show rigour and curiosity. Next: a technical interview."
)
#: What the scripted model answers the eval set's judge (``little eval run``).
JUDGE_REPLY = "yes"
#: How the judge's question starts (:func:`little_dist.evals.judge.judge_prompt`).
JUDGE_QUESTION = "You judge one output of a workflow"

_INPUT_SCHEMA = {
    "type": "object",
    "required": ["name", "notes"],
    "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "notes": {"type": "string"}},
}

_WORKFLOW = '''"""__NAME__: a starter workflow (made by `little init` / `little add workflow`).

From the project folder:

    little run __NAME__ --input input.example.json     # run it; its output on stdout
    little test __NAME__ --input input.example.json    # run it and check its output
    little eval run                                     # run the eval sets in evals/, if any

Offline by default: a scripted model answers the model step (no key, no network). Set
LITTLE_MODEL to a litellm model string (and its key, e.g. OPENAI_API_KEY=...) to run the same
workflow on a real model. Its tools are the files in tools/ (one tool each, named after the
file); instructions.md is what a planner would be told.
"""

from __future__ import annotations

import os

from little_dist import define_workflow, model

REAL_MODEL = os.environ.get("LITTLE_MODEL", "").strip()

if not REAL_MODEL:
    from little_dist.testing import ScriptedModel

    # What a model would answer the "review" step, for runs without LITTLE_MODEL, and the
    # judge of the eval set in evals/ (little eval run).
    SCRIPT = ScriptedModel()
    SCRIPT.on(contains="__JUDGE_QUESTION__").reply_text("__JUDGE_REPLY__", times=None)
    SCRIPT.on(step="review").reply_text(
        "__REVIEW_TEXT__",
        times=None,
    )
    SCRIPT.install(model="__NAME__")

SLOT = model(
    REAL_MODEL or "scripted/__NAME__",
    id="default",
    # The scripted model's tokens are priced as this model's, so reports show dollars.
    **({} if REAL_MODEL else {"pricing": "openai/gpt-4o-mini"}),
)

INPUT = __INPUT__

PROFILE = {
    "id": "profile",
    "uses": "tool.call",
    "with": {"tool": "echo", "args": {"text": "{{ input.name }}: {{ input.notes }}"}},
    "output": {"mode": "object", "schema": {"type": "object"}},
}

REVIEW = {
    "id": "review",
    "uses": "ai.generate",
    "needs": ["profile"],
    "with": {
        "model": "default",
        "prompt": "Review this candidate in two sentences: {{ steps.profile.output.text }}",
    },
    "output": {"mode": "text"},
}

workflow = define_workflow(
    id="__WORKFLOW_ID__",
    description="Review a candidate from their notes.",
    input=INPUT,
    output={"type": "string"},
    model=SLOT,
    plan={
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "__WORKFLOW_ID__", "version": "0.1.0"},
        "input": {"schema": INPUT},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["default"], "tools": ["echo"], "secrets": [], "network": []},
        "steps": [PROFILE, REVIEW],
    },
)
'''

_INSTRUCTIONS = """Review candidates fairly: say what the notes show, and one next step.
"""

_ECHO = '''"""The echo tool: gives back the text it is given (a starter tool; the file's name is the
tool's name)."""

from __future__ import annotations

from little_dist import tool


@tool
def echo(text: str) -> dict[str, str]:
    """Give back the text."""
    return {"text": text}
'''


def workflow_id_for(name: str) -> str:
    """The workflow id a folder name gets: ``candidate-review`` -> ``candidate.review``."""
    return name.replace("-", ".")


def files_for_workflow(name: str) -> dict[str, str]:
    """A workflow folder's files (relative path -> text) for the workflow ``name``."""
    schema = _python(json.dumps(_INPUT_SCHEMA, indent=4))
    text = _WORKFLOW.replace("__WORKFLOW_ID__", workflow_id_for(name))
    for marker, value in (
        ("__JUDGE_QUESTION__", JUDGE_QUESTION),
        ("__JUDGE_REPLY__", JUDGE_REPLY),
        ("__REVIEW_TEXT__", REVIEW_TEXT),
    ):
        text = text.replace(marker, value)
    return {
        "workflow.py": text.replace("__NAME__", name).replace("__INPUT__", schema),
        "instructions.md": _INSTRUCTIONS,
        "tools/echo.py": _ECHO,
    }


def starter_lwir(name: str) -> dict[str, Any]:
    """The LWIR the starter workflow ``name`` runs (its ``plan=``, as its module builds it)."""
    workflow_id = workflow_id_for(name)
    profile = {
        "id": "profile",
        "uses": "tool.call",
        "with": {"tool": "echo", "args": {"text": "{{ input.name }}: {{ input.notes }}"}},
        "output": {"mode": "object", "schema": {"type": "object"}},
    }
    review = {
        "id": "review",
        "uses": "ai.generate",
        "needs": ["profile"],
        "with": {
            "model": "default",
            "prompt": "Review this candidate in two sentences: {{ steps.profile.output.text }}",
        },
        "output": {"mode": "text"},
    }
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": workflow_id, "version": "0.1.0"},
        "input": {"schema": _INPUT_SCHEMA},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["default"], "tools": ["echo"], "secrets": [], "network": []},
        "steps": [profile, review],
    }


def gitignore() -> str:
    """The project's ``.gitignore``: the local world's data and Python's caches."""
    return ".little-workflow/\n__pycache__/\n"


def _python(json_text: str) -> str:
    # JSON's literals as Python's (the schema has no null).
    return json_text.replace("false", "False").replace("true", "True")
