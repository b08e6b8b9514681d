"""Running a defined workflow in this process: :func:`run_workflow` and its
:class:`RunResult` (upstream's ``runWorkflow``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from little_dist.authoring.definition import WorkflowDefinition
from little_dist.authoring.errors import RunFailedError
from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError, LittleError
from little_dist.ids import RUN_ID_PREFIX
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.pricing import PriceFallback, UsageTotals

if TYPE_CHECKING:
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.limits import InputLimits
    from little_dist.permissions import Approver, ToolPermissions
    from little_dist.planner.review import ReuseStrategy
    from little_dist.run_state import RunState
    from little_dist.runtime.capabilities import Capabilities
    from little_dist.world.base import World

__all__ = ["RunResult", "run_result", "run_workflow", "run_workflow_cycle"]


@dataclass(frozen=True)
class RunResult:
    """A finished run: ``output`` (validated; a model instance for a pydantic output),
    ``usage`` (tokens and ``cost_usd``, ``None`` when unpriced) and the folded ``state``."""

    run_id: str
    status: str
    output: Any
    usage: UsageTotals
    state: RunState
    workflow_version_id: str | None


def _with_permissions(
    workflow: WorkflowDefinition,
    capabilities: Capabilities,
    permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None,
    on_ask: Approver | None,
) -> Capabilities:
    """The run's capabilities with its permission rules: the workflow's, then the run's."""
    if permissions is None and on_ask is None:
        return capabilities
    import dataclasses

    from little_dist.permissions import ToolPermissions, tool_permissions

    if on_ask is not None and not callable(on_ask):
        raise InvalidInputError(f"run_workflow: on_ask must be callable, got {on_ask!r}")
    given = tool_permissions(permissions, "run_workflow: permissions")
    merged = ToolPermissions(
        (*workflow.permissions.ruleset, *given.ruleset), on_ask if on_ask else given.on_ask
    )
    return dataclasses.replace(capabilities, permissions=merged if merged.ruleset else None)


def _new_run_id() -> str:
    return RUN_ID_PREFIX + uuid.uuid4().hex[:20]


def _failure(definition: WorkflowDefinition, run_id: str, state: RunState) -> RunFailedError:
    error = state.error if isinstance(state.error, Mapping) else {}
    cause = error.get("causeCode")
    cause_code = cause if isinstance(cause, str) and cause else "step_failed"
    failed = [path for path, step in state.steps.items() if step.status == "failed"]
    step_path = error.get("stepPath")
    failed_step = step_path if isinstance(step_path, str) else (failed[-1] if failed else None)
    message = error.get("message")
    result = RunResult(
        run_id=run_id,
        status=state.status,
        output=state.output if state.has_output else None,
        usage=state.usage,
        state=state,
        workflow_version_id=state.workflow_version_id,
    )
    text = f"Run {run_id!r} of workflow {definition.id!r} failed ({cause_code})"
    if isinstance(message, str) and message:
        text += f": {message}"
    return RunFailedError(
        text,
        run_id=run_id,
        workflow_version_id=state.workflow_version_id or "uncompiled",
        cause_code=cause_code,
        error=error,
        failed_step_path=failed_step,
        result=result,
    )


def run_result(definition: WorkflowDefinition, run_id: str, state: RunState) -> RunResult:
    """The :class:`RunResult` of an ended run's state (its output parsed by the workflow's
    output schema); :class:`RunFailedError` for a failed run."""
    return _result(definition, run_id, state)


def _result(definition: WorkflowDefinition, run_id: str, state: RunState) -> RunResult:
    if state.status == "failed":
        raise _failure(definition, run_id, state)
    if state.status != "completed":
        raise LittleError(f"Run {run_id!r} stopped before it finished (status {state.status}).")
    import jsonschema

    output = state.output
    errors = list(jsonschema.Draft7Validator(definition.output_schema).iter_errors(output))
    if errors:
        raise InvalidInputError(
            f"Run {run_id!r}: recorded output does not match the output schema of "
            f"{definition.id!r}: {errors[0].message}"
        )
    return RunResult(
        run_id=run_id,
        status=state.status,
        output=definition.parse_output(output),
        usage=state.usage,
        state=state,
        workflow_version_id=state.workflow_version_id,
    )


def run_workflow(
    workflow: WorkflowDefinition,
    input: Any,
    *,
    world: World | None = None,
    run_id: str | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_workers: int = 8,
    progress: Callable[[Any], None] | None = None,
    limits: InputLimits | None = None,
    pricing_fallback: PriceFallback | None = litellm_price_fallback,
    parent: Mapping[str, Any] | None = None,
    permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None = None,
    on_ask: Approver | None = None,
    max_outer_cycles: int | None = None,
    outer_loop_id: str | None = None,
    supervise: Callable[[Mapping[str, Any]], Any] | None = None,
    workflow_version_reuse_strategy: ReuseStrategy | None = None,
) -> RunResult:
    """Plan (or take ``plan=``), compile and run ``workflow`` on ``input`` in this process.

    ``world`` defaults to ``LocalWorld(".little-workflow")``. ``input`` is validated against
    the input schema before anything is written, and against ``limits`` (default: the
    ``LITTLE_MAX_*`` settings, see :mod:`little_dist.limits`). A ``run_id`` that already
    finished returns its recorded result without calling any model or tool; one that stopped
    part way resumes. Raises :class:`RunFailedError` when the run fails.
    ``pricing_fallback`` prices the model calls in ``result.usage`` that the bundled
    registry has no rates for (default: litellm's cost map; ``None``: registry rates only).
    ``parent``: a sub-run's link to the run that started it, recorded in its ``RunStarted``
    (see :mod:`little_dist.subruns`; a workflow tool passes it).
    ``permissions``: upstream's runtime tool-call rules for this run (a list of rules, or
    ``{"ruleset": [...], "onAsk": fn}``), added after the workflow's own
    (``define_workflow(permissions=...)``; a deny anywhere wins). ``on_ask``: upstream's
    ``onAsk``, the approver of ``ask`` decisions: called in this process with
    ``{"tool": name, "args": args}``, true allows the call; without one an ``ask`` is denied.
    ``max_outer_cycles`` above 1 (upstream's ``maxOuterCycles``): an outer loop of up to that
    many planned-and-run cycles under ``supervise`` (:func:`~little_dist.run_outer_loop`,
    which ``outer_loop_id`` resumes); ``run_id`` and ``parent`` are then not taken. An outer
    loop whose cycles run on a fleet is ``run_outer_loop(..., client=Client(...))``.
    ``workflow_version_reuse_strategy``: upstream's call option, ``"planner_reviewed"`` or
    ``"always_fresh"``, over the workflow's (``define_workflow``'s; default planner-reviewed).
    """
    if max_outer_cycles is not None:
        if (
            isinstance(max_outer_cycles, bool)
            or not isinstance(max_outer_cycles, int)
            or (max_outer_cycles < 1)
        ):
            raise InvalidInputError(
                "run_workflow: max_outer_cycles must be a positive integer >= 1 "
                f"(got {max_outer_cycles!r})."
            )
        if max_outer_cycles > 1:
            if run_id is not None or parent is not None:
                raise InvalidInputError(
                    "run_workflow: an outer loop (max_outer_cycles > 1) gives each cycle a run "
                    "of its own; pass outer_loop_id, not run_id or parent"
                )
            from little_dist.outer_loop.loop import run_outer_loop

            return run_outer_loop(
                workflow,
                input,
                max_outer_cycles=max_outer_cycles,
                supervise=supervise,
                world=world,
                outer_loop_id=outer_loop_id,
                harness=harness,
                max_workers=max_workers,
                progress=progress,
                limits=limits,
                pricing_fallback=pricing_fallback,
                permissions=permissions,
                on_ask=on_ask,
            )
    if outer_loop_id is not None or supervise is not None:
        raise InvalidInputError(
            "run_workflow: outer_loop_id and supervise need max_outer_cycles > 1"
        )
    return _run(
        workflow,
        input,
        world=world,
        run_id=run_id,
        harness=harness,
        max_workers=max_workers,
        progress=progress,
        limits=limits,
        pricing_fallback=pricing_fallback,
        parent=parent,
        permissions=permissions,
        on_ask=on_ask,
        workflow_version_reuse_strategy=workflow_version_reuse_strategy,
    )


def run_workflow_cycle(
    workflow: WorkflowDefinition,
    input: Any,
    *,
    world: World,
    run_id: str,
    outer_loop_id: str,
    outer_loop: Mapping[str, Any],
    prompt_note: str | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_workers: int = 8,
    progress: Callable[[Any], None] | None = None,
    limits: InputLimits | None = None,
    pricing_fallback: PriceFallback | None = litellm_price_fallback,
    permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None = None,
    on_ask: Approver | None = None,
) -> RunResult:
    """One cycle of an outer loop (upstream's ``runWorkflowCycle``): :func:`run_workflow`
    whose planner sees the cycle's ``outer_loop`` context and the supervisor's
    ``prompt_note`` (see :func:`~little_dist.planner.request.orchestration_request`), and
    whose ``RunStarted`` carries ``outerLoopId``. A ``run_id`` already ended returns its
    recorded result without planning again. The finished run is not archived: the loop
    appends its ``OuterLoopCycleCompleted`` first, then archives it."""
    return _run(
        workflow,
        input,
        world=world,
        run_id=run_id,
        harness=harness,
        max_workers=max_workers,
        progress=progress,
        limits=limits,
        pricing_fallback=pricing_fallback,
        parent={"outerLoopId": outer_loop_id},
        permissions=permissions,
        on_ask=on_ask,
        outer_loop=outer_loop,
        prompt_note=prompt_note,
        archive=False,
    )


def _run(
    workflow: WorkflowDefinition,
    input: Any,
    *,
    world: World | None,
    run_id: str | None,
    harness: Harness | Mapping[HarnessRole, Harness] | None,
    max_workers: int,
    progress: Callable[[Any], None] | None,
    limits: InputLimits | None,
    pricing_fallback: PriceFallback | None,
    parent: Mapping[str, Any] | None,
    permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None,
    on_ask: Approver | None,
    outer_loop: Mapping[str, Any] | None = None,
    prompt_note: str | None = None,
    archive: bool = True,
    workflow_version_reuse_strategy: ReuseStrategy | None = None,
) -> RunResult:
    from little_dist.ids import validate_run_id
    from little_dist.planner import resolve_version
    from little_dist.planner.review import reuse_strategy
    from little_dist.run_state import materialize_run_state

    if not isinstance(workflow, WorkflowDefinition):
        raise InvalidInputError(
            f"run_workflow expects a workflow from define_workflow(), got {type(workflow).__name__}"
        )
    if limits is None:
        from little_dist.settings import load_limits

        limits = load_limits()
    run_input = workflow.validate_input(input, limits=limits)
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
            return _result(workflow, run_id, state)
    capabilities = _with_permissions(workflow, workflow.capabilities(harness), permissions, on_ask)
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
        reuse_strategy=reuse_strategy(
            workflow_version_reuse_strategy, f"run_workflow({workflow.id!r})"
        ),
    )
    if version is None:  # planning failed and recorded RunFailed
        events = world.list_events(run_id)
        state = materialize_run_state(events, run_id=run_id, pricing_fallback=pricing_fallback)
        return _result(workflow, run_id, state)
    from little_dist.local_runner import run_version

    state = run_version(
        world,
        version,
        run_input,
        run_id=run_id,
        capabilities=capabilities,
        max_workers=max_workers,
        progress=progress,
        pricing_fallback=pricing_fallback,
        parent=parent,
        archive=archive,
    )
    return _result(workflow, run_id, state)


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
