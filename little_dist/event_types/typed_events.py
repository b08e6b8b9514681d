"""Typed events: one class per event type, one discriminated union read through
:data:`EVENT_ADAPTER`, and the functions that read, check and write events with it."""

from __future__ import annotations

from typing import Annotated, Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from little_dist.event_types.base import EventValidationError, Payload, UnknownEventTypeError
from little_dist.event_types.catalogue import PAYLOAD_MODELS
from little_dist.events import Event, EventInput, is_engine_event_type, normalize_event_type

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_CLASSES",
    "EngineEvent",
    "TypedEvent",
    "TypedEventBase",
    "event_input",
    "parse_event",
    "typed",
    "validate_payload",
]

ENGINE_TAG = "little.*"


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
