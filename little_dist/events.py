"""The event envelope: every fact about a run is one of these, in a per-run log.

``sequence`` is 1-based and contiguous within a run. ``eventId`` is derived from the
envelope's content (see :func:`little_dist.ids.event_id_for`), so it is the same wherever the
event is recorded. ``recordedAt`` is an ISO-8601 UTC timestamp with milliseconds, as
JavaScript's ``Date#toISOString`` prints it.

The catalogue of event types lives here as names (:data:`EVENT_TYPES`): the workflow's
(:data:`WORLD_EVENT_TYPES`), the rest of upstream's harness events
(:data:`HARNESS_TRACE_EVENT_TYPES`: runtime commands, files, artifacts, mounts, persistent
dirs) and side-channel observations (:data:`SIDE_CHANNEL_EVENT_TYPES`). Their typed payloads
and the discriminated union that reads and writes whole events are in
:mod:`little_dist.event_types`. Types under :data:`ENGINE_EVENT_PREFIX` (``little.``) are
the engine's own (leases, dispatch); upstream never writes them and the fold ignores them.
Upstream's older ``Harness*`` type names are read as their dotted names
(:func:`normalize_event_type`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AFTER_END_EVENT_TYPES",
    "ENGINE_EVENT_PREFIX",
    "EVENT_TYPES",
    "HARNESS_EVENT_TYPES",
    "HARNESS_TRACE_EVENT_TYPES",
    "LEGACY_HARNESS_EVENT_TYPES",
    "PERMISSION_EVENT_TYPES",
    "QUIET_EVENT_TYPES",
    "RUN_END_EVENT_TYPES",
    "SCHEDULE_EVENT_TYPES",
    "SIDE_CHANNEL_EVENT_TYPES",
    "UPSTREAM_ONLY_EVENT_TYPES",
    "USAGE_EVENT_TYPES",
    "WORLD_EVENT_TYPES",
    "Event",
    "EventInput",
    "is_engine_event_type",
    "normalize_event_type",
    "recorded_event",
    "wakes_scheduler",
]

#: Every event type upstream's ``world.ts`` declares, in its order.
WORLD_EVENT_TYPES: tuple[str, ...] = (
    "OrchestrationRequested",
    "PlannerStarted",
    "PlannerDraftedWorkflow",
    "WorkflowValidationFailed",
    "WorkflowValidationSucceeded",
    "PlannerReuseDecisionRecorded",
    "WorkflowVersionRegistered",
    "RunStarted",
    "StepScheduled",
    "StepAttemptStarted",
    "ModelCallStarted",
    "ModelCallCompleted",
    "ToolCallStarted",
    "ToolCallCompleted",
    "ArtifactCreated",
    "StepOutputValidated",
    "StepCompleted",
    "StepFailed",
    "StepRepairAttempted",
    "ParallelGroupStarted",
    "ParallelBranchScheduled",
    "ParallelBranchCompleted",
    "ParallelBranchFailed",
    "ParallelGroupCompleted",
    "ParallelGroupFailed",
    "RunCompleted",
    "RunFailed",
    "OuterLoopCycleCompleted",
    "harness.session.started",
    "harness.session.completed",
    "harness.session.failed",
    "harness.model.called",
    "harness.model.responded",
    "harness.model.failed",
    "harness.tool_call.started",
    "harness.tool_call.succeeded",
    "harness.tool_call.failed",
    "harness.execute_step.started",
    "harness.execute_step.succeeded",
)

#: Upstream's other harness events (little-harness ``events/names.ts``), in its order: the
#: harness records them beside the session, model and tool events, so a run log may hold them.
HARNESS_TRACE_EVENT_TYPES: tuple[str, ...] = (
    "harness.runtime.command.started",
    "harness.runtime.command.succeeded",
    "harness.runtime.command.failed",
    "harness.runtime.command.denied",
    "harness.runtime.tier.escalated",
    "harness.runtime.tier.unavailable",
    "harness.runtime.error",
    "harness.runtime.dispose.failed",
    "harness.file.created",
    "harness.file.updated",
    "harness.file.deleted",
    "harness.file.staged_from_message",
    "harness.file.staged_from_host",
    "harness.file.written_by_tool",
    "harness.artifact.created",
    "harness.filesystem.mounted",
    "harness.persistent_dir.loaded",
    "harness.persistent_dir.commit.started",
    "harness.persistent_dir.commit.succeeded",
    "harness.persistent_dir.commit.failed",
)

#: Facts an observer writes onto a run after the fact (upstream's
#: ``HARNESS_SIDE_CHANNEL_EVENT_TYPES``); never an input to the run they describe.
SIDE_CHANNEL_EVENT_TYPES: tuple[str, ...] = ("outcome.reported",)

#: What a run's log still takes after its end (see :mod:`little_dist.world.base`): the
#: side-channel observations, and an outer loop's ``OuterLoopCycleCompleted``, which
#: upstream appends to a cycle's run once the run has ended and the supervisor decided
#: (see :mod:`little_dist.outer_loop`), with the hold of the supervisor's call before it
#: (``little.budget.supervisor_reserved``, :mod:`little_dist.event_types.engine`'s
#: ``SUPERVISOR_HOLD_EVENT_TYPE``). None is an input to the run it is written on.
AFTER_END_EVENT_TYPES: tuple[str, ...] = (
    *SIDE_CHANNEL_EVENT_TYPES,
    "little.budget.supervisor_reserved",
    "OuterLoopCycleCompleted",
    # A run's callback: its delivery attempts and outcome (little_dist.fleet.callbacks).
    "little.callback.attempted",
    "little.callback.delivered",
    "little.callback.abandoned",
)

#: Harness events of little-dist's own under upstream's ``harness.`` prefix (upstream has no
#: name for them): a tool-permission decision (see :mod:`little_dist.permissions`). Typed
#: like the others, and the fold counts them without reading them.
PERMISSION_EVENT_TYPES: tuple[str, ...] = ("harness.permission.decided",)

#: Catalogued types little-dist never writes, each with why: upstream writes them for behaviour
#: that has no equivalent here. They stay in the catalogue (with their payload models) so a log
#: upstream wrote still reads; every other catalogued type is written somewhere
#: (``tests/test_event_catalogue.py`` checks both ways).
UPSTREAM_ONLY_EVENT_TYPES: dict[str, str] = {
    **dict.fromkeys(
        ("ModelCallStarted", "ModelCallCompleted", "ToolCallStarted", "ToolCallCompleted"),
        "declared by upstream's world.ts, but model and tool calls are recorded as "
        "harness.model.* and harness.tool_call.*, by upstream's harness and by ours; "
        "ModelCallCompleted is still read and priced",
    ),
    **dict.fromkeys(
        (
            "harness.runtime.command.denied",
            "harness.runtime.tier.escalated",
            "harness.runtime.tier.unavailable",
        ),
        "upstream's tiered runtime classifies each command (run, escalate from its in-memory "
        "Tier-0 to a next tier, or deny); here every command runs in the one kernel sandbox "
        "and none is classified, so none is denied or escalated",
    ),
    "harness.runtime.dispose.failed": "upstream reports a failed teardown of a turn's runtime; "
    "closing the bash sandbox session here records no event",
    **dict.fromkeys(
        ("harness.file.staged_from_message", "harness.file.staged_from_host"),
        "upstream stages a message's attachments or host files into the session's filesystem; "
        "here nothing is staged: a step sees its scratch, memory and skill mounts",
    ),
    "harness.file.written_by_tool": "upstream's file tools write the session's files; here "
    "tools do not, and what bash commands change is in each command's scratch manifest",
    "harness.artifact.created": "upstream's /artifacts root turns a file written there into an "
    "artifact; here a step's files are its scratch folder, published with the attempt's "
    "commit, each with the artifactRef its bytes were stored under (ArtifactCreated records "
    "large outputs)",
    "harness.filesystem.mounted": "upstream lists its four managed roots (/session, "
    "/artifacts, /.agents, /persistent) at each turn; the sandbox's mounts here "
    "(/mnt/scratch, /mnt/memory, /mnt/skills) are none of them, and the payload names only those",
    **dict.fromkeys(
        (
            "harness.persistent_dir.loaded",
            "harness.persistent_dir.commit.started",
            "harness.persistent_dir.commit.succeeded",
            "harness.persistent_dir.commit.failed",
        ),
        "upstream's persistent dirs (/persistent, loaded before a turn, committed after it); "
        "the store here is workflow memory (/mnt/memory), whose commits are recorded as "
        'harness.file.* with root "memory" and little.memory.conflict',
    ),
}

#: Every event type a run log may hold (upstream's, then little-dist's own harness events).
EVENT_TYPES: tuple[str, ...] = (
    WORLD_EVENT_TYPES
    + HARNESS_TRACE_EVENT_TYPES
    + SIDE_CHANNEL_EVENT_TYPES
    + PERMISSION_EVENT_TYPES
)

HARNESS_EVENT_TYPES: frozenset[str] = frozenset(t for t in EVENT_TYPES if t.startswith("harness."))

#: Older upstream logs name harness events in PascalCase; upstream reads them as these
#: (``harness/event-names.ts``), and so do we.
LEGACY_HARNESS_EVENT_TYPES: dict[str, str] = {
    "HarnessSessionStarted": "harness.session.started",
    "HarnessSessionCompleted": "harness.session.completed",
    "HarnessSessionFailed": "harness.session.failed",
    "HarnessModelCalled": "harness.model.called",
    "HarnessModelResponded": "harness.model.responded",
    "HarnessModelFailed": "harness.model.failed",
    "HarnessToolCallStarted": "harness.tool_call.started",
    "HarnessToolCallSucceeded": "harness.tool_call.succeeded",
    "HarnessToolCallFailed": "harness.tool_call.failed",
    "HarnessExecuteStepStarted": "harness.execute_step.started",
    "HarnessExecuteStepSucceeded": "harness.execute_step.succeeded",
}

#: Prefix of engine-only event types (``little.lease.acquired``, ``little.dispatch.sent``).
ENGINE_EVENT_PREFIX = "little."


#: The events that end a run.
RUN_END_EVENT_TYPES: frozenset[str] = frozenset({"RunCompleted", "RunFailed"})

#: The events that carry a model call's usage (tokens; the fold prices them). An append
#: refused because the run had ended keeps these in the run's late record
#: (:meth:`~little_dist.world.base.World.late_events`), so the spend is still counted.
USAGE_EVENT_TYPES: frozenset[str] = frozenset(
    {
        "ModelCallCompleted",
        "harness.model.responded",
        "HarnessModelResponded",
        # (an interrupted call records what it is taken to have spent under its error)
        "harness.model.failed",
    }
)

#: What a decision records when it schedules work (and nothing else): the steps and branches
#: it names are in flight afterwards, and settle nothing by being recorded.
SCHEDULE_EVENT_TYPES: frozenset[str] = frozenset(
    {"StepScheduled", "ParallelBranchScheduled", "ParallelGroupStarted"}
)

#: Event types whose append cannot require the scheduler to act, so an append made of nothing
#: else does not signal it (see :func:`wakes_scheduler`):
#:
#: * what an attempt records while it runs, before its commit (the set of steps ``decide``
#:   would schedule is the same before and after them);
#: * schedule records (``StepScheduled``, ``ParallelBranchScheduled``, ``ParallelGroupStarted``):
#:   whoever appends a decision sends its tasks right after; if it dies first, the
#:   scheduler's sweep re-dispatches attempts scheduled and never started. Without this the
#:   scheduler would race the worker fast path for every dispatch it is about to make.
QUIET_EVENT_TYPES: frozenset[str] = frozenset(
    {"StepAttemptStarted", "ModelCallStarted", "ModelCallCompleted", "ArtifactCreated"}
    | SCHEDULE_EVENT_TYPES
    | HARNESS_EVENT_TYPES
    | set(LEGACY_HARNESS_EVENT_TYPES)
    | {"little.harness.model.memoized", "little.harness.tool_call.memoized"}
)


def wakes_scheduler(event_types: Iterable[str]) -> bool:
    """Whether an append of events of these types needs the scheduler to look at the run.

    Only appends made entirely of :data:`QUIET_EVENT_TYPES` do not: an attempt's commit
    (``StepCompleted``/``StepFailed``), a run's start and end, a cancel request, a submission
    and any unknown type wake it.
    """
    return any(event_type not in QUIET_EVENT_TYPES for event_type in event_types)


def normalize_event_type(event_type: str) -> str:
    """The current name of ``event_type``: legacy ``Harness*`` names map to dotted ones."""
    return LEGACY_HARNESS_EVENT_TYPES.get(event_type, event_type)


def is_engine_event_type(event_type: str) -> bool:
    """Whether ``event_type`` is one of the engine's own (``little.`` + a non-empty name)."""
    return event_type.startswith(ENGINE_EVENT_PREFIX) and len(event_type) > len(ENGINE_EVENT_PREFIX)


class EventInput(BaseModel):
    """What a writer asks the world to append; the world assigns sequence, id and time."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    type: str = Field(min_length=1)
    payload: dict[str, Any] = Field(default_factory=dict)
    occurrence_id: str | None = Field(default=None, alias="occurrenceId", min_length=1)


class Event(BaseModel):
    """One recorded event. Serialize with ``model_dump(by_alias=True, exclude_none=True)``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    event_id: str = Field(alias="eventId")
    run_id: str = Field(alias="runId")
    sequence: int = Field(ge=1)
    type: str
    occurrence_id: str | None = Field(default=None, alias="occurrenceId")
    recorded_at: str = Field(alias="recordedAt")
    payload: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The upstream JSON shape (``occurrenceId`` only when present)."""
        return self.model_dump(by_alias=True, exclude_none=True)


_EVENT_FIELDS: frozenset[str] = frozenset(Event.model_fields)


def _trusted(values: dict[str, Any]) -> Event:
    event = object.__new__(Event)
    object.__setattr__(event, "__dict__", values)
    # (a set of its own, as validation gives: model_copy(update=...) adds to it)
    object.__setattr__(event, "__pydantic_fields_set__", set(_EVENT_FIELDS))
    object.__setattr__(event, "__pydantic_extra__", None)
    object.__setattr__(event, "__pydantic_private__", None)
    return event


def _trusted_works() -> bool:
    """Whether :func:`_trusted` builds what validation builds, on this pydantic (checked
    once at import; if not, :func:`recorded_event` validates)."""
    values: dict[str, Any] = {
        "event_id": "evt_0000000000000000",
        "run_id": "run_check",
        "sequence": 1,
        "type": "RunStarted",
        "occurrence_id": None,
        "recorded_at": "2026-01-01T00:00:00.000Z",
        "payload": {"a": [1]},
    }
    try:
        trusted, checked = _trusted(dict(values)), Event(**values)
        return (
            trusted == checked
            and trusted.to_json() == checked.to_json()
            and trusted.model_dump() == checked.model_dump()
        )
    except Exception:  # pragma: no cover - a pydantic whose internals changed
        return False


_TRUSTED = _trusted_works()


def recorded_event(
    event_id: str,
    run_id: str,
    sequence: int,
    event_type: str,
    occurrence_id: str | None,
    recorded_at: str,
    payload: dict[str, Any],
) -> Event:
    """An :class:`Event` from fields a world already holds in their checked form: read back
    from its own storage, or just appended by it (a payload parsed from canonical JSON, a
    positive sequence, the id it computed). Skips pydantic's validation, which costs more
    than the rest of decoding a stored event; anything else must construct ``Event``."""
    values = {
        "event_id": event_id,
        "run_id": run_id,
        "sequence": sequence,
        "type": event_type,
        "occurrence_id": occurrence_id,
        "recorded_at": recorded_at,
        "payload": payload,
    }
    return _trusted(values) if _TRUSTED else Event(**values)
