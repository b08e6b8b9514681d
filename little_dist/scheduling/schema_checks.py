"""The compiled checks of JSON Schemas: one bounded cache for the whole process.

Step outputs are checked against their schema where a step ends (``decide``'s fan-in, a
worker's attempt), the harness checks a model's reply against the same schema before it
hands it back, and a run's input is checked against the LWIR's input schema. Each check
needs the schema compiled: a jsonschema validator (draft-07 unless the schema names another
``$schema``, as LWIR does) and :func:`~little_dist.scheduling.fast_schema.compile_check`'s
quick "valid". :func:`compiled_schema` builds both once per schema (by its canonical JSON)
and keeps them in :data:`SCHEMA_CHECKS`, bounded by count and by the schemas' total text, so
a fleet that sees the schemas of every version it runs does not grow without end. Pure: no
IO (jsonschema is imported on first use).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from little_dist.canonical import canonical_json
from little_dist.lru import TextKeyedCache
from little_dist.scheduling.fast_schema import Check, compile_check

__all__ = [
    "SCHEMA_CHECKS",
    "SCHEMA_CHECKS_CHARS",
    "SCHEMA_CHECKS_ITEMS",
    "CompiledSchema",
    "compiled_schema",
]

#: Schemas kept compiled at most, and their canonical JSON's total length at most.
SCHEMA_CHECKS_ITEMS: Final = 1024
SCHEMA_CHECKS_CHARS: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A schema ready to check values with."""

    #: The jsonschema validator (``iter_errors`` for the messages).
    validator: Any
    #: A quick predicate whose ``True`` is the validator's answer; ``None`` for schemas it
    #: does not cover (then only the validator decides).
    quick: Check | None

    def accepts_quickly(self, value: Any) -> bool:
        """Whether the quick check accepts ``value`` (``False``: ask the validator)."""
        return self.quick is not None and self.quick(value)


#: The process's compiled schemas, by canonical JSON (see the module docstring).
SCHEMA_CHECKS: Final[TextKeyedCache[CompiledSchema]] = TextKeyedCache(
    SCHEMA_CHECKS_ITEMS, SCHEMA_CHECKS_CHARS
)


def compiled_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """``schema`` compiled, from :data:`SCHEMA_CHECKS` or built (and kept) now."""

    def build() -> CompiledSchema:
        from jsonschema import Draft7Validator
        from jsonschema.validators import validator_for

        plain = dict(schema)
        validator = validator_for(plain, default=Draft7Validator)(plain)
        return CompiledSchema(validator, compile_check(plain))

    return SCHEMA_CHECKS.get_or_build(canonical_json(schema), build)
