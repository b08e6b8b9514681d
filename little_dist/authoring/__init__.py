"""The authoring front door: ``define_workflow``, ``model``, ``skill`` (runs: ``run_workflow``).

Upstream's ``defineWorkflow`` / ``runWorkflow`` (``authoring.ts``) in Python::

    triage = define_workflow(
        id="support.triage",
        description="Classify a ticket and draft a reply.",
        input=Ticket,                       # a pydantic model, a type, or a JSON Schema
        output=Reply,
        model=model("openai/gpt-4o-mini", id="fast"),   # or just "openai/gpt-4o-mini"
        tools=[lookup_customer],            # Tools or plain typed functions
        skills=[skill("tone", "House style", "Be brief and kind.")],
    )
    result = run_workflow(triage, {"accountId": "A1", "message": "..."})
    result.output          # a Reply instance (validated)
    result.usage.cost_usd  # dollars, or None when nothing could be priced

Without ``plan=`` the planner (:mod:`little_dist.planner`) designs the LWIR with the model,
validates it and registers the version; a later run of the same definition reuses that
version. With ``plan=`` the given LWIR is used as is (no model call). Either way the run
executes on :func:`little_dist.local_runner.run_version` in this process.

A run id that already finished returns its recorded result (no model or tool is called
again); a run id that stopped part way resumes where its log ends.

This package is what a workflow *is* (its definition, slots, options, errors and results);
it runs nothing. ``run_workflow`` (``little_dist.run_workflow``) lives in
:mod:`little_dist.api`, above every engine it can drive: the one public way to run a
definition. A definition made here runs nothing itself; the public
``little_dist.define_workflow`` (:mod:`little_dist.api`) makes one that also has
``run(input, **options)``. This package no longer re-exports ``run_workflow``: that would be
an import pointing up the layers.
"""

from __future__ import annotations

from typing import Any

from little_dist.authoring.definition import (
    DEFAULT_MAX_REVISIONS,
    WorkflowDefinition,
    define_workflow,
)
from little_dist.authoring.errors import InputValidationError, RunFailedError
from little_dist.authoring.options import RunOptions
from little_dist.authoring.results import RunResult
from little_dist.authoring.slots import ModelSlot, model, skill

__all__ = [
    "DEFAULT_MAX_REVISIONS",
    "InputValidationError",
    "ModelSlot",
    "RunFailedError",
    "RunOptions",
    "RunResult",
    "WorkflowDefinition",
    "define_workflow",
    "model",
    "skill",
]


def __getattr__(name: str) -> Any:
    if name == "run_workflow":  # its old home: say where it is now
        raise AttributeError(
            "little_dist.authoring.run_workflow moved: import run_workflow from little_dist"
        )
    raise AttributeError(f"module 'little_dist.authoring' has no attribute {name!r}")
