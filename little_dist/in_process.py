"""The engine that runs one defined workflow in this process: plan (or take ``plan=``),
compile, run, and the run's :class:`~little_dist.authoring.RunResult`.

Nothing public depends on it. The public :func:`~little_dist.run_workflow`
(:mod:`little_dist.api`) checks its arguments and calls :func:`run_in_process` (or an outer
loop, :mod:`little_dist.outer_loop`, which calls :func:`run_workflow_cycle` per cycle); an
in-process sub-run is driven through the sub-run host protocol
(:class:`~little_dist.subruns.local_host.LocalSubRuns` calls :func:`run_in_process`). Every
option arrives as one checked :class:`~little_dist.authoring.options.RunOptions`.

A run id that already finished returns its recorded result (no model or tool is called
again); a run id that stopped part way resumes where its log ends.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.authoring.definition import WorkflowDefinition
from little_dist.authoring.options import RunOptions
from little_dist.authoring.results import RunResult, run_result
from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError
from little_dist.ids import RUN_ID_PREFIX

if TYPE_CHECKING:
    from little_dist.runtime.capabilities import Capabilities
    from little_dist.world.base import World

__all__ = ["run_in_process", "run_workflow_cycle"]


def _with_permissions(
    workflow: WorkflowDefinition, capabilities: Capabilities, options: RunOptions
) -> Capabilities:
    """The run's capabilities with its permission rules: the workflow's, then the run's."""
    if options.permissions is None and options.on_ask is None:
        return capabilities
    from little_dist.permissions import ToolPermissions

    # (not `or`: a ToolPermissions without rules is falsy, and may still carry an approver)
    given = options.permissions if options.permissions is not None else ToolPermissions()
    merged = ToolPermissions(
        (*workflow.permissions.ruleset, *given.ruleset), options.on_ask or given.on_ask
    )
    return dataclasses.replace(capabilities, permissions=merged if merged.ruleset else None)


def _new_run_id() -> str:
    return RUN_ID_PREFIX + uuid.uuid4().hex[:20]


def run_workflow_cycle(
    workflow: WorkflowDefinition,
    input: Any,
    *,
    world: World,
    run_id: str,
    outer_loop_id: str,
    outer_loop: Mapping[str, Any],
    options: RunOptions,
    prompt_note: str | None = None,
) -> RunResult:
    """One cycle of an outer loop (upstream's ``runWorkflowCycle``): :func:`run_in_process`
    whose planner sees the cycle's ``outer_loop`` context and the supervisor's
    ``prompt_note`` (see :func:`~little_dist.planner.request.orchestration_request`), and
    whose ``RunStarted`` carries ``outerLoopId``. A ``run_id`` already ended returns its
    recorded result without planning again. The finished run is not archived: the loop
    appends its ``OuterLoopCycleCompleted`` first, then archives it."""
    return run_in_process(
        workflow,
        input,
        options,
        world=world,
        run_id=run_id,
        parent={"outerLoopId": outer_loop_id},
        outer_loop=outer_loop,
        prompt_note=prompt_note,
        archive=False,
    )


def run_in_process(
    workflow: WorkflowDefinition,
    input: Any,
    options: RunOptions,
    *,
    world: World | None = None,
    run_id: str | None = None,
    parent: Mapping[str, Any] | None = None,
    outer_loop: Mapping[str, Any] | None = None,
    prompt_note: str | None = None,
    archive: bool = True,
) -> RunResult:
    """Plan (or take ``plan=``), compile and run ``workflow`` on ``input`` in this process
    (see :func:`~little_dist.run_workflow` for ``world`` and ``run_id``); ``parent``: the
    link recorded in ``RunStarted`` (a sub-run's, a cycle's); ``archive``: hand the ended
    run to the world's archive. Raises :class:`~little_dist.authoring.RunFailedError` when
    the run fails."""
    from little_dist.ids import validate_run_id
    from little_dist.planner import resolve_version
    from little_dist.run_state import materialize_run_state

    if not isinstance(workflow, WorkflowDefinition):
        raise InvalidInputError(
            f"run_workflow expects a workflow from define_workflow(), got {type(workflow).__name__}"
        )
    pricing_fallback = options.pricing_fallback
    run_input = workflow.validate_input(input, limits=options.limits)
    if run_id is None:
        run_id = _new_run_id()
    validate_run_id(run_id)
    if world is None:
        from little_dist.world.local import LocalWorld

        world = LocalWorld()
    events = world.list_events(run_id)
    if events:
        _check_same_input(run_id, events, run_input)
        state = materialize_run_state(events, run_id=run_id, pricing_fallback=pricing_fallback)
        if state.status in ("completed", "failed"):
            return run_result(workflow, run_id, state)
    capabilities = _with_permissions(workflow, workflow.capabilities(options.harness), options)
    budget = options.budget_usd if options.budget_usd is not None else workflow.budget_usd
    from little_dist.budgets import borrows_from, budget_event

    lender = borrows_from(parent)
    if budget is not None or lender is not None:
        # (idempotent: the first one stands; before planning: the planner's calls spend it)
        world.append(run_id, budget_event(budget, lender))
        capabilities = dataclasses.replace(capabilities, pricing_fallback=pricing_fallback)
    limits = options.run_limits(workflow.timeout_ms, workflow.max_attempts)
    if workflow.plan is not None:
        from little_dist.runtime import check_grants

        check_grants(workflow.plan, capabilities, f"workflow {workflow.id!r}")
    version = resolve_version(
        world,
        run_id,
        workflow,
        run_input,
        capabilities=capabilities,
        parent=parent,
        outer_loop=outer_loop,
        prompt_note=prompt_note,
        reuse_strategy=options.workflow_version_reuse_strategy,
    )
    if version is None:  # planning failed and recorded RunFailed
        events = world.list_events(run_id)
        state = materialize_run_state(events, run_id=run_id, pricing_fallback=pricing_fallback)
        return run_result(workflow, run_id, state)
    if limits:
        # After planning (a log's first event names its workflow, for `little runs`); the
        # first one recorded stands: a resumed run keeps its limits.
        world.append(run_id, limits.event())
    from little_dist.local_runner import run_version

    state = run_version(
        world,
        version,
        run_input,
        run_id=run_id,
        capabilities=capabilities,
        max_workers=options.max_workers,
        progress=options.progress,
        pricing_fallback=pricing_fallback,
        parent=parent,
        archive=archive,
        cancel=options.cancel,
    )
    return run_result(workflow, run_id, state)


def _check_same_input(run_id: str, events: Sequence[Any], run_input: Any) -> None:
    for event in events:
        if event.type == "RunStarted" and "input" in event.payload:
            if sha256_digest(event.payload["input"]) != sha256_digest(run_input):
                raise InvalidInputError(
                    f"Run {run_id!r} was started with a different input; use a new run id."
                )
            return
        if event.type == "OrchestrationRequested":
            recorded = event.payload.get("inputHash")
            if isinstance(recorded, str) and recorded != sha256_digest(run_input):
                raise InvalidInputError(
                    f"Run {run_id!r} was started with a different input; use a new run id."
                )
