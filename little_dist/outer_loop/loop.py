"""Driving an outer loop: :func:`run_outer_loop` (upstream's ``runOuterLoop``).

Per cycle ``n`` (``1..max_outer_cycles``):

1. the manifest records ``pendingCycleRunId`` (a fresh run id, ``run_olc_...``) before
   anything runs;
2. that run plans and runs: in this process
   (:func:`~little_dist.in_process.run_workflow_cycle`), or, given a fleet
   ``client``, on the fleet (:func:`~little_dist.outer_loop.fleet.run_fleet_cycle`: a
   planner worker plans it, workers run its steps, this process waits); either way the
   planner sees the cycle's ``outerLoop`` context and the last ``continue`` note, and the
   run's ``RunStarted`` carries ``outerLoopId``;
3. the decision for cycle ``n``: the one recorded on the run as ``OuterLoopCycleCompleted``
   if any, else the supervisor's (its call held first against the loop's budget and the
   key's daily ceilings: :mod:`~little_dist.outer_loop.budget`), which is then appended
   (occurrence id ``outer-loop:cycle:{n}``: appended once however often a resumed loop
   gets here) with
   the supervisor's model call (``supervisorCall``: its model and tokens) when it reports
   one;
4. the manifest records the cycle (and ``result`` on ``done``), ``pendingCycleRunId`` gone.

A loop started again with its ``outer_loop_id`` resumes from its manifest: a ``done`` loop
returns its recorded output; a loop that crashed mid-cycle re-enters that cycle under the
same run id (an ended run returns its recorded end without planning or running again), and
a cycle whose decision is recorded never calls the supervisor again. Every manifest write is
a compare-and-set (:mod:`little_dist.outer_loop.store`): a second process driving the same
loop gets :class:`~little_dist.outer_loop.store.ManifestConflictError`, not a forked loop.

On the fleet, the loop's driver is the calling process (see :mod:`little_dist.outer_loop.fleet`
for why it is not a fleet run of its own): a driver killed anywhere is resumed by calling
again with the ``outer_loop_id``, from any process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from little_dist.authoring.definition import WorkflowDefinition
from little_dist.authoring.errors import RunFailedError
from little_dist.authoring.options import ReuseStrategy, RunOptions
from little_dist.authoring.results import RunResult
from little_dist.errors import InvalidInputError, LittleError
from little_dist.events import EventInput
from little_dist.ids import OUTER_LOOP_ID_PREFIX
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.outer_loop.budget import ask_supervisor, loop_limiter, loop_spent
from little_dist.outer_loop.decisions import (
    CYCLE_COMPLETED,
    Continue,
    Done,
    Supervised,
    cycle_completed_payload,
    cycle_occurrence_id,
    cycle_run_id,
    decision_from,
    outer_loop_context,
    recorded_decision,
    supervise_state,
)
from little_dist.outer_loop.errors import OuterLoopError
from little_dist.outer_loop.manifest import (
    CycleSummary,
    OuterLoopGoal,
    OuterLoopManifest,
    config_problem,
    validate_outer_loop_id,
)
from little_dist.outer_loop.store import ManifestStore, manifest_store_for
from little_dist.outer_loop.supervisor import ModelSupervisor, Supervisor
from little_dist.pricing import PriceFallback
from little_dist.world.extras import extras_of

if TYPE_CHECKING:
    from little_dist.fleet.client import Client
    from little_dist.harness.types import Harness, HarnessRole
    from little_dist.limits import InputLimits
    from little_dist.permissions import Approver, ToolPermissions
    from little_dist.world.base import World

__all__ = ["OuterLoopError", "drive_outer_loop", "goal_of", "run_outer_loop"]

_UNCOMPILED = "uncompiled"
#: A cycle that ended so does not go to the supervisor: the loop stops with it.
# (a cycle refused for its budget: the loop's is spent too, a cycle's budget being its rest)
_STOPPING_CAUSES = frozenset({"cancelled", "timeout", "deadline_exceeded", "budget_exceeded"})


def _config_error(outer_loop_id: str, message: str) -> OuterLoopError:
    return OuterLoopError(message, outer_loop_id=outer_loop_id, cause_code="runtime_config_error")


def _check_max_cycles(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(
            f"run_outer_loop: max_outer_cycles must be a positive integer >= 1 (got {value!r})."
        )
    return value


def goal_of(workflow: WorkflowDefinition) -> OuterLoopGoal:
    """The loop's goal: the workflow's definition hash and description (its id if none)."""
    return OuterLoopGoal(workflow.definition_hash(), workflow.description or workflow.id)


def _supervisor_for(
    workflow: WorkflowDefinition, supervise: Supervisor | None, loop_id: str
) -> Supervisor:
    if supervise is None:
        model = workflow.planner_model.resolved(workflow.planner_slot_id)
        return ModelSupervisor(model, system=workflow.system)
    if not callable(supervise):
        raise _config_error(
            loop_id,
            "runtime_config_error: outer_loop_requested_without_supervise_adapter — "
            f"supervise must be callable, got {type(supervise).__name__}.",
        )
    return supervise


def run_outer_loop(
    workflow: WorkflowDefinition,
    input: Any,
    *,
    max_outer_cycles: int,
    supervise: Supervisor | None = None,
    world: World | None = None,
    outer_loop_id: str | None = None,
    manifests: ManifestStore | None = None,
    harness: Harness | Mapping[HarnessRole, Harness] | None = None,
    max_workers: int = 8,
    progress: Callable[[Any], None] | None = None,
    limits: InputLimits | None = None,
    pricing_fallback: PriceFallback | None = litellm_price_fallback,
    permissions: ToolPermissions | Mapping[str, Any] | Sequence[Any] | None = None,
    on_ask: Approver | None = None,
    client: Client | None = None,
    cycle_timeout: float | None = None,
    workflow_version_reuse_strategy: ReuseStrategy | None = None,
    budget_usd: float | None = None,
) -> RunResult:
    """Plan and run ``workflow`` on ``input`` in cycles until the supervisor says ``done``
    (upstream's ``runOuterLoop``; see :mod:`little_dist.outer_loop`).

    ``supervise``: the supervisor (see :mod:`little_dist.outer_loop.supervisor`; default: a
    :class:`ModelSupervisor` on the workflow's planner model). ``outer_loop_id``
    (``ol_...``): resume that loop, or start it under that id (default: a new one).
    ``manifests``: where the manifest is kept (default: the world's,
    :func:`~little_dist.outer_loop.store.manifest_store_for`). The other keywords are
    :func:`~little_dist.run_workflow`'s, for each cycle's run (checked once, before the
    loop starts: one :class:`~little_dist.authoring.options.RunOptions`).

    ``client``: a fleet :class:`~little_dist.fleet.client.Client`: each cycle's run is
    submitted to the fleet and waited for (see :mod:`little_dist.outer_loop.fleet`; the
    workflow must be in the workers' ``--app`` module); ``world`` is then the client's.
    ``harness``, ``progress``, ``permissions`` and ``on_ask`` are in-process options: the
    fleet's workers run cycles with their app's capabilities.
    ``workflow_version_reuse_strategy`` is checked like every option and passed to every
    cycle's planner, which reviews no earlier version whichever it is (the planner reviews
    one only outside an outer loop, :func:`~little_dist.planner.resolve_version`).
    ``cycle_timeout``: how long to wait for one cycle's run on the fleet (``None``: no
    limit; :class:`~little_dist.fleet.client.WaitTimeoutError` after it, the loop
    resumable). ``budget_usd``: the loop's dollar ceiling, which its cycles spend from
    (see :mod:`little_dist.outer_loop.budget`).

    Returns the last cycle's :class:`RunResult` with the supervisor's ``finalOutput`` as its
    ``output``. Raises :class:`OuterLoopError` (``outer_loop_exhausted`` after
    ``max_outer_cycles`` cycles without ``done``; ``runtime_config_error`` when a resumed
    loop was started with another ``max_outer_cycles`` or another workflow definition;
    ``budget_exceeded`` / ``daily_budget_exceeded`` when a budget cannot start a cycle or
    hold the supervisor's call), :class:`RunFailedError` when a cycle was cancelled, and
    :class:`~little_dist.outer_loop.store.ManifestConflictError` when another process
    advanced the loop meanwhile.
    """
    options = RunOptions.of(
        "run_outer_loop",
        harness=harness,
        max_workers=max_workers,
        progress=progress,
        limits=limits,
        pricing_fallback=pricing_fallback,
        permissions=permissions,
        on_ask=on_ask,
        workflow_version_reuse_strategy=workflow_version_reuse_strategy,
        budget_usd=budget_usd,
    )
    return drive_outer_loop(
        workflow,
        input,
        options,
        max_outer_cycles=max_outer_cycles,
        supervise=supervise,
        world=world,
        outer_loop_id=outer_loop_id,
        manifests=manifests,
        client=client,
        cycle_timeout=cycle_timeout,
    )


# Long: the four steps of a cycle and the resume rules around them (the module docstring's
# walk) read in one place; the step bodies are _run_cycle, the supervisor and the store.
def drive_outer_loop(
    workflow: WorkflowDefinition,
    input: Any,
    options: RunOptions,
    *,
    max_outer_cycles: int,
    supervise: Supervisor | None = None,
    world: World | None = None,
    outer_loop_id: str | None = None,
    manifests: ManifestStore | None = None,
    client: Client | None = None,
    cycle_timeout: float | None = None,
) -> RunResult:
    """:func:`run_outer_loop` with its run options checked already (the one value every
    cycle's run takes)."""
    max_cycles = _check_max_cycles(max_outer_cycles)
    if not isinstance(workflow, WorkflowDefinition):
        raise InvalidInputError(
            "run_outer_loop expects a workflow from define_workflow(), "
            f"got {type(workflow).__name__}"
        )
    pricing_fallback = options.pricing_fallback
    run_input = workflow.validate_input(input, limits=options.limits)
    loop_id = validate_outer_loop_id(outer_loop_id or OUTER_LOOP_ID_PREFIX + uuid.uuid4().hex)
    if client is not None:
        world = _fleet_world(client, world, options)
    if world is None:
        from little_dist.world.local import LocalWorld

        world = LocalWorld()
    store = manifests if manifests is not None else manifest_store_for(world)
    goal = goal_of(workflow)

    stored = store.read(loop_id)
    existing = None if stored is None else stored.manifest
    etag = None if stored is None else stored.etag
    if existing is not None:
        problem = config_problem(
            existing, max_cycles=max_cycles, workflow_definition_hash=goal.workflow_definition_hash
        )
        if problem is not None:
            raise _config_error(loop_id, problem)
        if existing.done:
            return _done_result(world, existing.final_output, existing.cycles[-1], pricing_fallback)
    cycles = list(existing.cycles) if existing is not None else []
    # A loop resumed after a `continue`: that cycle's note is its summary.
    note = cycles[-1].summary if cycles else None
    supervisor = _supervisor_for(workflow, supervise, loop_id)
    resume_run_id = None if existing is None else existing.pending_cycle_run_id
    limiter = loop_limiter(client)  # (daily key ceilings of the supervisor's calls)

    def manifest(**fields: Any) -> OuterLoopManifest:
        return OuterLoopManifest(loop_id, goal, max_cycles, tuple(cycles), **fields)

    for number in range(len(cycles) + 1, max_cycles + 1):
        cycle_options = _cycle_budget(world, loop_id, cycles, options)
        run_id = resume_run_id or cycle_run_id(uuid.uuid4().hex[:20])
        if resume_run_id is None:
            etag = store.write(manifest(pending_cycle_run_id=run_id), expected=etag)
        resume_run_id = None
        cycle, outcome = _run_cycle(
            workflow,
            run_input,
            world=world,
            run_id=run_id,
            loop_id=loop_id,
            context=outer_loop_context(number, max_cycles, cycles),
            note=note,
            options=cycle_options,
            number=number,
            client=client,
            cycle_timeout=cycle_timeout,
        )
        cycles.append(cycle)
        decision = recorded_decision(world.list_events(run_id), number)
        if decision is None:
            answer = ask_supervisor(
                world,
                supervisor,
                supervise_state(goal, cycles),
                loop_id=loop_id,
                cycles=cycles,
                budget=options.budget_usd,
                fallback=pricing_fallback,
                limiter=limiter,
            )
            call = None
            if isinstance(answer, Supervised):
                answer, call = answer.decision, answer.call
            decided = decision_from(answer)
            recorded = world.append(
                run_id,
                EventInput(
                    type=CYCLE_COMPLETED,
                    occurrence_id=cycle_occurrence_id(number),
                    payload=cycle_completed_payload(loop_id, number, decided, call),
                ),
            )
            # Another process resuming the same cycle may have recorded its decision first:
            # the recorded one is the decision, whichever process made it.
            decision = decision_from(recorded.payload["supervise"], f"recorded {CYCLE_COMPLETED}")
        if isinstance(decision, Continue) and decision.prompt_note is not None:
            cycles[-1] = replace(cycle, summary=decision.prompt_note)
        _archive(world, run_id)
        if isinstance(decision, Done):
            etag = store.write(
                manifest(done=True, final_output=decision.final_output), expected=etag
            )
            return _done_result(world, decision.final_output, cycle, pricing_fallback, outcome)
        etag = store.write(manifest(), expected=etag)
        note = decision.prompt_note
    # Every cycle ran without `done` (or a crash came after the last cycle's manifest write).
    raise _exhausted(world, loop_id, cycles, pricing_fallback)


def _cycle_budget(
    world: World, loop_id: str, cycles: list[CycleSummary], options: RunOptions
) -> RunOptions:
    """The options of the next cycle's run: with a loop budget, what the loop has left as
    the run's own (:mod:`little_dist.outer_loop.budget`); ``budget_exceeded`` when nothing is."""
    budget = options.budget_usd
    if budget is None:
        return options
    spent = loop_spent(world, cycles, options.pricing_fallback)
    left = budget - spent
    if left <= 1e-12:
        raise OuterLoopError(
            f"outer loop {loop_id} budget ${budget:.6g}: its {len(cycles)} cycle(s) spent or "
            f"hold ${spent:.6g}; no cycle can start",
            outer_loop_id=loop_id,
            cause_code="budget_exceeded",
            last_cycle_output=cycles[-1].output if cycles else None,
        )
    return replace(options, budget_usd=left)


def _run_cycle(
    workflow: WorkflowDefinition,
    run_input: Any,
    *,
    world: World,
    run_id: str,
    loop_id: str,
    context: dict[str, Any],
    note: str | None,
    options: RunOptions,
    number: int,
    client: Client | None = None,
    cycle_timeout: float | None = None,
) -> tuple[CycleSummary, RunResult | None]:
    try:
        if client is not None:
            from little_dist.outer_loop.fleet import run_fleet_cycle

            result = run_fleet_cycle(
                client,
                workflow,
                run_input,
                run_id=run_id,
                outer_loop_id=loop_id,
                outer_loop=context,
                prompt_note=note,
                timeout=cycle_timeout,
                budget_usd=options.budget_usd,
            )
        else:
            from little_dist.in_process import run_workflow_cycle

            result = run_workflow_cycle(
                workflow,
                run_input,
                world=world,
                run_id=run_id,
                outer_loop_id=loop_id,
                outer_loop=context,
                prompt_note=note,
                options=options,
            )
    except RunFailedError as error:
        if error.cause_code in _STOPPING_CAUSES:
            raise
        failed = error.result
        return (
            CycleSummary(
                number,
                run_id,
                error.workflow_version_id or _UNCOMPILED,
                "failed",
                None if failed is None else failed.output,
            ),
            None,
        )
    output = result.output
    if hasattr(output, "model_dump"):  # a pydantic output: the manifest keeps its JSON
        output = output.model_dump(mode="json")
    return (
        CycleSummary(
            number, run_id, result.workflow_version_id or _UNCOMPILED, "completed", output
        ),
        result,
    )


def _fleet_world(client: Client, world: World | None, options: RunOptions) -> World:
    """The world of a loop on the fleet: the client's (``world``, if given, must be it)."""
    local = options.not_on_fleet()
    if local:
        raise InvalidInputError(
            f"run_outer_loop: {', '.join(local)} run cycles in this process; with client= "
            "the fleet's workers run them with their app's capabilities"
        )
    if world is not None and world is not client.world:
        raise InvalidInputError(
            "run_outer_loop: with client=, the loop's world is the client's; pass one of them"
        )
    return client.world


def _archive(world: World, run_id: str) -> None:
    """Hand the cycle's run to the world's archive once its decision is on it (a world that
    archives, RedisS3World, seals an archived log even to ``OuterLoopCycleCompleted``). A
    failed archive changes nothing of the loop: the run stays readable where it is."""
    archives = extras_of(world).archives
    if archives is None:
        return
    with suppress(LittleError):
        archives.archive_run(run_id)


def _run_state(world: World, run_id: str, pricing_fallback: PriceFallback | None) -> Any:
    from little_dist.run_state import materialize_run_state

    events = world.list_events(run_id)
    if not events:
        return None
    return materialize_run_state(events, run_id=run_id, pricing_fallback=pricing_fallback)


def _done_result(
    world: World,
    final_output: Any,
    cycle: CycleSummary,
    pricing_fallback: PriceFallback | None,
    outcome: RunResult | None = None,
) -> RunResult:
    state = _run_state(world, cycle.run_id, pricing_fallback)
    if state is None and outcome is not None:
        state = outcome.state
    if state is None:
        from little_dist.run_state import materialize_run_state

        state = materialize_run_state([], run_id=cycle.run_id)
    return RunResult(
        run_id=cycle.run_id,
        status="completed",
        output=final_output,
        usage=state.usage,
        state=state,
        workflow_version_id=state.workflow_version_id or cycle.workflow_version_id,
    )


def _exhausted(
    world: World,
    loop_id: str,
    cycles: Sequence[CycleSummary],
    pricing_fallback: PriceFallback | None,
) -> OuterLoopError:
    last = cycles[-1]
    state = _run_state(world, last.run_id, pricing_fallback)
    result = None
    if state is not None:
        result = RunResult(
            run_id=last.run_id,
            status="failed",
            output=None,
            usage=state.usage,
            state=state,
            workflow_version_id=state.workflow_version_id or last.workflow_version_id,
        )
    return OuterLoopError(
        f"Outer loop exhausted after {last.cycle_number} cycles (outerLoopId: {loop_id}).",
        outer_loop_id=loop_id,
        cause_code="outer_loop_exhausted",
        run_id=last.run_id,
        workflow_version_id=last.workflow_version_id,
        result=result,
        last_cycle_output=last.output,
    )
