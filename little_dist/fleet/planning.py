"""The ``little.plan`` task: plan a submitted run with its workflow's planner, then start it.

A run submitted by workflow id without a fixed plan (``little.run.submitted``) is planned on
a planner worker: its planner designs the LWIR (or reuses a registered version), the version
is registered and ``RunStarted`` recorded, and the run is advanced. Planning that cannot
succeed ends the run with ``RunFailed``; a failure that may pass is recorded
(``little.run.plan_failed``) and the scheduler sends ``little.plan`` again (see
:meth:`~little_dist.fleet.scheduler.Scheduler.advance`).

A sub-run whose workflow the planner plans (a workflow tool's child, see
:mod:`little_dist.subruns`) is submitted the same way, its parent link in the submission
(``little.run.submitted``'s ``parent``): every ``RunStarted`` planning records for it, of
the planned run or of its failure, carries that link, so the scheduler tells the parent how
the child ended (``little.subrun.ended``) as for any child, a planning failure included.

Once only. Planning holds the run's ``plan`` lease (kept alive while it works); a planner
worker killed mid-plan leaves it to expire, and the re-sent ``little.plan`` finds what the
session recorded (its drafts and model replies, by occurrence id: a reply recorded is not
asked again, a version registered is not planned again). The run's start is one append
under the occurrence ``run-start``: however often it is planned, the run starts once.

An outer loop's cycle (see :mod:`little_dist.outer_loop.fleet`) is submitted so too, its
submission carrying ``outerLoopId``, ``outerLoop`` and ``promptNote``: the planner is shown
the cycle as in process, and ``RunStarted`` carries ``outerLoopId``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.errors import InvalidInputError, LittleError, StorageUnavailableError
from little_dist.event_types.engine import (
    PLAN_FAILED_EVENT_TYPE,
    SUBMITTED_EVENT_TYPE,
    SUBMITTED_PARENT_FIELD,
)
from little_dist.events import Event, EventInput
from little_dist.fleet.run_tracker import RunTracker
from little_dist.ids import validate_run_id
from little_dist.runtime import LeaseHeartbeat
from little_dist.world.base import World, unique_holder
from little_dist.world.fleet_keys import plan_lease_key

if TYPE_CHECKING:
    from little_dist.fleet.worker import WorkerRuntime

__all__ = ["PLAN_ATTEMPTS", "fail_unplanned", "plan"]

_log = logging.getLogger("little.worker")

#: Plan attempts of one run that may fail (without a cause that ends it at once) before the
#: run is failed.
PLAN_ATTEMPTS = 3


def plan(runtime: WorkerRuntime, run_id: str) -> str:
    """Plan a submitted run with its workflow's planner, then start it.

    A run asked to stop before it was planned (``little.run.cancel_requested``) ends
    failed with causeCode ``cancelled``, its planner not called.

    Planning that cannot succeed ends the run: a ``RunFailed`` naming the cause is
    recorded (``input_schema_error`` for an input the planned version refuses,
    ``planner_failed`` for a planner that fails for good or ``PLAN_ATTEMPTS`` times,
    ``internal`` for anything unexpected that happens that often). A failure that may
    pass (storage unreachable, a provider's rate limit) leaves the run submitted: the
    scheduler sends ``little.plan`` again after ``dispatch_resend_after``, as it does
    when a planner worker dies mid-plan.
    """
    validate_run_id(run_id)
    world = runtime.world
    events = world.list_events(run_id)
    tracker = RunTracker(
        world,
        run_id,
        versions=runtime.versions,
        max_branches_cap=runtime.settings.max_branches_cap,
        window=runtime.window,
    )
    tracker.fold(events)
    if any(event.type == "RunStarted" for event in events):
        runtime.advance(tracker, force=True)
        return "started"
    submitted = next((e for e in events if e.type == SUBMITTED_EVENT_TYPE), None)
    if submitted is None:
        _log.warning("plan %s: nothing was submitted under this run id", run_id)
        return "unknown_run"
    workflow_id = submitted.payload.get("workflowId")
    run_input = submitted.payload.get("input")
    parent = _parent_of(submitted)
    if tracker.cancel_requested:
        # Asked to stop before it was planned (its parent ended, ``little cancel``, its
        # deadline): ended without a planner call; the scheduler tells the parent.
        error = tracker.cancel_error or {}
        if error.get("causeCode") not in ("timeout", "deadline_exceeded"):
            error = {}  # (a plain cancel: said as before)
        fail_unplanned(
            world,
            run_id,
            error.get("message") or "Run was cancelled before it was planned.",
            name=error.get("name") or "AbortError",
            cause=error.get("causeCode") or "cancelled",
            parent=parent,
        )
        return "cancelled"
    definition = runtime.registry.get(workflow_id) if isinstance(workflow_id, str) else None
    if definition is None:
        fail_unplanned(
            world,
            run_id,
            f"workflow {workflow_id!r} is not defined in the planner's app module "
            f"({', '.join(runtime.registry.modules) or 'no --app given'})",
            parent=parent,
        )
        return "unknown_workflow"
    lease = world.acquire_lease(
        plan_lease_key(run_id),
        unique_holder(runtime.name),
        runtime.settings.lease_ttl,
    )
    if lease is None:
        return "busy"  # another planner works on it
    heartbeat = LeaseHeartbeat(world, lease, runtime.settings.lease_ttl).start()
    try:
        try:
            started = _plan_and_start(
                runtime, run_id, definition, run_input, parent, **_cycle_of(submitted.payload)
            )
        except Exception as error:
            return _planning_failed(runtime, run_id, events, error, parent)
    finally:
        heartbeat.stop()
        with contextlib.suppress(LittleError):  # it expires anyway
            world.release_lease(heartbeat.lease)
    if not started:
        return "failed"  # the planner gave up and recorded RunFailed
    runtime.advance(tracker, force=True)
    return "started"


def _parent_of(submitted: Event) -> dict[str, Any]:
    """The parent link a sub-run's submission carries (empty for a top-level run)."""
    parent = submitted.payload.get(SUBMITTED_PARENT_FIELD)
    return dict(parent) if isinstance(parent, Mapping) else {}


def _cycle_of(submitted: Mapping[str, Any]) -> dict[str, Any]:
    """What a submitted outer-loop cycle tells its planning (see
    :func:`~little_dist.fleet.submission.submit_run`'s ``cycle``): nothing for another run."""
    loop_id = submitted.get("outerLoopId")
    context = submitted.get("outerLoop")
    if not isinstance(loop_id, str) or not isinstance(context, Mapping):
        return {}
    note = submitted.get("promptNote")
    return {
        "cycle_parent": {"outerLoopId": loop_id},
        "outer_loop": context,
        "prompt_note": note if isinstance(note, str) else None,
    }


def _plan_and_start(
    runtime: WorkerRuntime,
    run_id: str,
    definition: Any,
    run_input: Any,
    parent: Mapping[str, Any],
    *,
    cycle_parent: Mapping[str, Any] | None = None,
    outer_loop: Mapping[str, Any] | None = None,
    prompt_note: str | None = None,
) -> bool:
    """Resolve the run's version (planning it if need be) and record its start (with the
    sub-run's ``parent`` link, or an outer-loop cycle's ``outerLoopId``); False when
    planning failed and recorded ``RunFailed`` itself. ``outer_loop`` / ``prompt_note``:
    an outer-loop cycle's (:func:`_cycle_of`), as the in-process cycle passes them."""
    parent = {**parent, **(cycle_parent or {})}
    from little_dist.local_runner import check_run_input
    from little_dist.planner import resolve_version

    world = runtime.world
    version = resolve_version(
        world,
        run_id,
        definition,
        run_input,
        # (with the worker's limiter: its planner's calls count against daily key ceilings)
        capabilities=dataclasses.replace(
            runtime.registry.capabilities_for_workflow(definition.id), quotas=runtime.quotas
        ),
        parent=parent or None,
        outer_loop=outer_loop,
        prompt_note=prompt_note,
    )
    if version is None:
        return False
    check_run_input(version, run_input)
    world.append_batch(
        run_id,
        [
            EventInput(
                type="WorkflowVersionRegistered",
                occurrence_id=occurrences.VERSION_REGISTERED,
                payload={
                    "workflowVersionId": version.id,
                    "workflowVersionHash": version.hash,
                },
            ),
            EventInput(
                type="RunStarted",
                occurrence_id=occurrences.RUN_START,
                payload={**parent, "workflowVersionId": version.id, "input": run_input},
            ),
        ],
    )
    return True


def _planning_failed(
    runtime: WorkerRuntime,
    run_id: str,
    events: Sequence[Event],
    error: Exception,
    parent: Mapping[str, Any],
) -> str:
    """Record why planning ``run_id`` failed: ``RunFailed`` when it cannot succeed (or
    failed ``PLAN_ATTEMPTS`` times), else one ``little.run.plan_failed`` (the scheduler
    sends ``little.plan`` again later). Storage errors record nothing: the log may be
    unreachable, and the re-send covers them."""
    from little_dist.local_runner import RunInputError
    from little_dist.planner.harnesses import PlannerError

    if isinstance(error, StorageUnavailableError):
        _log.warning("plan %s: storage unavailable (planning again later)", run_id, exc_info=True)
        return "retry"
    failures = 1 + sum(1 for event in events if event.type == PLAN_FAILED_EVENT_TYPE)
    if isinstance(error, RunInputError):
        name, cause, final = "RunInputError", "input_schema_error", True
    elif isinstance(error, PlannerError):
        name, cause, final = "PlannerError", "planner_failed", not _passing(error)
    elif isinstance(error, InvalidInputError):
        name, cause, final = type(error).__name__, "runtime_config_error", True
    else:
        name, cause, final = type(error).__name__, "internal", False
    message = f"planning failed: {error}" if str(error) else f"planning failed: {name}"
    _log.warning(
        "plan %s: %s (attempt %d of %d)",
        run_id,
        message,
        failures,
        PLAN_ATTEMPTS,
        exc_info=True,
    )
    if final or failures >= PLAN_ATTEMPTS:
        fail_unplanned(runtime.world, run_id, message, name=name, cause=cause, parent=parent)
        return "failed"
    runtime.world.append(
        run_id,
        EventInput(
            type=PLAN_FAILED_EVENT_TYPE,
            occurrence_id=occurrences.plan_failed(failures),
            payload={"attempt": failures, "error": {"name": name, "message": message}},
        ),
    )
    return "retry"


def _passing(error: Exception) -> bool:
    """Whether a planner error may pass on its own (its model call's error is retriable)."""
    from little_dist.harness.errors import model_error_from

    cause = error.__cause__
    if cause is None:
        return False  # a misbehaving harness: it will misbehave again
    return bool(model_error_from(cause, model="planner").envelope().get("retriable"))


def end_unplanned(world: World, run_id: str, error: Mapping[str, Any]) -> None:
    """End a run still waiting for its planner with ``error`` (its deadline passed): as
    :func:`fail_unplanned`, with the submission's parent link."""
    submitted = next((e for e in world.list_events(run_id) if e.type == SUBMITTED_EVENT_TYPE), None)
    fail_unplanned(
        world,
        run_id,
        str(error.get("message")),
        name=str(error.get("name")),
        cause=str(error.get("causeCode")),
        parent=None if submitted is None else _parent_of(submitted),
    )


def fail_unplanned(
    world: World,
    run_id: str,
    message: str,
    *,
    name: str = "RuntimeConfigError",
    cause: str = "runtime_config_error",
    parent: Mapping[str, Any] | None = None,
) -> None:
    """End a run that was never planned: ``RunStarted`` (with a sub-run's ``parent`` link,
    so its parent hears of the failure) and ``RunFailed`` naming ``cause``."""
    world.append_batch(
        run_id,
        [
            EventInput(
                type="RunStarted",
                occurrence_id=occurrences.RUN_START,
                payload={**(parent or {}), "workflowVersionId": "uncompiled"},
            ),
            EventInput(
                type="RunFailed",
                occurrence_id=occurrences.RUN_END,
                payload={
                    "workflowVersionId": "uncompiled",
                    "error": {
                        "name": name,
                        "message": message,
                        "causeCode": cause,
                        "retriable": False,
                    },
                },
            ),
        ],
    )
