"""Building blocks of the typed events: the errors, the :class:`Payload` base, and the
records several payloads share (usage, model identity, error envelope)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from little_dist.errors import InvalidInputError

__all__ = [
    "ErrorEnvelope",
    "EventValidationError",
    "ModelIdentity",
    "NonEmptyStr",
    "NonNegativeInt",
    "Number",
    "Payload",
    "PositiveInt",
    "UnknownEventTypeError",
    "Usage",
]

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
