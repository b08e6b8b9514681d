"""What :func:`~little_dist.subruns.as_tool` takes beside the workflow, in upstream's words.

Upstream's ``asHarnessWorkflow(workflow, {definitionIdentity, executionMode, ...})`` gives a
harness workflow three things this module checks and normalizes:

* ``definitionIdentity``: a stable hash string, or ``{"notApplicable": true, "reason"?}``.
  Upstream makes a manual adapter pass one (``loadWorkflow(folder)`` derives it from the
  folder's content); our workflows always have a content hash (``definition_hash()``,
  upstream's ``workflowDefinitionHash``), so ours defaults to it and may be overridden.
  Upstream carries it on the workflow, in the child's run context and in the durable
  scheduler's replay identity; ours is on the tool (``definition_identity``) and in the
  ``little.subrun.started`` event of every call (a child's run id is derived from its call,
  so the identity is recorded, not hashed into it).
* ``executionMode``: ``"inline"`` (upstream's default: the call completes or fails within
  the tool call) or ``"durable"``. Upstream's difference is only for a detached start
  (``disposition: "start"``: a durable workflow may answer ``running``); our workflow tools
  always await their child, which is a durable sub-run in both modes (its own log, resumed
  after a crash), so the mode is recorded and answered, and changes nothing else.
* ``workflowBudgets``: upstream's ``HarnessWorkflowBudgets`` is harness-wide; the two of its
  fields that bound workflow runs, ``maxConcurrentWorkflowRuns`` (default 10) and
  ``maxQueuedWorkflowRuns`` (default 100), are what our ``max_concurrent_workflow_runs`` /
  ``max_queued_workflow_runs`` bound, so those are taken. The others bound a harness's own
  model loop, not a workflow tool (``maxModelSteps`` is our step's ``max_turns``,
  ``maxToolCallsPerTurn`` our ``code.run``'s call limit, ...): given to a workflow tool they
  are refused, by name, rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.subruns.envelope import (
    DEFAULT_MAX_CONCURRENT_WORKFLOW_RUNS,
    DEFAULT_MAX_QUEUED_WORKFLOW_RUNS,
)

__all__ = [
    "DEFAULT_WORKFLOW_BUDGETS",
    "EXECUTION_MODES",
    "RESULT_SHAPES",
    "check_definition_identity",
    "check_execution_mode",
    "check_result_shape",
    "workflow_run_bounds",
]

EXECUTION_MODES: Final = ("inline", "durable")
#: ``auto``: upstream's compact envelope for a calling model, the whole execution (with
#: ``output``) for code; ``compact`` / ``inline``: that shape for every caller.
RESULT_SHAPES: Final = ("auto", "compact", "inline")
#: Upstream's ``DEFAULT_WORKFLOW_BUDGETS`` (``create-harness.ts``), for reference and docs.
DEFAULT_WORKFLOW_BUDGETS: Final = {
    "maxModelSteps": 20,
    "maxToolCallsPerTurn": 100,
    "maxConcurrentToolCalls": 10,
    "maxConcurrentWorkflowRuns": DEFAULT_MAX_CONCURRENT_WORKFLOW_RUNS,
    "maxQueuedWorkflowRuns": DEFAULT_MAX_QUEUED_WORKFLOW_RUNS,
    "maxAutonomousTurns": 10,
}
_TAKEN: Final = {
    "maxConcurrentWorkflowRuns": "max_concurrent_workflow_runs",
    "maxQueuedWorkflowRuns": "max_queued_workflow_runs",
}
#: Upstream's other budget fields, and where their meaning lives here (if anywhere).
_ELSEWHERE: Final = {
    "maxModelSteps": "the calling step's max_turns",
    "maxToolCallsPerTurn": "code.run's tool call limit",
    "maxConcurrentToolCalls": "the harness's tool loop",
    "maxAutonomousTurns": "the harness's session",
    "toolDeadlineMs": "the calling step's timeout",
    "workflowDeadlineMs": "the child workflow's step timeouts",
    "queueDeadlineMs": "upstream's durable queue (none here)",
    "maxDynamicWorkflowTokens": "upstream's dynamic plans (none here)",
    "maxDynamicWorkflowOutputBytes": "upstream's dynamic plans (none here)",
}


def check_definition_identity(where: str, value: Any) -> str | dict[str, Any]:
    """``value`` as upstream's ``HarnessWorkflowDefinitionIdentity`` (a non-empty string, or
    ``{"notApplicable": True, "reason"?: str}``), or :class:`InvalidInputError`."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping) and value.get("notApplicable") is True:
        extra = set(value) - {"notApplicable", "reason"}
        reason = value.get("reason")
        if not extra and (reason is None or isinstance(reason, str)):
            return {"notApplicable": True, **({"reason": reason} if reason is not None else {})}
    raise InvalidInputError(
        f"{where}: definition_identity must be a non-empty string (a stable hash) or "
        f'{{"notApplicable": True, "reason": "..."}}, got {value!r}'
    )


def check_execution_mode(where: str, value: Any) -> str:
    if value not in EXECUTION_MODES:
        raise InvalidInputError(
            f"{where}: execution_mode must be one of {', '.join(EXECUTION_MODES)}, got {value!r}"
        )
    return str(value)


def check_result_shape(where: str, value: Any) -> str:
    if value not in RESULT_SHAPES:
        raise InvalidInputError(
            f"{where}: result must be one of {', '.join(RESULT_SHAPES)}, got {value!r}"
        )
    return str(value)


def workflow_run_bounds(
    where: str, budgets: Mapping[str, Any] | None, max_concurrent: int, max_queued: int
) -> tuple[int, int]:
    """The (concurrent, queued) bounds from upstream-named ``budgets`` over the keyword
    values; a key that is not a workflow-run bound is refused with where its meaning lives."""
    if budgets is None:
        return max_concurrent, max_queued
    if not isinstance(budgets, Mapping):
        raise InvalidInputError(
            f"{where}: workflow_budgets must be a mapping of upstream's budget names, "
            f"got {type(budgets).__name__}"
        )
    bounds = {"maxConcurrentWorkflowRuns": max_concurrent, "maxQueuedWorkflowRuns": max_queued}
    for key, value in budgets.items():
        if key in _TAKEN:
            bounds[key] = value
        elif key in _ELSEWHERE:
            raise InvalidInputError(
                f"{where}: workflow_budgets[{key!r}] bounds {_ELSEWHERE[key]}, not a workflow "
                f"tool; only {', '.join(_TAKEN)} apply here"
            )
        else:
            raise InvalidInputError(
                f"{where}: workflow_budgets has an unknown budget {key!r} (upstream's are "
                f"{', '.join([*_TAKEN, *_ELSEWHERE])})"
            )
    return bounds["maxConcurrentWorkflowRuns"], bounds["maxQueuedWorkflowRuns"]
