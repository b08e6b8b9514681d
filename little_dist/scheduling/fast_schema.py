"""A quick "valid" for the plain structural schemas step outputs use; jsonschema decides the rest.

A parallel step's output is its fan-in: one envelope per branch, checked against the step's
output schema when the group ends. Draft-07 validation with jsonschema costs about 35 us per
envelope (a 1000-branch fan-out's end waited 36 ms for it, with every other slot idle). Most
output schemas only say which JSON types go where: ``type``, ``properties``, ``required``,
``items``, ``additionalProperties``, sizes. :func:`compile_check` turns such a schema into a
predicate that answers *valid* exactly as ``Draft7Validator(schema).is_valid`` would, about
twenty times faster; for a schema with any other keyword (``$ref``, ``enum``, ``pattern``,
``format``, ``allOf``, ...) it gives ``None`` and jsonschema checks everything. Callers use
the predicate to accept a value, never to reject one: the message for an invalid value still
comes from jsonschema (:func:`~little_dist.scheduling.step_graph.schema_error`).

Draft-07 rules kept here: a keyword only constrains values of the type it applies to
(``properties`` ignores a list); ``integer`` accepts a float with no fractional part;
booleans are neither integers nor numbers; ``items`` as a list checks positions and
``additionalItems`` the rest; annotations (``title``, ``description``, ``default``, ...)
constrain nothing. ``tests/test_scheduling_fast_schema.py`` compares the two on generated
schemas and values.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["Check", "compile_check"]

Check = Callable[[Any], bool]

#: Keywords that constrain nothing (draft-07 annotations and metadata).
_ANNOTATIONS: Final = frozenset(
    {"$schema", "$comment", "title", "description", "default", "examples", "readOnly",
     "writeOnly", "deprecated", "contentMediaType", "contentEncoding"}
)  # fmt: skip
_HANDLED: Final = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "additionalItems",
     "minItems", "maxItems", "minProperties", "maxProperties"}
)  # fmt: skip


# jsonschema's draft-07 type checker, test for test.
def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Number)


_TYPE_TESTS: Final[dict[str, Check]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def compile_check(schema: Any) -> Check | None:
    """A predicate equal to draft-07 ``is_valid`` for ``schema``, or ``None`` when the schema
    uses anything but the structural keywords handled here (or is malformed)."""
    if schema is True:
        return lambda _: True
    if schema is False:
        return lambda _: False
    if not isinstance(schema, Mapping):
        return None
    if any(key not in _HANDLED and key not in _ANNOTATIONS for key in schema):
        return None
    checks: list[Check] = []

    kind = schema.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else kind
        if not isinstance(names, list) or not names:
            return None
        tests = [_TYPE_TESTS.get(name) for name in names if isinstance(name, str)]
        if len(tests) != len(names) or any(test is None for test in tests):
            return None
        found = [test for test in tests if test is not None]
        checks.append(found[0] if len(found) == 1 else lambda v: any(t(v) for t in found))

    object_check = _object_check(schema)
    if object_check is None:
        return None
    if object_check is not _NOTHING:
        checks.append(lambda v: not isinstance(v, dict) or object_check(v))

    array_check = _array_check(schema)
    if array_check is None:
        return None
    if array_check is not _NOTHING:
        checks.append(lambda v: not isinstance(v, list) or array_check(v))

    if not checks:
        return lambda _: True
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(check(v) for check in checks)


def _nothing(_: Any) -> bool:
    return True


_NOTHING: Final[Check] = _nothing


def _object_check(schema: Mapping[str, Any]) -> Check | None:
    """The check of the object keywords (``_NOTHING`` if there are none)."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    least = _count(schema.get("minProperties", 0))
    most = schema.get("maxProperties")
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return None
    if not all(isinstance(name, str) for name in required) or least is None:
        return None
    if most is not None and _count(most) is None:
        return None
    named: dict[str, Check] = {}
    for name, sub in properties.items():
        compiled = compile_check(sub)
        if compiled is None:
            return None
        named[name] = compiled
    other = compile_check(extra)
    if other is None:
        return None
    if not named and not required and extra is True and least == 0 and most is None:
        return _NOTHING
    needed = tuple(dict.fromkeys(required))
    open_ended = extra is True

    def check_object(value: dict[str, Any]) -> bool:
        size = len(value)
        if size < least or (most is not None and size > most):
            return False
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            found = named.get(name)
            if found is not None:
                if not found(item):
                    return False
            elif not open_ended and not other(item):
                return False
        return True

    return check_object


def _array_check(schema: Mapping[str, Any]) -> Check | None:
    """The check of the array keywords (``_NOTHING`` if there are none)."""
    items = schema.get("items", True)
    additional = schema.get("additionalItems", True)
    least = _count(schema.get("minItems", 0))
    most = schema.get("maxItems")
    if least is None or (most is not None and _count(most) is None):
        return None
    if isinstance(items, bool) and "additionalItems" in schema:
        return None  # (jsonschema itself trips over this one)
    positional: list[Check] | None = None
    each: Check | None = None
    if isinstance(items, list):
        positional = []
        for sub in items:
            compiled = compile_check(sub)
            if compiled is None:
                return None
            positional.append(compiled)
    else:
        each = compile_check(items)
        if each is None:
            return None
    rest = compile_check(additional)
    if rest is None:
        return None
    if positional is None and items is True and least == 0 and most is None:
        return _NOTHING

    def check_array(value: list[Any]) -> bool:
        size = len(value)
        if size < least or (most is not None and size > most):
            return False
        if positional is None:
            assert each is not None
            return all(map(each, value))
        count = len(positional)
        for index, item in enumerate(value):
            if index < count:
                if not positional[index](item):
                    return False
            elif not rest(item):
                return False
        return True

    return check_array
