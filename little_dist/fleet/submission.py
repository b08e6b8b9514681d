"""Submitting a run to the fleet: :func:`submit_run`, what ``Client.submit``, ``little submit``
and the ``little.submit_run`` task call.

Submitting writes to the world only (and sends tasks by name): the compiled
WorkflowVersion is registered, ``WorkflowVersionRegistered`` + ``RunStarted`` are appended
(occurrence ids ``version-registered`` and ``run-start``, as the in-process runner writes
them). The client then advances the run once itself (decide + dispatch under the dispatch
leases), so the first steps start without waiting for a scheduler round trip. The
scheduler would only make the same first decision at the same moment: the client adds the
run to the scheduler's active runs before recording its start, and the start does not
signal it (a client that dies before its first decision leaves the run to the scheduler's
next sweeps, seconds later). Runs submitted without a Celery app to send with (and the
``little.submit_run`` task, unless the fleet shares one Redis: see below) signal the
scheduler as usual.

What is submitted decides where the WorkflowVersion comes from:

* an LWIR document (dict) or a compiled :class:`~little_dist.compiler.WorkflowVersion`:
  compiled here, against the run input;
* a :class:`~little_dist.authoring.WorkflowDefinition` with a fixed ``plan=``: resolved
  here with :func:`~little_dist.planner.resolve_version` (no model call);
* a definition the planner must design, or a workflow id registered in the workers'
  ``--app`` module: ``little.run.submitted`` ``{workflowId, input}`` (and a sub-run's
  ``parent`` link) is appended (occurrence ``submit``) and ``little.plan(run_id)`` is sent
  to the planner queue, whose worker plans the run and starts it. Planning never happens
  in the client.

Submitting is idempotent on the run id: the same id with the same input (and workflow)
returns the id again; another input raises :class:`RunMismatchError`, also when the
submits run at once: the world records the first input's hash for the run id in one
atomic step (:meth:`~little_dist.world.base.World.claim_submission`), before anything else
is written.

What a submit costs: where the world can (``RedisS3World.start_submission``) and the
version is compiled here, the claim and the start are that one atomic step, one round trip,
without reading the (empty) log first; a version this process registered before costs
nothing more (:func:`_start_at_once`). Elsewhere: claim, read the log, record what is
missing (:func:`_start_step_by_step`).

Cheapest of all, a fleet whose world, scheduler and broker share one Redis
(:class:`~little_dist.fleet.shared_redis.SharedRedis`, which ``Client`` and the workers find
out): the run's first decision is made here before anything is written (the pure core, on
the start this call is about to record), and one script (``RedisS3World.start_and_send``)
claims the run id, adds the run to the scheduler's active runs, records the start and that
decision onto the empty log, takes the dispatch leases and pushes the first tasks' Celery
messages (printed by
:mod:`~little_dist.fleet.task_messages`): one round trip, and nothing half done if the
client dies, since it is one atomic step. A run id given by the caller costs a look at S3
(is the run archived?), made on another thread while the rest is printed
(:func:`_start_and_send`). A run whose log exists already, whose first decision is more
than schedules, or whose start the script refuses goes the ways above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from little_dist import occurrences
from little_dist.budgets import budget_event
from little_dist.canonical import (
    canonical_json,
    sha256_digest,
)
from little_dist.compiler import WorkflowVersion
from little_dist.errors import InvalidInputError
from little_dist.event_types.engine import (
    BUDGET_EVENT_TYPE,
    SUBMITTED_EVENT_TYPE,
    SUBMITTED_PARENT_FIELD,
)
from little_dist.events import Event, EventInput, recorded_event
from little_dist.fleet.dispatch import advance_run
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import dispatch_lease_key, dispatch_plan, task_name_for
from little_dist.fleet.submission_requests import (
    Planned,
    SubmitRequest,
    checked_request,
    planned_version,
)
from little_dist.fleet.versions import BINDING_FIELD, VersionCache, split_version
from little_dist.ids import event_id_for_payload_json, json_string, validate_run_id
from little_dist.limits import InputLimits
from little_dist.local_runner import RunMismatchError, new_run_id
from little_dist.scheduling import Decision, decide
from little_dist.settings import Settings
from little_dist.world.artifacts import now_iso
from little_dist.world.base import World, unique_holder
from little_dist.world.defaults import PreparedEvent, prepare_events

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.queue import TaskQueue
    from little_dist.fleet.shared_redis import SharedRedis
    from little_dist.fleet.slots import FanoutWindow

__all__ = ["RunMismatchError", "submit_run", "submit_runs"]

_UNCOMPILED: Final = "uncompiled"
#: Runs of a batch whose starts go in one pipeline (see submit_runs).
_SEND_EVERY: Final = 25


def _recorded_input(events: list[Event]) -> tuple[bool, Any, str | None]:
    """``(found, input, version id)`` of a run's RunStarted or submission, if any."""
    for event in events:
        if event.type == "RunStarted" and "input" in event.payload:
            return True, event.payload.get("input"), event.payload.get("workflowVersionId")
        if event.type == SUBMITTED_EVENT_TYPE:
            return True, event.payload.get("input"), None
    return False, None, None


def _check_same(run_id: str, events: list[Event], run_input: Any, version_id: str | None) -> bool:
    """Whether the run already exists with this input (raises if with another one)."""
    for event in events:
        if event.type == "OrchestrationRequested":
            recorded_hash = event.payload.get("inputHash")
            if isinstance(recorded_hash, str) and recorded_hash != sha256_digest(run_input):
                raise RunMismatchError(f"run {run_id} was submitted with a different input")
    found, recorded, recorded_version = _recorded_input(events)
    if not found:
        return False
    if canonical_json(recorded) != canonical_json(run_input):
        raise RunMismatchError(f"run {run_id} was submitted with a different input")
    if (
        version_id is not None
        and recorded_version not in (None, _UNCOMPILED)
        and recorded_version != version_id
    ):
        raise RunMismatchError(
            f"run {run_id} runs workflow version {recorded_version}, not {version_id}"
        )
    return True


def _start_events(
    version: WorkflowVersion,
    run_input: Any,
    binding: dict[str, Any] | None = None,
    parent: Mapping[str, Any] | None = None,
    budget: float | None = None,
) -> list[EventInput]:
    """``binding``: the version's (:func:`~little_dist.fleet.versions.split_version`), when
    the version is stored as a shared part and this binding rather than whole; ``budget``:
    the run's dollar ceiling, recorded first."""
    registered: dict[str, Any] = {
        "workflowVersionId": version.id,
        "workflowVersionHash": version.hash,
    }
    if binding is not None:
        registered[BINDING_FIELD] = binding
    return [
        *([] if budget is None else [budget_event(budget)]),
        EventInput(
            type="WorkflowVersionRegistered",
            occurrence_id=occurrences.VERSION_REGISTERED,
            payload=registered,
        ),
        EventInput(
            type="RunStarted",
            occurrence_id=occurrences.RUN_START,
            payload={**(parent or {}), "workflowVersionId": version.id, "input": run_input},
        ),
    ]


def _start(
    world: World,
    run_id: str,
    version: WorkflowVersion,
    run_input: Any,
    planning: Sequence[EventInput] = (),
    *,
    signal: bool = True,
    parent: Mapping[str, Any] | None = None,
    budget: float | None = None,
) -> list[Event]:
    """Record the run's start (after ``planning``, its planning session's events) in one
    append; the recorded events. ``signal=False``: the caller advances the run itself."""
    # Stored before the events that name it, so a reader never finds a dangling id.
    world.register_version(version.id, version.to_json())
    return world.append_batch(
        run_id,
        [*planning, *_start_events(version, run_input, parent=parent, budget=budget)],
        signal=signal,
    )


def submit_run(
    world: World,
    workflow: WorkflowDefinition | WorkflowVersion | Mapping[str, Any] | str,
    run_input: Any = None,
    *,
    run_id: str | None = None,
    queue: TaskQueue | None = None,
    settings: Settings | None = None,
    registry: AppRegistry | None = None,
    holder: str = "client",
    window: FanoutWindow | None = None,
    announce: Callable[[str], None] | None = None,
    parent: Mapping[str, Any] | None = None,
    cycle: Mapping[str, Any] | None = None,
    shared: SharedRedis | None = None,
    budget_usd: float | None = None,
) -> str:
    """Submit one run (see the module docstring); its run id.

    ``budget_usd``: the run's dollar ceiling (default: a definition's own), recorded as
    ``little.run.budget`` before its start: the workers' model calls reserve against it
    (see :mod:`little_dist.budgets`).

    ``cycle``: the run is one cycle of an outer loop (see :mod:`little_dist.outer_loop`):
    ``{outerLoopId, outerLoop, promptNote?}``, recorded in ``little.run.submitted`` for the
    fleet's planner, which shows the planner the cycle's context and records
    ``outerLoopId`` in ``RunStarted``. Such a run always goes to the planner (a fixed plan
    too: the planner worker records it without a model call, with the cycle's context, as
    the in-process cycle does), so ``workflow`` is a definition or a registered id.

    ``parent``: a sub-run's link to the run that started it (``parentRunId``, ... see
    :mod:`little_dist.subruns.links`), recorded in its ``RunStarted`` (by the planner, for
    a workflow the fleet's planner plans: the submission carries it).

    ``queue`` + ``settings`` let it send tasks (the planner's, the first steps'); without them
    the run is only recorded and the scheduler, signalled by the append, takes it from there.
    ``registry`` resolves a workflow given by id. ``window``: the fleet's cap on a fan-out's
    branches in flight (:mod:`little_dist.fleet.slots`), for the first decision.
    ``announce``: registers the run with the scheduler's sweeper (its active runs); given
    with ``queue`` and ``settings``, the run is announced before its start is recorded, and
    the start does not signal the scheduler, since this call makes the first decision and
    sends its tasks (a client that dies before that leaves the run to the next sweep).
    ``shared`` (with ``queue`` and ``settings``): the fleet shares one Redis, so the start,
    the run's entry among the active runs and the first tasks go in one script where they
    can (the start does not signal the scheduler then, as with ``announce``).

    The input and a submitted document are checked against the limits of ``settings`` (the
    defaults without; see :mod:`little_dist.limits`) before anything is read or written, and
    a document (an LWIR, a compiled version, a definition's ``plan``) against the
    capabilities ``registry`` registers for its workflow
    (:meth:`~little_dist.fleet.app_registry.AppRegistry.check_version`): it may select among
    them, never name another tool, model slot or harness. Without a registry only the
    workers check that, when a step runs (it fails with ``runtime_config_error``).
    """
    limits = settings.limits if settings is not None else InputLimits()
    look: Future[bool] | None = None
    if shared is not None and run_id is not None and cycle is None:
        # The S3 look of a given run id runs while the rest is checked and printed.
        look = shared.look(world, validate_run_id(run_id))
    request = checked_request(workflow, run_input, run_id, registry, limits, budget_usd=budget_usd)
    if cycle is not None:
        path = request.planner_path or (
            request.definition.id if request.definition is not None else None
        )
        if path is None or parent:
            raise InvalidInputError(
                "an outer-loop cycle is submitted with its workflow (a definition or a "
                "registered id) and no parent link"
            )
        _submit_to_planner(world, request, path, queue, settings, holder, cycle=cycle)
        return request.run_id
    if parent:
        request.parent = dict(parent)
    if request.planner_path is not None:
        _submit_to_planner(world, request, request.planner_path, queue, settings, holder)
        return request.run_id
    advances = queue is not None and settings is not None
    quiet = advances and announce is not None
    if (
        shared is not None
        and queue is not None
        and settings is not None
        and _start_and_send(world, request, shared, settings, holder, window, look)
    ):
        return request.run_id
    started = _start_at_once(world, request, announce if quiet else None)
    if started is None:
        started = _start_step_by_step(world, request, announce if quiet else None)
    if started is not None and queue is not None and settings is not None:
        _first_look(world, queue, settings, started, holder=holder, window=window)
    return request.run_id


def _claim(world: World, request: SubmitRequest) -> list[Event]:
    """Claim the run id for this input (concurrent submitters that all read an empty log
    agree here, in one atomic step, on whose input the run gets; the others are refused
    before writing); the run's log so far."""
    input_hash = request.input_hash
    if world.claim_submission(request.run_id, input_hash) != input_hash:
        raise RunMismatchError(f"run {request.run_id} was submitted with a different input")
    return world.list_events(request.run_id)


def _submit_to_planner(
    world: World,
    request: SubmitRequest,
    planner_path: str,
    queue: TaskQueue | None,
    settings: Settings | None,
    holder: str,
    *,
    cycle: Mapping[str, Any] | None = None,
) -> None:
    """Record the submission for the planner and send ``little.plan`` (if not yet);
    ``cycle``: an outer-loop cycle's fields, recorded beside ``workflowId`` and ``input``.

    A sub-run's submission carries its parent link (``parent``): the planner records it in
    the ``RunStarted`` it appends, planned or failed (:mod:`little_dist.fleet.planning`)."""
    run_id = request.run_id
    events = _claim(world, request)
    if not _check_same(run_id, events, request.run_input, None):
        payload: dict[str, Any] = {"workflowId": planner_path, "input": request.run_input}
        if request.parent:
            payload[SUBMITTED_PARENT_FIELD] = dict(request.parent)
        if request.budget_usd is not None:  # (before the planner can start it)
            world.append(run_id, budget_event(request.budget_usd))
        world.append(
            run_id,
            EventInput(
                type=SUBMITTED_EVENT_TYPE,
                occurrence_id=occurrences.SUBMITTED,
                payload={**(cycle or {}), **payload},
            ),
        )
    if queue is not None and settings is not None:
        tracker = RunTracker(world, run_id, max_branches_cap=settings.max_branches_cap)
        tracker.catch_up()
        if tracker.awaiting_plan:
            dispatch_plan(world, queue, settings, run_id, holder=holder)


@dataclass
class _Started:
    """A run whose start is recorded: its version, and what this call recorded from the
    run's first event on (empty: the log must be read)."""

    run_id: str
    version: WorkflowVersion
    recorded: list[Event] = field(default_factory=list)


def _start_at_once(
    world: World, request: SubmitRequest, announce: Callable[[str], None] | None
) -> _Started | None:
    """The common case, one round trip: the version is compiled here, its shared part was
    stored before (:mod:`little_dist.fleet.versions`), and the claim and the start (the
    version's binding with it) are recorded in one atomic step, without reading the log
    first (``world.start_submission``, where the world has it). ``None``: not
    possible here (another world; a fixed plan that is invalid for this input, whose
    failure :func:`_start_step_by_step` records)."""
    start = getattr(world, "start_submission", None)
    if start is None or not hasattr(world, "put_version_part"):
        return None
    planned = planned_version(request)
    if planned is None:
        return None
    version = planned.version
    if announce is not None:
        announce(request.run_id)
    events = _bound_start(world, planned, request)
    claimed, recorded, new = start(
        request.run_id, request.input_hash, events, signal=announce is None, fresh=request.fresh
    )
    if claimed != request.input_hash:
        raise RunMismatchError(f"run {request.run_id} was submitted with a different input")
    if new:
        return _Started(request.run_id, version, recorded)
    # Submitted before (with this input): the log says which workflow version it runs.
    _check_same(request.run_id, world.list_events(request.run_id), request.run_input, version.id)
    return _Started(request.run_id, version)


def _start_and_send(
    world: World,
    request: SubmitRequest,
    shared: SharedRedis,
    settings: Settings,
    holder: str,
    window: FanoutWindow | None,
    look: Future[bool] | None,
) -> bool:
    """The run's start, its first decision and first tasks in one script, one round trip
    (see the module docstring); whether it was done so. ``False``: nothing was written but
    possibly the claim of this input (as the other ways claim it first): the caller goes
    another way. :class:`RunMismatchError` when another input claimed the run id."""
    start = getattr(world, "start_and_send", None)
    if start is None or not hasattr(world, "put_version_part"):
        return False
    planned = planned_version(request)
    if planned is None:
        return False
    run_id = request.run_id
    events = _bound_start(world, planned, request)
    first = _first_decision(world, run_id, planned.version, events, settings, window)
    if first is None:
        return False
    tracker, decision = first
    sends: list[tuple[str, str, str, str, str]] = []
    for dispatch in decision.dispatch:
        note = None if dispatch.parent_run_id is None else {"parentRunId": dispatch.parent_run_id}
        push = shared.queue.commands(
            task_name_for(dispatch),
            (dispatch.run_id, dispatch.step_path, dispatch.attempt),
            dispatch.role,
            note=note,
        )
        if push is None:
            return False
        sends.append(
            (dispatch_lease_key(dispatch), push.queue, push.message, push.topic, push.event)
        )
    fresh = request.fresh
    if not fresh:
        # A given run id: an archived run is never started again (the other ways answer it).
        archived = look.result() if look is not None else getattr(world, "has_archive")(run_id)  # noqa: B009
        if archived:
            return False
        fresh = True
    answer = start(
        run_id,
        request.input_hash,
        [*events, *prepare_events(decision.events)],
        sends,
        holder=unique_holder(holder),
        lease_ttl_seconds=settings.dispatch_resend_after,
        active_runs=shared.active_runs,
        fresh=fresh,
    )
    if answer == "mismatch":
        raise RunMismatchError(f"run {run_id} was submitted with a different input")
    if isinstance(answer, str):
        return False  # its log exists (submitted before), or it is archived
    tracker.note_held_back(decision.held_back)
    return True


def _first_decision(
    world: World,
    run_id: str,
    version: WorkflowVersion,
    start: Sequence[PreparedEvent],
    settings: Settings,
    window: FanoutWindow | None,
) -> tuple[RunTracker, Decision] | None:
    """What the run's first look would decide once ``start`` is its whole log (``decide``
    on the folded start, as :func:`~little_dist.fleet.dispatch.advance_run` decides), and
    the tracker it folded them in; ``None`` unless that decision only schedules steps and
    sends their tasks (one round of decide, nothing settled here: the other ways decide
    anything else)."""
    versions = VersionCache()
    versions.put(version)
    tracker = RunTracker(
        world,
        run_id,
        versions=versions,
        max_branches_cap=settings.max_branches_cap,
        window=window,
    )
    recorded_at = now_iso()
    tracker.fold(
        [
            recorded_event(
                # (hashed from the printed payload: the id the world stores for it)
                event_id_for_payload_json(
                    run_id, index, item.type, item.payload_json, item.occurrence_id
                ),
                run_id,
                index,
                item.type,
                item.occurrence_id,
                recorded_at,
                item.payload,
            )
            for index, item in enumerate(start, 1)
        ]
    )
    ctx = tracker.context
    if ctx is None or tracker.last_sequence != len(start):
        return None
    decision = decide(ctx, tracker.state())
    if decision.done or not decision.in_flight_only or not decision.events:
        return None
    if not decision.dispatch or any(d.run_id != run_id for d in decision.dispatch):
        return None
    return tracker, decision


def _bound_start(world: World, planned: Planned, request: SubmitRequest) -> list[PreparedEvent]:
    """The start of a run on a world that keeps version parts: what runs of the workflow
    share is stored once (then remembered: no request), before the events that name it;
    what binds this input rides with the run's start. Printed here (the same bytes as
    :func:`_start_events` prepared, cheaper)."""
    version = planned.version
    shared, binding = split_version(version, planned.shared_part)
    put_part: Callable[[str], str] = getattr(world, "put_version_part")  # noqa: B009
    put_part(shared)
    registered = canonical_json(
        {
            "workflowVersionId": version.id,
            "workflowVersionHash": version.hash,
            BINDING_FIELD: binding,
        }
    )
    if request.parent:
        started = canonical_json(
            {**request.parent, "input": request.run_input, "workflowVersionId": version.id}
        )
    else:
        started = f'{{"input":{request.input_text},"workflowVersionId":{json_string(version.id)}}}'
    budget = request.budget_usd
    return [
        *planned.planning,
        *(
            []
            if budget is None
            else [
                PreparedEvent(
                    BUDGET_EVENT_TYPE, occurrences.BUDGET, canonical_json({"budgetUsd": budget})
                )
            ]
        ),
        PreparedEvent("WorkflowVersionRegistered", occurrences.VERSION_REGISTERED, registered),
        PreparedEvent("RunStarted", occurrences.RUN_START, started),
    ]


def submit_runs(
    world: World,
    workflow: WorkflowDefinition | WorkflowVersion | Mapping[str, Any] | str,
    inputs: Sequence[Any],
    *,
    run_ids: Sequence[str] | None = None,
    settings: Settings | None = None,
    registry: AppRegistry | None = None,
    parents: Sequence[Mapping[str, Any]] | None = None,
    fresh: bool = False,
    budget_usd: float | None = None,
) -> list[str]:
    """Submit one run of ``workflow`` per input (``run_ids``: theirs; new ids without);
    their ids. Each is checked and recorded as :func:`submit_run` records it without a
    queue: its start signals the scheduler, which makes its first decision. Where the world
    can (``RedisS3World.start_submissions``) the starts go a few dozen to a round trip,
    sent while the next ones are printed; every input is checked before any is written.
    Idempotent per run id as :func:`submit_run`; a run id already submitted with another
    input raises :class:`RunMismatchError` once the others are recorded. ``parents``: each
    run's parent link when they are sub-runs (see :func:`submit_run`). ``fresh``: the
    caller knows that no run of ``run_ids`` was ever submitted (so none can be an archived
    run whose Redis keys are gone): a start that finds no log in Redis writes one without
    asking S3 first (ids made up here are fresh anyway)."""
    if run_ids is not None and len(run_ids) != len(inputs):
        raise InvalidInputError(f"{len(run_ids)} run ids for {len(inputs)} inputs")
    if parents is not None and len(parents) != len(inputs):
        raise InvalidInputError(f"{len(parents)} parent links for {len(inputs)} inputs")
    links: list[Mapping[str, Any] | None] = (
        list(parents) if parents is not None else [None] * len(inputs)
    )
    limits = settings.limits if settings is not None else InputLimits()
    ids = list(run_ids) if run_ids is not None else [new_run_id() for _ in inputs]
    fresh = fresh or run_ids is None  # (ids made up here: no archive can hold them)
    starts_at_once = getattr(world, "start_submissions", None)
    if starts_at_once is None or not hasattr(world, "put_version_part"):
        return [
            submit_run(
                world,
                workflow,
                value,
                run_id=run_id,
                settings=settings,
                registry=registry,
                parent=link,
            )
            for run_id, value, link in zip(ids, inputs, links, strict=True)
        ]
    # Every input is checked before anything is written (a bad one leaves the world as it
    # was); then the starts are printed a chunk at a time, each chunk's pipeline sent by
    # another thread while this one prints the next (Redis runs one chunk's scripts while
    # Python prints the next chunk's events).
    requests = [
        checked_request(
            workflow, value, run_id, registry, limits, grants=not index, budget_usd=budget_usd
        )
        for index, (run_id, value) in enumerate(zip(ids, inputs, strict=True))
    ]
    for request, link in zip(requests, links, strict=True):
        if link:
            request.parent = dict(link)
    batch: list[tuple[SubmitRequest, WorkflowVersion]] = []
    sent: list[Future[list[str | None]]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="little-submit") as sender:
        starts: list[tuple[str, str, list[PreparedEvent]]] = []
        for request, value in zip(requests, inputs, strict=True):
            planned = None if request.planner_path is not None else planned_version(request)
            if planned is None:  # the planner's, or an invalid fixed plan: one by one
                submit_run(
                    world,
                    workflow,
                    value,
                    run_id=request.run_id,
                    settings=settings,
                    registry=registry,
                    parent=request.parent,
                    budget_usd=request.budget_usd,
                )
                continue
            batch.append((request, planned.version))
            events = _bound_start(world, planned, request)
            starts.append((request.run_id, request.input_hash, events))
            if len(starts) == _SEND_EVERY:
                sent.append(sender.submit(starts_at_once, starts, signal=True, fresh=fresh))
                starts = []
        if starts:
            sent.append(sender.submit(starts_at_once, starts, signal=True, fresh=fresh))
        answers = [answer for chunk in sent for answer in chunk.result()]
    refused: list[str] = []
    for (request, version), answer in zip(batch, answers, strict=True):
        if answer is None:
            continue
        if answer != request.input_hash:
            refused.append(request.run_id)
            continue
        # Submitted before (with this input): the log says which version it runs.
        recorded = world.list_events(request.run_id)
        _check_same(request.run_id, recorded, request.run_input, version.id)
    if refused:
        raise RunMismatchError(
            f"run {', '.join(refused)} {'was' if len(refused) == 1 else 'were'} submitted "
            "with a different input"
        )
    return ids


def _start_step_by_step(
    world: World, request: SubmitRequest, announce: Callable[[str], None] | None
) -> _Started | None:
    """Claim, read the log, then record what is missing of the start (any world); ``None``
    when the run failed before it started (its fixed plan is invalid: RunFailed is
    recorded)."""
    run_id, run_input = request.run_id, request.run_input
    version, definition = request.version, request.definition
    events = _claim(world, request)
    _check_same(run_id, events, run_input, version.id if version else None)
    recorded: list[Event] = []
    if announce is not None and not events:
        announce(run_id)
    quiet = announce is not None
    if definition is not None and not events:
        # A fresh run of a fixed plan: its planning session and start in one append.
        from little_dist.planner.fixed import fixed_plan_events

        planned = fixed_plan_events(definition, run_input)
        if planned is not None:
            version = planned.version
            recorded = _start(
                world,
                run_id,
                version,
                run_input,
                planned.events,
                signal=not quiet,
                parent=request.parent,
                budget=request.budget_usd,
            )
    if version is None and definition is not None:
        from little_dist.planner import resolve_version

        version = resolve_version(
            world, run_id, definition, run_input, capabilities=definition.capabilities()
        )
        if version is None:  # the fixed plan is invalid: RunFailed is recorded
            return None
    assert version is not None
    if not recorded and not any(event.type == "RunStarted" for event in events):
        _start(
            world,
            run_id,
            version,
            run_input,
            signal=not (quiet and not events),
            parent=request.parent,
            budget=request.budget_usd,
        )
    return _Started(run_id, version, recorded)


def _first_look(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    started: _Started,
    *,
    holder: str,
    window: FanoutWindow | None,
) -> None:
    """The run's first decision, made here, its tasks sent (see the module docstring)."""
    versions = VersionCache()
    versions.put(started.version)  # in hand: the tracker need not read it back
    tracker = RunTracker(
        world,
        started.run_id,
        versions=versions,
        max_branches_cap=settings.max_branches_cap,
        window=window,
    )
    recorded = started.recorded
    # What this call recorded from the run's first event on is the whole log so far
    # unless someone appended meanwhile (then the tracker reads it).
    tracker.fold(recorded)
    whole = bool(recorded) and tracker.last_sequence == max(e.sequence for e in recorded)
    advance_run(world, queue, settings, tracker, holder=holder, read=not whole)


# -- the client ---------------------------------------------------------------------------
