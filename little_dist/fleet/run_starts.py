"""What a run's start records, and whether a submission repeats one recorded before.

Shared by every way a run is started (:mod:`~little_dist.fleet.submission`, step by step
here, or in one round trip: :mod:`~little_dist.fleet.one_trip_starts`): the events of a
start (``WorkflowVersionRegistered`` + ``RunStarted``, occurrence ids ``version-registered``
and ``run-start``, as the in-process runner writes them), the claim of a run id for one
input, and the check that a run submitted again was submitted with the same input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from little_dist import occurrences
from little_dist.budgets import budget_event
from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler import WorkflowVersion
from little_dist.event_types.engine import SUBMITTED_EVENT_TYPE
from little_dist.events import Event, EventInput
from little_dist.fleet.callbacks import callback_event
from little_dist.fleet.submission_requests import SubmitRequest
from little_dist.fleet.versions import BINDING_FIELD
from little_dist.local_runner import RunMismatchError
from little_dist.run_limits import RunLimits
from little_dist.world.base import World

__all__ = [
    "Started",
    "check_same",
    "claim_run",
    "record_start",
    "recorded_input",
    "start_events",
    "start_step_by_step",
]

UNCOMPILED: Final = "uncompiled"


def recorded_input(events: list[Event]) -> tuple[bool, Any, str | None]:
    """``(found, input, version id)`` of a run's RunStarted or submission, if any."""
    for event in events:
        if event.type == "RunStarted" and "input" in event.payload:
            return True, event.payload.get("input"), event.payload.get("workflowVersionId")
        if event.type == SUBMITTED_EVENT_TYPE:
            return True, event.payload.get("input"), None
    return False, None, None


def check_same(run_id: str, events: list[Event], run_input: Any, version_id: str | None) -> bool:
    """Whether the run already exists with this input (raises if with another one)."""
    for event in events:
        if event.type == "OrchestrationRequested":
            recorded_hash = event.payload.get("inputHash")
            if isinstance(recorded_hash, str) and recorded_hash != sha256_digest(run_input):
                raise RunMismatchError(f"run {run_id} was submitted with a different input")
    found, recorded, recorded_version = recorded_input(events)
    if not found:
        return False
    if canonical_json(recorded) != canonical_json(run_input):
        raise RunMismatchError(f"run {run_id} was submitted with a different input")
    if (
        version_id is not None
        and recorded_version not in (None, UNCOMPILED)
        and recorded_version != version_id
    ):
        raise RunMismatchError(
            f"run {run_id} runs workflow version {recorded_version}, not {version_id}"
        )
    return True


def start_events(
    version: WorkflowVersion,
    run_input: Any,
    binding: dict[str, Any] | None = None,
    parent: Mapping[str, Any] | None = None,
    budget: float | None = None,
    limits: RunLimits | None = None,
    callback: str | None = None,
) -> list[EventInput]:
    """``binding``: the version's (:func:`~little_dist.fleet.versions.split_version`), when
    the version is stored as a shared part and this binding rather than whole; ``budget``:
    the run's dollar ceiling, recorded first; ``limits``: the run's deadline and max
    attempts (:mod:`little_dist.run_limits`), recorded with it; ``callback``: the URL the
    run's end is POSTed to (:mod:`little_dist.fleet.callbacks`)."""
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
        # (after the version: a log's first event names its workflow, for `little runs`)
        *([limits.event()] if limits else []),
        *([] if callback is None else [callback_event(callback)]),
        EventInput(
            type="RunStarted",
            occurrence_id=occurrences.RUN_START,
            payload={**(parent or {}), "workflowVersionId": version.id, "input": run_input},
        ),
    ]


def record_start(
    world: World,
    run_id: str,
    version: WorkflowVersion,
    run_input: Any,
    planning: Sequence[EventInput] = (),
    *,
    signal: bool = True,
    parent: Mapping[str, Any] | None = None,
    budget: float | None = None,
    limits: RunLimits | None = None,
    callback: str | None = None,
) -> list[Event]:
    """Record the run's start (after ``planning``, its planning session's events) in one
    append; the recorded events. ``signal=False``: the caller advances the run itself."""
    # Stored before the events that name it, so a reader never finds a dangling id.
    world.register_version(version.id, version.to_json())
    return world.append_batch(
        run_id,
        [
            *planning,
            *start_events(
                version, run_input, parent=parent, budget=budget, limits=limits, callback=callback
            ),
        ],
        signal=signal,
    )


def claim_run(world: World, request: SubmitRequest) -> list[Event]:
    """Claim the run id for this input (concurrent submitters that all read an empty log
    agree here, in one atomic step, on whose input the run gets; the others are refused
    before writing); the run's log so far."""
    input_hash = request.input_hash
    if world.claim_submission(request.run_id, input_hash) != input_hash:
        raise RunMismatchError(f"run {request.run_id} was submitted with a different input")
    return world.list_events(request.run_id)


@dataclass
class Started:
    """A run whose start is recorded: its version, and what this call recorded from the
    run's first event on (empty: the log must be read)."""

    run_id: str
    version: WorkflowVersion
    recorded: list[Event] = field(default_factory=list)


def start_step_by_step(
    world: World, request: SubmitRequest, announce: Callable[[str], None] | None
) -> Started | None:
    """Claim, read the log, then record what is missing of the start (any world); ``None``
    when the run failed before it started (its fixed plan is invalid: RunFailed is
    recorded)."""
    run_id, run_input = request.run_id, request.run_input
    version, definition = request.version, request.definition
    events = claim_run(world, request)
    check_same(run_id, events, run_input, version.id if version else None)
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
            recorded = record_start(
                world,
                run_id,
                version,
                run_input,
                planned.events,
                signal=not quiet,
                parent=request.parent,
                budget=request.budget_usd,
                limits=request.limits,
                callback=request.callback_url,
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
        record_start(
            world,
            run_id,
            version,
            run_input,
            signal=not (quiet and not events),
            parent=request.parent,
            budget=request.budget_usd,
            limits=request.limits,
            callback=request.callback_url,
        )
    return Started(run_id, version, recorded)
