"""The authoring front door: ``define_workflow``, ``model``, ``skill`` and ``run_workflow``.

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
it runs nothing. ``run_workflow`` lives in :mod:`little_dist.api`, above every engine it can
drive; ``little_dist.authoring.run_workflow`` (its old home) still finds it, loaded on first
use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from little_dist.authoring.definition import (
    DEFAULT_MAX_REVISIONS,
    WorkflowDefinition,
    define_workflow,
)
from little_dist.authoring.errors import InputValidationError, RunFailedError
from little_dist.authoring.options import RunOptions
from little_dist.authoring.results import RunResult
from little_dist.authoring.slots import ModelSlot, model, skill

if TYPE_CHECKING:
    from little_dist.api import run_workflow

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
    "run_workflow",
    "skill",
]


def __getattr__(name: str) -> Any:
    # The public entry point's old home (see the module docstring): the one import of this
    # layer that points up, declared in the layers contract (pyproject.toml).
    if name == "run_workflow":
        from little_dist.api import run_workflow

        return run_workflow
    raise AttributeError(f"module 'little_dist.authoring' has no attribute {name!r}")
