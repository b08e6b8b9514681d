"""Typed events: one pydantic payload model per event type, one discriminated union.

Every recorded event is an :class:`~little_dist.events.Event` with a free-form ``payload``
dict; that is what worlds store and what the run-state fold reads (fast, no validation).
This module gives the same events types, for the edges that want them checked: writers
validate what they are about to append, the CLI validates a log it was handed, users get
attribute access. It all goes through one :class:`~pydantic.TypeAdapter`, :data:`EVENT_ADAPTER`:

* :func:`parse_event` reads a JSON-shaped dict (``{"eventId": ..., "type": ..., ...}``);
* :func:`typed` upgrades a stored :class:`~little_dist.events.Event`;
* :meth:`TypedEventBase.to_json` writes the upstream shape back, and
  :func:`event_input` builds a validated :class:`~little_dist.events.EventInput`.

Payload models type the fields upstream writes and reads (``world.ts``, ``run-state.ts``,
``runtime.ts``, ``harness/event-recorder.ts``) under their camelCase names, and keep any
other field as given: upstream payloads grow. Validation is strict (no ``"1"`` -> ``1``), so a
validated payload writes back exactly as it was read. Fields that are absent stay absent on
output, and a field given as ``null`` stays ``null``: upstream distinguishes them
(``"output" in payload``).

Types under the engine prefix ``little.`` are read as :class:`EngineEvent` with an untyped
payload. Legacy ``Harness*`` names (``HarnessModelResponded``) are read as their dotted
names. Any other type is refused with :class:`UnknownEventTypeError`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from little_dist.errors import InvalidInputError
from little_dist.events import (
    EVENT_TYPES,
    Event,
    EventInput,
    is_engine_event_type,
    normalize_event_type,
)

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_CLASSES",
    "PAYLOAD_MODELS",
    "EngineEvent",
    "ErrorEnvelope",
    "EventValidationError",
    "ModelIdentity",
    "Payload",
    "TypedEvent",
    "TypedEventBase",
    "UnknownEventTypeError",
    "Usage",
    "event_input",
    "parse_event",
    "typed",
    "validate_payload",
]

ENGINE_TAG = "little.*"

NonEmptyStr = Annotated[str, Field(min_length=1)]
Number = Annotated[int | float, Field(ge=0)]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class UnknownEventTypeError(InvalidInputError):
    """An event type that is neither upstream's, a legacy alias, nor under ``little.``."""

    def __init__(self, event_type: object) -> None:
        super().__init__(
            f"Unknown event type {event_type!r}: expected one of upstream's event types "
            "(RunStarted, StepCompleted, harness.model.responded, ...) or an engine type "
            "under the 'little.' prefix"
        )
        self.event_type = event_type


class EventValidationError(InvalidInputError):
    """An event whose envelope or payload does not match its type's model."""

    def __init__(self, message: str, errors: list[Any]) -> None:
        super().__init__(message)
        self.errors = errors


# -- payload building blocks ---------------------------------------------------------------


class Payload(BaseModel):
    """Base of every payload model: camelCase names, strict types, extra fields kept."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(validation_alias=to_camel, serialization_alias=to_camel),
        populate_by_name=True,
        extra="allow",
        strict=True,
        frozen=True,
    )

    def to_json(self) -> dict[str, Any]:
        """The payload as upstream writes it: camelCase, absent fields omitted."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="python")


class Usage(Payload):
    """Token usage as the harness records it (never a dollar figure: cost is priced later)."""

    input_tokens: Number
    output_tokens: Number
    cached_input_tokens: Number | None = None
    reasoning_tokens: Number | None = None
    input_token_details: dict[str, Any] | None = None
    output_token_details: dict[str, Any] | None = None


class ModelIdentity(Payload):
    """Which model answered; with the registry it prices a call."""

    provider: NonEmptyStr | None = None
    model_id: NonEmptyStr | None = None


class ErrorEnvelope(Payload):
    """A serialized error: ``name`` and ``message``, plus ``stack``, ``cause`` and own fields."""

    name: NonEmptyStr
    message: NonEmptyStr
    stack: str | None = None
    cause: Any = None


# -- planner and validation ------------------------------------------------------------------


class OrchestrationRequestedPayload(Payload):
    request_id: str | None = None
    request_hash: str | None = None
    input_hash: str | None = None
    workflow_definition_hash: str | None = None
    input_schema_hash: str | None = None
    requested_output_hash: str | None = None
    capability_manifest_hash: str | None = None
    workflow_id: str | None = None
    description: str | None = None
    max_workflow_revisions: int | None = None


class PlannerStartedPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    repair: bool | None = None


class PlannerDraftedWorkflowPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    valid: bool | None = None
    lwir_hash: str | None = None
    lwir: dict[str, Any] | None = None


class WorkflowValidationFailedPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    valid: bool | None = None
    lwir_hash: str | None = None
    lwir: dict[str, Any] | None = None
    findings: list[dict[str, Any]] | None = None


class WorkflowValidationSucceededPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    lwir_hash: str | None = None
    workflow_version_id: str | None = None
    lwir_version_id: str | None = None
    validation_hash: str | None = None


class PlannerReuseDecisionRecordedPayload(Payload):
    decision_kind: str | None = None
    candidate_workflow_version_id: str | None = None
    rationale: str | None = None
    acknowledged_warnings: list[Any] | None = None
    input_hash: str | None = None
    input_structure: Any = None
    candidate_brief_hash: str | None = None
    resulting_workflow_version_id: str | None = None


class WorkflowVersionRegisteredPayload(Payload):
    workflow_version_id: str | None = None
    workflow_version_hash: str | None = None


# -- run ---------------------------------------------------------------------------------------


class RunStartedPayload(Payload):
    workflow_version_id: str | None = None
    input: Any = None


class RunCompletedPayload(Payload):
    workflow_version_id: str | None = None
    output: Any = None
    output_ref: str | None = None


class RunFailedPayload(Payload):
    error: Any = None


class OuterLoopCycleCompletedPayload(Payload):
    outer_loop_id: str | None = None
    cycle_number: PositiveInt | None = None
    supervise: dict[str, Any] | None = None


# -- steps -------------------------------------------------------------------------------------


class _StepPayload(Payload):
    step_path: NonEmptyStr


class StepScheduledPayload(_StepPayload):
    step_id: str | None = None
    uses: str | None = None


class StepAttemptStartedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None


class StepOutputValidatedPayload(_StepPayload):
    output_ref: str | None = None
    output_mode: str | None = None
    schema_hash: str | None = None


class StepCompletedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    output: Any = None
    output_ref: str | None = None
    artifact_refs: list[str] | None = None
    metadata: dict[str, Any] | None = None


class StepFailedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    error: Any = None
    artifact_refs: list[str] | None = None


class StepRepairAttemptedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    error: Any = None


class ModelCallStartedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    model: Any = None


class ModelCallCompletedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    model: Any = None
    usage: Usage | dict[str, Any] | None = None


class ToolCallStartedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    tool_name: str | None = None
    args: Any = None


class ToolCallCompletedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    tool_name: str | None = None
    result: Any = None


class ArtifactCreatedPayload(Payload):
    artifact_ref: NonEmptyStr
    step_path: str | None = None
    name: str | None = None
    content_type: str | None = None


# -- parallel ----------------------------------------------------------------------------------


class ParallelGroupStartedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    branch_count: NonNegativeInt | None = None
    max_concurrency: PositiveInt | None = None
    failure_mode: Literal["fail_fast", "all_settled"] | None = None


class ParallelBranchScheduledPayload(_StepPayload):
    branch_path: str | None = None
    item_key: str | None = None
    branch_index: NonNegativeInt | None = None


class ParallelBranchCompletedPayload(ParallelBranchScheduledPayload):
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    output_ref: str | None = None
    artifact_refs: list[str] | None = None


class ParallelBranchFailedPayload(ParallelBranchScheduledPayload):
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    error: Any = None
    retriable: bool | None = None
    artifact_refs: list[str] | None = None


class ParallelGroupCompletedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    branch_count: NonNegativeInt | None = None


class ParallelGroupFailedPayload(ParallelGroupCompletedPayload):
    error: Any = None


# -- harness (validated as harness/event-recorder.ts validates them) ---------------------------

HarnessRole = Literal[
    "planner", "orchestrator", "worker.ai-generate", "worker.code-run", "worker.tool-call", "fixer"
]
HarnessStepUses = Literal["ai.generate", "code.run", "tool.call", "decision", "parallel"]


class HarnessTask(Payload):
    kind: Literal["plan", "orchestrate", "execute_step", "fix_step"]


class HarnessSessionStartedPayload(Payload):
    run_id: NonEmptyStr
    role: HarnessRole
    task: HarnessTask
    manifest: dict[str, Any]
    manifest_hash: NonEmptyStr
    parent_run_id: NonEmptyStr | None = None


class HarnessSessionCompletedPayload(Payload):
    run_id: NonEmptyStr
    usage: Usage


class HarnessSessionFailedPayload(Payload):
    run_id: NonEmptyStr
    error: ErrorEnvelope


class HarnessRequestMessage(Payload):
    role: NonEmptyStr
    content: Any


class HarnessRequestTool(Payload):
    tool_name: Annotated[str, Field(pattern=r"\S")]


class HarnessModelRequest(Payload):
    model: NonEmptyStr
    messages: list[HarnessRequestMessage]
    tools: list[HarnessRequestTool]


class HarnessModelCalledPayload(Payload):
    turn: PositiveInt
    prompt_hash: NonEmptyStr
    request: HarnessModelRequest
    call_id: NonEmptyStr | None = None
    step_path: str | None = None


class HarnessResponseToolCall(Payload):
    tool_name: Annotated[str, Field(pattern=r"\S")]
    args: Any


class HarnessModelResponse(Payload):
    usage: Usage
    text: str | None = None
    tool_calls: list[HarnessResponseToolCall] | None = None


class HarnessModelRespondedPayload(Payload):
    turn: PositiveInt
    response: HarnessModelResponse
    model: ModelIdentity | None = None
    call_id: NonEmptyStr | None = None
    step_path: str | None = None


class HarnessModelFailedPayload(Payload):
    turn: PositiveInt
    error: ErrorEnvelope
    duration_ms: Number
    attempt: PositiveInt | None = None
    will_retry: bool | None = None
    call_id: NonEmptyStr | None = None
    step_path: str | None = None


class _HarnessToolCallFields(Payload):
    call_id: NonEmptyStr
    caller: Literal["model", "code"] | None = None
    tool_name: Annotated[str, Field(pattern=r"\S")] | None = None
    turn: PositiveInt | None = None
    call_index: PositiveInt | None = None
    scope: dict[str, Any] | None = None
    duration_ms: Number | None = None
    step_path: str | None = None

    @model_validator(mode="after")
    def _turn_matches_caller(self) -> _HarnessToolCallFields:
        # Model-initiated calls are keyed by their turn; code-initiated calls have none.
        if self.caller == "model" and self.turn is None:
            raise ValueError("turn is required when caller is 'model'")
        if self.caller == "code" and "turn" in self.model_fields_set:
            raise ValueError("turn must be absent when caller is 'code'")
        return self


class HarnessToolCallStartedPayload(_HarnessToolCallFields):
    caller: Literal["model", "code"]
    tool_name: Annotated[str, Field(pattern=r"\S")]
    args: Any


class HarnessToolCallSucceededPayload(_HarnessToolCallFields):
    result: Any


class HarnessToolCallFailedPayload(_HarnessToolCallFields):
    error: ErrorEnvelope


class HarnessExecuteStepStartedPayload(Payload):
    step_path: NonEmptyStr
    step_id: NonEmptyStr | None = None
    uses: HarnessStepUses | None = None
    visit_index: NonNegativeInt | None = None
    run_id: NonEmptyStr | None = None
    step_kind: Literal["code.run", "tool.call", "decision"] | None = None
    input_hash: NonEmptyStr | None = None


class HarnessExecuteStepSucceededPayload(Payload):
    step_path: NonEmptyStr
    step_id: NonEmptyStr | None = None
    uses: HarnessStepUses | None = None
    visit_index: NonNegativeInt | None = None
    run_id: NonEmptyStr | None = None
    output: Any = None
    output_hash: NonEmptyStr | None = None
    duration_ms: Number | None = None


#: The payload model of every upstream event type.
PAYLOAD_MODELS: dict[str, type[Payload]] = {
    "OrchestrationRequested": OrchestrationRequestedPayload,
    "PlannerStarted": PlannerStartedPayload,
    "PlannerDraftedWorkflow": PlannerDraftedWorkflowPayload,
    "WorkflowValidationFailed": WorkflowValidationFailedPayload,
    "WorkflowValidationSucceeded": WorkflowValidationSucceededPayload,
    "PlannerReuseDecisionRecorded": PlannerReuseDecisionRecordedPayload,
    "WorkflowVersionRegistered": WorkflowVersionRegisteredPayload,
    "RunStarted": RunStartedPayload,
    "StepScheduled": StepScheduledPayload,
    "StepAttemptStarted": StepAttemptStartedPayload,
    "ModelCallStarted": ModelCallStartedPayload,
    "ModelCallCompleted": ModelCallCompletedPayload,
    "ToolCallStarted": ToolCallStartedPayload,
    "ToolCallCompleted": ToolCallCompletedPayload,
    "ArtifactCreated": ArtifactCreatedPayload,
    "StepOutputValidated": StepOutputValidatedPayload,
    "StepCompleted": StepCompletedPayload,
    "StepFailed": StepFailedPayload,
    "StepRepairAttempted": StepRepairAttemptedPayload,
    "ParallelGroupStarted": ParallelGroupStartedPayload,
    "ParallelBranchScheduled": ParallelBranchScheduledPayload,
    "ParallelBranchCompleted": ParallelBranchCompletedPayload,
    "ParallelBranchFailed": ParallelBranchFailedPayload,
    "ParallelGroupCompleted": ParallelGroupCompletedPayload,
    "ParallelGroupFailed": ParallelGroupFailedPayload,
    "RunCompleted": RunCompletedPayload,
    "RunFailed": RunFailedPayload,
    "OuterLoopCycleCompleted": OuterLoopCycleCompletedPayload,
    "harness.session.started": HarnessSessionStartedPayload,
    "harness.session.completed": HarnessSessionCompletedPayload,
    "harness.session.failed": HarnessSessionFailedPayload,
    "harness.model.called": HarnessModelCalledPayload,
    "harness.model.responded": HarnessModelRespondedPayload,
    "harness.model.failed": HarnessModelFailedPayload,
    "harness.tool_call.started": HarnessToolCallStartedPayload,
    "harness.tool_call.succeeded": HarnessToolCallSucceededPayload,
    "harness.tool_call.failed": HarnessToolCallFailedPayload,
    "harness.execute_step.started": HarnessExecuteStepStartedPayload,
    "harness.execute_step.succeeded": HarnessExecuteStepSucceededPayload,
}
assert tuple(PAYLOAD_MODELS) == EVENT_TYPES  # the catalogue and the names agree


# -- typed events ------------------------------------------------------------------------------


class TypedEventBase(BaseModel):
    """The envelope fields every typed event has; subclasses fix ``type`` and ``payload``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid", strict=True)

    event_id: str = Field(alias="eventId", min_length=1)
    run_id: str = Field(alias="runId", min_length=1)
    sequence: int = Field(ge=1)
    type: str
    occurrence_id: str | None = Field(default=None, alias="occurrenceId", min_length=1)
    recorded_at: str = Field(alias="recordedAt", min_length=1)
    payload: Any

    @field_validator("type", mode="before")
    @classmethod
    def _current_name(cls, value: object) -> object:
        return normalize_event_type(value) if isinstance(value, str) else value

    def to_json(self) -> dict[str, Any]:
        """The upstream JSON shape (``occurrenceId`` only when present)."""
        payload = self.payload
        data: dict[str, Any] = {
            "eventId": self.event_id,
            "runId": self.run_id,
            "sequence": self.sequence,
            "type": self.type,
        }
        if self.occurrence_id is not None:
            data["occurrenceId"] = self.occurrence_id
        data["recordedAt"] = self.recorded_at
        data["payload"] = payload.to_json() if isinstance(payload, Payload) else dict(payload)
        return data

    def to_event(self) -> Event:
        """The untyped envelope worlds store."""
        return Event.model_validate(self.to_json())


class EngineEvent(TypedEventBase):
    """An engine-only event (``little.`` prefix): leases, dispatch; the payload is untyped."""

    type: Annotated[str, Field(pattern=r"^little\..+")]
    payload: dict[str, Any]


def _typed_event_class(event_type: str, payload_model: type[Payload]) -> type[TypedEventBase]:
    name = "".join(part[:1].upper() + part[1:] for part in event_type.replace("_", ".").split("."))
    namespace: dict[str, Any] = {
        # Literal of a runtime string: built through Any, the annotation is for pydantic.
        "__annotations__": {"type": cast(Any, Literal)[event_type], "payload": payload_model},
        "__module__": __name__,
        "__qualname__": f"{name}Event",
        "__doc__": f"A ``{event_type}`` event.",
    }
    return type(f"{name}Event", (TypedEventBase,), namespace)


#: The typed event class of every upstream event type (``EVENT_CLASSES["RunStarted"]``).
EVENT_CLASSES: dict[str, type[TypedEventBase]] = {
    event_type: _typed_event_class(event_type, model)
    for event_type, model in PAYLOAD_MODELS.items()
}


def _event_tag(value: Any) -> str | None:
    """The union member for raw input: its (normalized) type, or the engine tag."""
    raw = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if not isinstance(raw, str):
        return None
    event_type = normalize_event_type(raw)
    if event_type in PAYLOAD_MODELS:
        return event_type
    if is_engine_event_type(event_type):
        return ENGINE_TAG
    return None


def _tagged_union() -> Any:
    members = [Annotated[cls, Tag(name)] for name, cls in EVENT_CLASSES.items()]
    members.append(Annotated[EngineEvent, Tag(ENGINE_TAG)])
    union: Any = members[0]
    for member in members[1:]:
        union = union | member
    return Annotated[
        union,
        Discriminator(
            _event_tag,
            custom_error_type="unknown_event_type",
            custom_error_message="Unknown event type (not upstream's and not under 'little.')",
        ),
    ]


#: Any typed event (annotation for users; the classes are in :data:`EVENT_CLASSES`).
TypedEvent = TypedEventBase

#: The one adapter that reads every event type.
EVENT_ADAPTER: TypeAdapter[TypedEventBase] = TypeAdapter(_tagged_union())


def _describe(error: ValidationError, what: str) -> EventValidationError:
    details = "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or '$'}: {item['msg']}"
        for item in error.errors()
    )
    return EventValidationError(f"Invalid {what}: {details}", list(error.errors()))


def parse_event(data: dict[str, Any]) -> TypedEventBase:
    """Read one event in upstream's JSON shape into its typed model.

    Raises :class:`UnknownEventTypeError` for a type that is not in the catalogue (and not
    under ``little.``), :class:`EventValidationError` for a bad envelope or payload.
    """
    if not isinstance(data, dict):
        raise EventValidationError(f"An event must be an object, got {type(data).__name__}", [])
    if _event_tag(data) is None:
        raise UnknownEventTypeError(data.get("type"))
    try:
        return EVENT_ADAPTER.validate_python(data)
    except ValidationError as error:
        raise _describe(error, f"{data.get('type')} event") from error


def typed(event: Event) -> TypedEventBase:
    """The typed model of a stored event."""
    return parse_event(event.to_json())


def validate_payload(event_type: str, payload: dict[str, Any]) -> Payload | dict[str, Any]:
    """Check ``payload`` against ``event_type``'s model; engine payloads pass through."""
    name = normalize_event_type(event_type)
    model = PAYLOAD_MODELS.get(name)
    if model is None:
        if is_engine_event_type(name):
            return dict(payload)
        raise UnknownEventTypeError(event_type)
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise _describe(error, f"{name} payload") from error


def event_input(
    event_type: str,
    payload: Payload | dict[str, Any] | None = None,
    *,
    occurrence_id: str | None = None,
) -> EventInput:
    """A validated :class:`~little_dist.events.EventInput`, ready for ``World.append``.

    ``payload`` may be a payload model or a plain dict (validated against the type's model).
    Legacy type names are written under their current name.
    """
    name = normalize_event_type(event_type)
    if isinstance(payload, Payload):
        expected = PAYLOAD_MODELS.get(name)
        if expected is None or not isinstance(payload, expected):
            raise EventValidationError(
                f"{type(payload).__name__} is not the payload model of {name!r}", []
            )
        data = payload.to_json()
    else:
        checked = validate_payload(name, payload or {})
        data = checked.to_json() if isinstance(checked, Payload) else checked
    return EventInput(type=name, payload=data, occurrence_id=occurrence_id)
