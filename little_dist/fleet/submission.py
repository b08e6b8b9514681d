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
nothing more (:func:`~.one_trip_starts.start_at_once`). Elsewhere: claim, read the log,
record what is missing (:func:`~.run_starts.start_step_by_step`).

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
(:func:`~.one_trip_starts.start_and_send`). A run whose log exists already, whose first
decision is more than schedules, or whose start the script refuses goes the ways above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.budgets import borrows_from, budget_event
from little_dist.compiler import WorkflowVersion
from little_dist.errors import InvalidInputError
from little_dist.event_types.engine import SUBMITTED_EVENT_TYPE, SUBMITTED_PARENT_FIELD
from little_dist.events import EventInput
from little_dist.fleet.callbacks import callback_event
from little_dist.fleet.dispatch import advance_run
from little_dist.fleet.one_trip_starts import start_and_send, start_at_once, start_chunks
from little_dist.fleet.run_starts import Started, check_same, claim_run, start_step_by_step
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import dispatch_plan
from little_dist.fleet.submission_requests import (
    Planned,
    SubmitRequest,
    checked_request,
    planned_version,
)
from little_dist.fleet.versions import VersionCache
from little_dist.ids import validate_run_id
from little_dist.limits import InputLimits
from little_dist.local_runner import RunMismatchError, new_run_id
from little_dist.settings import Settings
from little_dist.world.base import World
from little_dist.world.extras import extras_of

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.fleet.app_registry import AppRegistry
    from little_dist.fleet.queue import TaskQueue
    from little_dist.fleet.shared_redis import SharedRedis
    from little_dist.fleet.worker_slots import FanoutWindow

__all__ = ["RunMismatchError", "submit_run", "submit_runs"]


# Long for its docstring (every way a run is submitted, each option's contract); the code,
# about 40 lines, picks the way.
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
    limits: Mapping[str, Any] | None = None,
    callback_url: str | None = None,
) -> str:
    """Submit one run (see the module docstring); its run id.

    ``callback_url``: where the scheduler POSTs the run's end, signed (an http(s) URL,
    recorded as ``little.run.callback``; see :mod:`little_dist.fleet.callbacks`).

    ``budget_usd``: the run's dollar ceiling (default: a definition's own), recorded as
    ``little.run.budget`` before its start: the workers' model calls reserve against it
    (see :mod:`little_dist.budgets`). ``limits``: ``{"timeout", "deadline",
    "max_attempts"}`` as :func:`~little_dist.run_limits.run_limits` takes them (default: a
    definition's own timeout and max attempts), recorded as ``little.run.limits``.

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
    branches in flight (:mod:`little_dist.fleet.worker_slots`), for the first decision.
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
    input_limits = settings.limits if settings is not None else InputLimits()
    look: Future[bool] | None = None
    if shared is not None and run_id is not None and cycle is None:
        # The S3 look of a given run id runs while the rest is checked and printed.
        look = shared.look(world, validate_run_id(run_id))
    request = checked_request(
        workflow,
        run_input,
        run_id,
        registry,
        input_limits,
        budget_usd=budget_usd,
        callback_url=callback_url,
        **_limit_options(limits),
    )
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
        and start_and_send(world, request, shared, settings, holder, window, look)
    ):
        return request.run_id
    started = start_at_once(world, request, announce if quiet else None)
    if started is None:
        started = start_step_by_step(world, request, announce if quiet else None)
    if started is not None and queue is not None and settings is not None:
        _first_look(world, queue, settings, started, holder=holder, window=window)
    return request.run_id


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
    events = claim_run(world, request)
    if not check_same(run_id, events, request.run_input, None):
        payload: dict[str, Any] = {"workflowId": planner_path, "input": request.run_input}
        if request.parent:
            payload[SUBMITTED_PARENT_FIELD] = dict(request.parent)
        lender = borrows_from(request.parent)
        if request.budget_usd is not None or lender is not None:  # (before the planner)
            world.append(run_id, budget_event(request.budget_usd, lender))
        # (the submission first: a log's first event names its workflow, `little runs`;
        # its limits in the same append, before the planner can start it)
        world.append_batch(
            run_id,
            [
                EventInput(
                    type=SUBMITTED_EVENT_TYPE,
                    occurrence_id=occurrences.SUBMITTED,
                    payload={**(cycle or {}), **payload},
                ),
                *([request.limits.event()] if request.limits else []),
                *([] if request.callback_url is None else [callback_event(request.callback_url)]),
            ],
        )
    if queue is not None and settings is not None:
        tracker = RunTracker(world, run_id, max_branches_cap=settings.max_branches_cap)
        tracker.catch_up()
        if tracker.awaiting_plan:
            dispatch_plan(world, queue, settings, run_id, holder=holder)


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
    limits: Mapping[str, Any] | None = None,
    callback_url: str | None = None,
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
    asking S3 first (ids made up here are fresh anyway). ``callback_url``: each run's end
    is POSTed there, signed, as :func:`submit_run` records it."""
    if run_ids is not None and len(run_ids) != len(inputs):
        raise InvalidInputError(f"{len(run_ids)} run ids for {len(inputs)} inputs")
    if parents is not None and len(parents) != len(inputs):
        raise InvalidInputError(f"{len(parents)} parent links for {len(inputs)} inputs")
    links: list[Mapping[str, Any] | None] = (
        list(parents) if parents is not None else [None] * len(inputs)
    )
    input_limits = settings.limits if settings is not None else InputLimits()
    ids = list(run_ids) if run_ids is not None else [new_run_id() for _ in inputs]
    fresh = fresh or run_ids is None  # (ids made up here: no archive can hold them)
    starts_at_once = extras_of(world).one_trip_starts
    if starts_at_once is None:
        return [
            submit_run(
                world,
                workflow,
                value,
                run_id=run_id,
                settings=settings,
                registry=registry,
                parent=link,
                budget_usd=budget_usd,
                limits=limits,
                callback_url=callback_url,
            )
            for run_id, value, link in zip(ids, inputs, links, strict=True)
        ]
    # Every input is checked before anything is written (a bad one leaves the world as it
    # was); the planner's runs and invalid fixed plans go one by one, the others in chunks.
    requests = [
        checked_request(
            workflow,
            value,
            run_id,
            registry,
            input_limits,
            grants=not index,
            budget_usd=budget_usd,
            callback_url=callback_url,
            **_limit_options(limits),
        )
        for index, (run_id, value) in enumerate(zip(ids, inputs, strict=True))
    ]
    planned: list[tuple[SubmitRequest, Planned]] = []
    for request, value, link in zip(requests, inputs, links, strict=True):
        if link:
            request.parent = dict(link)
        plan = None if request.planner_path is not None else planned_version(request)
        if plan is not None:
            planned.append((request, plan))
            continue
        submit_run(
            world,
            workflow,
            value,
            run_id=request.run_id,
            settings=settings,
            registry=registry,
            parent=request.parent,
            budget_usd=request.budget_usd,
            limits=limits,
            callback_url=request.callback_url,
        )
    start_chunks(world, starts_at_once, planned, fresh=fresh)
    return ids


def _limit_options(limits: Mapping[str, Any] | None) -> dict[str, Any]:
    """``limits`` as :func:`~.submission_requests.checked_request` takes them."""
    given = dict(limits or {})
    unknown = set(given) - {"timeout", "deadline", "max_attempts"}
    if unknown:
        raise InvalidInputError(f"submit: unknown run limits {sorted(unknown)}")
    return given


def _first_look(
    world: World,
    queue: TaskQueue,
    settings: Settings,
    started: Started,
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
