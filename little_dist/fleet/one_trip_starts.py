"""A run's start in one round trip, where the world can
(:class:`~little_dist.world.extras.StartsInOneTrip`).

See :mod:`~little_dist.fleet.submission` for when each way is taken: :func:`start_at_once`
records the claim and the start in one atomic step; :func:`start_and_send` (a fleet whose
world, scheduler and broker share one Redis) also records the run's first decision and
pushes its first tasks in the same script; :func:`start_chunks` starts many runs a few
dozen to a round trip. The first decision sent with a start is made as every look makes it
(:func:`~little_dist.fleet.dispatch.decision_of`), on the start about to be recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

from little_dist import occurrences
from little_dist.canonical import canonical_json
from little_dist.compiler import WorkflowVersion
from little_dist.event_types.engine import (
    BUDGET_EVENT_TYPE,
    CALLBACK_EVENT_TYPE,
    LIMITS_EVENT_TYPE,
)
from little_dist.events import recorded_event
from little_dist.fleet.dispatch import decision_of
from little_dist.fleet.run_starts import Started, check_same
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import dispatch_lease_key, task_name_for
from little_dist.fleet.submission_requests import Planned, SubmitRequest, planned_version
from little_dist.fleet.versions import BINDING_FIELD, VersionCache, split_version
from little_dist.ids import event_id_for_payload_json, json_string
from little_dist.local_runner import RunMismatchError
from little_dist.scheduling import Decision
from little_dist.settings import Settings
from little_dist.world.artifacts import now_iso
from little_dist.world.base import World, unique_holder
from little_dist.world.defaults import PreparedEvent, prepare_events
from little_dist.world.extras import KeepsVersionParts, StartsInOneTrip, extras_of

if TYPE_CHECKING:
    from little_dist.fleet.shared_redis import SharedRedis
    from little_dist.fleet.worker_slots import FanoutWindow

__all__ = ["bound_start", "first_decision", "start_and_send", "start_at_once", "start_chunks"]

#: Runs of a batch whose starts go in one pipeline (see start_chunks).
_SEND_EVERY: Final = 25


def start_at_once(
    world: World, request: SubmitRequest, announce: Callable[[str], None] | None
) -> Started | None:
    """The common case, one round trip: the version is compiled here, its shared part was
    stored before (:mod:`little_dist.fleet.versions`), and the claim and the start (the
    version's binding with it) are recorded in one atomic step, without reading the log
    first (``world.start_submission``, where the world has it). ``None``: not
    possible here (another world; a fixed plan that is invalid for this input, whose
    failure :func:`start_step_by_step` records)."""
    starts = extras_of(world).one_trip_starts
    if starts is None:
        return None
    planned = planned_version(request)
    if planned is None:
        return None
    version = planned.version
    if announce is not None:
        announce(request.run_id)
    events = bound_start(starts, planned, request)
    claimed, recorded, new = starts.start_submission(
        request.run_id, request.input_hash, events, signal=announce is None, fresh=request.fresh
    )
    if claimed != request.input_hash:
        raise RunMismatchError(f"run {request.run_id} was submitted with a different input")
    if new:
        return Started(request.run_id, version, recorded)
    # Submitted before (with this input): the log says which workflow version it runs.
    check_same(request.run_id, world.list_events(request.run_id), request.run_input, version.id)
    return Started(request.run_id, version)


def start_and_send(
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
    starts = extras_of(world).one_trip_starts
    if starts is None:
        return False
    planned = planned_version(request)
    if planned is None:
        return False
    run_id = request.run_id
    events = bound_start(starts, planned, request)
    first = first_decision(world, run_id, planned.version, events, settings, window)
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
        archived = look.result() if look is not None else starts.has_archive(run_id)
        if archived:
            return False
        fresh = True
    answer = starts.start_and_send(
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


def first_decision(
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
    if tracker.last_sequence != len(start):
        return None
    decision = decision_of(tracker, tracker.state())
    if decision is None or decision.done or not decision.in_flight_only or not decision.events:
        return None
    if not decision.dispatch or any(d.run_id != run_id for d in decision.dispatch):
        return None
    return tracker, decision


def bound_start(
    world: KeepsVersionParts, planned: Planned, request: SubmitRequest
) -> list[PreparedEvent]:
    """The start of a run on a world that keeps version parts: what runs of the workflow
    share is stored once (then remembered: no request), before the events that name it;
    what binds this input rides with the run's start. Printed here (the same bytes as
    :func:`start_events` prepared, cheaper)."""
    version = planned.version
    shared, binding = split_version(version, planned.shared_part)
    world.put_version_part(shared)
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
        *(
            [
                PreparedEvent(
                    LIMITS_EVENT_TYPE,
                    occurrences.LIMITS,
                    canonical_json(request.limits.event().payload),
                )
            ]
            if request.limits
            else []
        ),
        *(
            []
            if request.callback_url is None
            else [
                PreparedEvent(
                    CALLBACK_EVENT_TYPE,
                    occurrences.CALLBACK,
                    canonical_json({"url": request.callback_url}),
                )
            ]
        ),
        PreparedEvent("RunStarted", occurrences.RUN_START, started),
    ]


def start_chunks(
    world: World,
    starts: StartsInOneTrip,
    planned: Sequence[tuple[SubmitRequest, Planned]],
    *,
    fresh: bool,
) -> None:
    """Start the runs of ``planned`` (every input checked already), a chunk of
    ``_SEND_EVERY`` to a round trip: each chunk's pipeline is sent by another thread while
    this one prints the next (Redis runs one chunk's scripts while Python prints the next
    chunk's events). A run submitted before with this input is checked against its log;
    :class:`RunMismatchError` once all are recorded, naming those submitted with another."""
    sent: list[Future[list[str | None]]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="little-submit") as sender:
        chunk: list[tuple[str, str, list[PreparedEvent]]] = []
        for request, plan in planned:
            chunk.append((request.run_id, request.input_hash, bound_start(starts, plan, request)))
            if len(chunk) == _SEND_EVERY:
                sent.append(
                    sender.submit(starts.start_submissions, chunk, signal=True, fresh=fresh)
                )
                chunk = []
        if chunk:
            sent.append(sender.submit(starts.start_submissions, chunk, signal=True, fresh=fresh))
        answers = [answer for future in sent for answer in future.result()]
    refused: list[str] = []
    for (request, plan), answer in zip(planned, answers, strict=True):
        if answer is None:
            continue
        if answer != request.input_hash:
            refused.append(request.run_id)
            continue
        # Submitted before (with this input): the log says which version it runs.
        check_same(
            request.run_id, world.list_events(request.run_id), request.run_input, plan.version.id
        )
    if refused:
        raise RunMismatchError(
            f"run {', '.join(refused)} {'was' if len(refused) == 1 else 'were'} submitted "
            "with a different input"
        )
