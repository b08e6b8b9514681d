"""The few JavaScript value semantics the LWIR validator needs to agree with upstream.

Upstream validates ``JSON.parse(canonicalJson(doc))``, so every check sees plain JSON values
with JavaScript's rules: ``typeof x === "number"`` excludes booleans, an absent key
(``undefined``) differs from ``null``, ``key in obj`` also finds ``Object.prototype``'s
members, objects iterate integer-like keys first, and ``x > 1`` coerces its operand.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, TypeGuard

from typing_extensions import TypeIs

from little_dist.canonical import canonical_json, js_number_string

__all__ = [
    "MISSING",
    "is_integer",
    "is_number",
    "is_record",
    "is_string_array",
    "js_clone",
    "js_has_key",
    "js_length",
    "js_parse",
    "js_to_number",
    "js_trim",
    "json_quote",
]


class _Missing:
    """JavaScript's ``undefined``: a key that is absent (``null`` is a value)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()

# Members every JSON.parse'd object inherits from Object.prototype: `key in obj` sees them.
_OBJECT_PROTOTYPE_KEYS: Final = frozenset(
    {
        "__defineGetter__",
        "__defineSetter__",
        "__lookupGetter__",
        "__lookupSetter__",
        "__proto__",
        "constructor",
        "hasOwnProperty",
        "isPrototypeOf",
        "propertyIsEnumerable",
        "toLocaleString",
        "toString",
        "valueOf",
    }
)
_ARRAY_INDEX = re.compile(r"(?:0|[1-9][0-9]*)\Z")
_MAX_ARRAY_INDEX: Final = 2**32 - 2
# String.prototype.trim's set: WhiteSpace plus LineTerminator (it differs from str.strip).
_JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_RADIX = re.compile(r"0([xXoObB])([0-9a-fA-F]+)\Z")
_RADIX_BASE: Final = {"x": 16, "o": 8, "b": 2}


def is_record(value: Any) -> TypeIs[dict[str, Any]]:
    """``isRecord``: a JSON object (not an array, not null)."""
    return type(value) is dict


def is_number(value: Any) -> TypeIs[int | float]:
    """``typeof value === "number"`` (booleans are not numbers in JavaScript)."""
    return type(value) is int or type(value) is float


def is_integer(value: Any) -> TypeGuard[int | float]:
    """``Number.isInteger(value)``."""
    if type(value) is int:
        return True
    return type(value) is float and math.isfinite(value) and value.is_integer()


def is_string_array(value: Any) -> TypeIs[list[str]]:
    """An array whose every entry is a string."""
    return type(value) is list and all(type(item) is str for item in value)


def js_has_key(key: str, record: dict[str, Any]) -> bool:
    """``key in record`` for a JSON.parse'd object, prototype chain included."""
    return key in record or key in _OBJECT_PROTOTYPE_KEYS


def js_trim(text: str) -> str:
    """``String.prototype.trim``."""
    return text.strip(_JS_WHITESPACE)


def js_length(text: str) -> int:
    """``text.length``: UTF-16 code units."""
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


def json_quote(text: str) -> str:
    """``JSON.stringify`` of a (well-formed) string: only controls, quote and backslash escaped."""
    return json.dumps(text, ensure_ascii=False)


def js_to_number(value: Any) -> float:
    """ECMAScript ToNumber of a JSON value (what ``value > 1`` compares)."""
    if value is None or value is False:
        return 0.0
    if value is True:
        return 1.0
    if is_number(value):
        return float(value)
    if type(value) is str:
        return _string_to_number(value)
    if type(value) is list:
        return _string_to_number(_js_string(value))
    return math.nan


def _js_string(value: Any) -> str:
    """ECMAScript ToString of a JSON value (arrays join, objects print as [object Object])."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is str:
        return value
    if is_number(value):
        return js_number_string(value)
    if type(value) is list:
        return ",".join("" if item is None else _js_string(item) for item in value)
    return "[object Object]"


def _string_to_number(text: str) -> float:
    trimmed = js_trim(text)
    if trimmed == "":
        return 0.0
    if trimmed in ("Infinity", "+Infinity"):
        return math.inf
    if trimmed == "-Infinity":
        return -math.inf
    if _DECIMAL.match(trimmed):
        return float(trimmed)
    radix = _RADIX.match(trimmed)
    if radix:
        try:
            return float(int(radix.group(2), _RADIX_BASE[radix.group(1).lower()]))
        except (ValueError, OverflowError):
            return math.nan
    return math.nan


def _js_ordered(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Canonical JSON already sorted the keys; JavaScript objects list array-index keys first.
    indexed = [
        pair for pair in pairs if _ARRAY_INDEX.match(pair[0]) and int(pair[0]) <= _MAX_ARRAY_INDEX
    ]
    if not indexed:
        return dict(pairs)
    indexed.sort(key=lambda pair: int(pair[0]))
    ordered = dict(indexed)
    ordered.update(pair for pair in pairs if pair[0] not in ordered)
    return ordered


def js_clone(value: Any) -> Any:
    """``JSON.parse(canonicalJson(value))``; raises NonHashableValueError (or RecursionError)."""
    return js_parse(canonical_json(value))


def js_parse(text: str) -> Any:
    """``JSON.parse(text)``: objects keep JavaScript's property order."""
    return json.loads(text, object_pairs_hook=_js_ordered)
