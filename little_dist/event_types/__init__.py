"""Typed events: one pydantic payload model per event type, one discriminated union.

Every recorded event is an :class:`~little_dist.events.Event` with a free-form ``payload``
dict; that is what worlds store, what the engine's writers build and what the run-state fold
reads (fast, no validation: a step's commit does not pay for pydantic). This module gives
the same events types, for the edges that want them checked: users who read a log get
attribute access and validation, and the tests check that everything the engine's writers
record is what upstream's validators accept (``tests/test_local_runner.py`` runs a workflow
with every kind of step and parses its whole log; ``tests/test_events.py`` the vectors). It
all goes through one :class:`~pydantic.TypeAdapter`, :data:`EVENT_ADAPTER`:

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

Beyond the workflow's events (``world.ts``), upstream's harness records runtime commands,
file changes, artifacts, mounts and persistent dirs, and observers add ``outcome.reported``;
their payloads follow upstream's trace validator (``trace/validate.ts``).

Types under the engine prefix ``little.`` are read as :class:`EngineEvent` with an untyped
payload. Legacy ``Harness*`` names (``HarnessModelResponded``) are read as their dotted
names. Any other type is refused with :class:`UnknownEventTypeError`.

The modules: :mod:`~little_dist.event_types.base` (errors, :class:`Payload`, shared
records), :mod:`~little_dist.event_types.workflow_payloads`,
:mod:`~little_dist.event_types.harness_payloads`,
:mod:`~little_dist.event_types.harness_trace_payloads`,
:mod:`~little_dist.event_types.catalogue` (type -> payload model) and
:mod:`~little_dist.event_types.typed_events` (the union and the functions); and
:mod:`~little_dist.event_types.engine`, the names of the engine's own ``little.*`` types.
Names are loaded on first use, so importing :mod:`~little_dist.event_types.engine` (what the
engine's writers need) does not load pydantic's models of the catalogue.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from little_dist.event_types.base import (
        ErrorEnvelope,
        EventValidationError,
        ModelIdentity,
        Payload,
        UnknownEventTypeError,
        Usage,
    )
    from little_dist.event_types.catalogue import (
        PAYLOAD_MODELS,
    )
    from little_dist.event_types.typed_events import (
        EVENT_ADAPTER,
        EVENT_CLASSES,
        EngineEvent,
        TypedEvent,
        TypedEventBase,
        event_input,
        parse_event,
        typed,
        validate_payload,
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

_WHERE = {
    "ErrorEnvelope": "little_dist.event_types.base",
    "EventValidationError": "little_dist.event_types.base",
    "ModelIdentity": "little_dist.event_types.base",
    "Payload": "little_dist.event_types.base",
    "UnknownEventTypeError": "little_dist.event_types.base",
    "Usage": "little_dist.event_types.base",
    "PAYLOAD_MODELS": "little_dist.event_types.catalogue",
    "EVENT_ADAPTER": "little_dist.event_types.typed_events",
    "EVENT_CLASSES": "little_dist.event_types.typed_events",
    "EngineEvent": "little_dist.event_types.typed_events",
    "TypedEvent": "little_dist.event_types.typed_events",
    "TypedEventBase": "little_dist.event_types.typed_events",
    "event_input": "little_dist.event_types.typed_events",
    "parse_event": "little_dist.event_types.typed_events",
    "typed": "little_dist.event_types.typed_events",
    "validate_payload": "little_dist.event_types.typed_events",
}


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'little_dist.event_types' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
