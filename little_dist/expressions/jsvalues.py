"""JavaScript value semantics over Python JSON values.

Upstream evaluates expressions in JavaScript, so equality, ordering, truthiness and the way
values turn into text are JavaScript's. The value model:

===========================  =====================================================
JavaScript                   Python
===========================  =====================================================
``undefined``                :data:`UNDEFINED` (a falsy singleton, not ``None``)
``null``                     ``None``
boolean / number / string    ``bool`` / ``int`` or ``float`` / ``str``
array / plain object         ``list`` or ``tuple`` / any ``Mapping``
a built-in function          :class:`JSFunction` (``Object.prototype`` methods that
                             upstream's un-guarded ``context.steps[id]`` can reach)
===========================  =====================================================

Objects compare by identity (``is``), as JavaScript compares references. Numbers behave as
IEEE doubles: Python ints are rounded to the nearest double before they are compared or printed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from little_dist.canonical import js_number_string
from little_dist.expressions.errors import ExpressionError

__all__ = [
    "JS_WHITESPACE",
    "NATIVE_FUNCTIONS",
    "UNDEFINED",
    "JSFunction",
    "js_keys",
    "js_string",
    "json_stringify",
    "loose_equals",
    "number_string",
    "relational",
    "strict_equals",
    "to_number",
    "truthy",
    "utf16_length",
]

# ECMAScript WhiteSpace + LineTerminator: what `\s` and String#trim() use. Differs from Python's
# str.isspace() (which adds U+001C..U+001F and U+0085 but lacks U+FEFF).
JS_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


class _Undefined:
    """JavaScript ``undefined``: distinct from ``None`` (``null``), falsy, one instance."""

    __slots__ = ()
    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Final = _Undefined()


@dataclass(frozen=True, eq=False, slots=True)
class JSFunction:
    """A built-in JavaScript function value, e.g. what ``steps.toString`` yields upstream."""

    name: str

    def __repr__(self) -> str:
        return f"[Function: {self.name}]"


# Object.prototype's members other than the three forbidden path segments.
NATIVE_FUNCTIONS: Final[Mapping[str, JSFunction]] = {
    name: JSFunction(name)
    for name in (
        "__defineGetter__",
        "__defineSetter__",
        "__lookupGetter__",
        "__lookupSetter__",
        "hasOwnProperty",
        "isPrototypeOf",
        "propertyIsEnumerable",
        "toLocaleString",
        "toString",
        "valueOf",
    )
}

_UNDEFINED_KIND = 0
_NULL = 1
_BOOLEAN = 2
_NUMBER = 3
_STRING = 4
_OBJECT = 5


def _kind(value: Any) -> int:
    if value is None:
        return _NULL
    if value is UNDEFINED:
        return _UNDEFINED_KIND
    if value is True or value is False:
        return _BOOLEAN
    if isinstance(value, int | float):
        return _NUMBER
    if isinstance(value, str):
        return _STRING
    return _OBJECT


def _double(value: int | float) -> float:
    """The IEEE double JavaScript would hold for a Python number."""
    if isinstance(value, float):
        return value
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def number_string(value: int | float) -> str:
    """JavaScript ``String(n)`` for a number, including NaN and the infinities."""
    if isinstance(value, int) and -(2**53) < value < 2**53:
        return str(value)
    number = _double(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return js_number_string(number)


def truthy(value: Any) -> bool:
    """JavaScript ``Boolean(value)``: ``[]``, ``{}``, ``"0"`` and ``"false"`` are truthy."""
    kind = _kind(value)
    if kind == _NUMBER:
        number = _double(value)
        return number == number and number != 0
    if kind == _STRING:
        return len(value) > 0
    if kind == _BOOLEAN:
        return bool(value)
    return kind == _OBJECT


def _to_primitive(value: Any) -> Any:
    """ToPrimitive of an object: plain objects and arrays fall through to ``toString()``."""
    if isinstance(value, list | tuple):
        return ",".join(
            "" if item is None or item is UNDEFINED else js_string(item) for item in value
        )
    if isinstance(value, JSFunction):
        return f"function {value.name}() {{ [native code] }}"
    return "[object Object]"


def js_string(value: Any) -> str:
    """JavaScript ``String(value)``."""
    if isinstance(value, str):
        return value
    kind = _kind(value)
    if kind == _NUMBER:
        return number_string(value)
    if kind == _BOOLEAN:
        return "true" if value else "false"
    if kind == _NULL:
        return "null"
    if kind == _UNDEFINED_KIND:
        return "undefined"
    result: str = _to_primitive(value)
    return result


_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_RADIX = re.compile(r"0(?:[xX](?P<hex>[0-9a-fA-F]+)|[oO](?P<oct>[0-7]+)|[bB](?P<bin>[01]+))")


def _string_to_number(text: str) -> float:
    """JavaScript ``Number(string)``: trims whitespace, accepts ``0x10``, ``Infinity``, ``.5``."""
    stripped = text.strip(JS_WHITESPACE)
    if not stripped:
        return 0.0
    if _DECIMAL.fullmatch(stripped):
        return float(stripped.replace("Infinity", "inf"))
    radix = _RADIX.fullmatch(stripped)
    if radix is not None:
        digits, base = next(
            (radix.group(name), base)
            for name, base in (("hex", 16), ("oct", 8), ("bin", 2))
            if radix.group(name) is not None
        )
        return _double(int(digits, base))
    return math.nan


def to_number(value: Any) -> float:
    """JavaScript ``Number(value)``."""
    kind = _kind(value)
    if kind == _NUMBER:
        return _double(value)
    if kind == _STRING:
        return _string_to_number(value)
    if kind == _BOOLEAN:
        return 1.0 if value else 0.0
    if kind == _NULL:
        return 0.0
    if kind == _UNDEFINED_KIND:
        return math.nan
    return _string_to_number(_to_primitive(value))


def strict_equals(left: Any, right: Any) -> bool:
    """JavaScript ``===``: no coercion; objects by reference."""
    kind = _kind(left)
    if kind != _kind(right):
        return False
    if kind == _NUMBER:
        return _double(left) == _double(right)
    if kind == _STRING:
        return bool(left == right)
    if kind in (_NULL, _UNDEFINED_KIND):
        return True
    return left is right


def loose_equals(left: Any, right: Any) -> bool:
    """JavaScript ``==`` (IsLooselyEqual): ``'0x10' == 16``, ``[] == ''``, ``null == undefined``."""
    left_kind, right_kind = _kind(left), _kind(right)
    if left_kind == right_kind:
        return strict_equals(left, right)
    nullish = (_NULL, _UNDEFINED_KIND)
    if left_kind in nullish or right_kind in nullish:
        return left_kind in nullish and right_kind in nullish
    if left_kind == _BOOLEAN:
        return loose_equals(1 if left else 0, right)
    if right_kind == _BOOLEAN:
        return loose_equals(left, 1 if right else 0)
    if left_kind == _OBJECT:
        return loose_equals(_to_primitive(left), right)
    if right_kind == _OBJECT:
        return loose_equals(left, _to_primitive(right))
    # one number, one string
    return to_number(left) == to_number(right)


def _utf16_less(left: str, right: str) -> bool:
    if left.isascii() and right.isascii():
        return left < right
    return left.encode("utf-16-be", "surrogatepass") < right.encode("utf-16-be", "surrogatepass")


def relational(left: Any, right: Any, operator: str) -> bool:
    """JavaScript ``<``, ``>``, ``<=``, ``>=``: strings by UTF-16 code units, else numerically."""
    if _kind(left) == _OBJECT:
        left = _to_primitive(left)
    if _kind(right) == _OBJECT:
        right = _to_primitive(right)
    if isinstance(left, str) and isinstance(right, str):
        if operator == "<":
            return _utf16_less(left, right)
        if operator == ">":
            return _utf16_less(right, left)
        if operator == "<=":
            return not _utf16_less(right, left)
        return not _utf16_less(left, right)
    a, b = to_number(left), to_number(right)
    if operator == "<":
        return a < b
    if operator == ">":
        return a > b
    if operator == "<=":
        return a <= b
    return a >= b


def utf16_length(text: str) -> int:
    """JavaScript ``string.length``: UTF-16 code units, so an emoji counts 2."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _is_array_index(key: str) -> bool:
    if not key or len(key) > 10 or not (key.isascii() and key.isdigit()):
        return False
    return (key == "0" or key[0] != "0") and int(key) < 2**32 - 1


def js_keys(record: Mapping[Any, Any]) -> list[Any]:
    """A record's keys in JavaScript property order: array-index keys ascending, then the rest
    in insertion order (so ``{"b":1,"2":2,"a":3,"1":4}`` lists ``1, 2, b, a``)."""
    keys = list(record.keys())
    index_keys = [key for key in keys if isinstance(key, str) and _is_array_index(key)]
    if not index_keys:
        return keys
    index_keys.sort(key=int)
    return index_keys + [key for key in keys if not (isinstance(key, str) and _is_array_index(key))]


_JSON_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\ud800-\udfff]')


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _JSON_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _quote(text: str) -> str:
    """JSON.stringify of a string: non-ASCII raw, lone surrogates as ``\\udxxx``."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A Python str may hold a UTF-16 pair as two code points; JavaScript sees one.
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


def _stringify_into(value: Any, out: list[str], ancestors: set[int]) -> bool:
    """Append JSON text for ``value``; return False (appending nothing) for undefined/functions."""
    kind = _kind(value)
    if kind == _STRING:
        out.append(_quote(value))
    elif kind == _NUMBER:
        number = _double(value)
        out.append(number_string(value) if math.isfinite(number) else "null")
    elif kind == _BOOLEAN:
        out.append("true" if value else "false")
    elif kind == _NULL:
        out.append("null")
    elif kind == _UNDEFINED_KIND or isinstance(value, JSFunction):
        return False
    elif isinstance(value, list | tuple | Mapping):
        marker = id(value)
        if marker in ancestors:
            raise ExpressionError(
                "Converting circular structure to JSON", code="type_error", js_name="TypeError"
            )
        ancestors.add(marker)
        if isinstance(value, Mapping):
            out.append("{")
            first = True
            for key in js_keys(value):
                mark = len(out)
                if not first:
                    out.append(",")
                out.append(_quote(key if isinstance(key, str) else js_string(key)))
                out.append(":")
                if _stringify_into(value[key], out, ancestors):
                    first = False
                else:
                    del out[mark:]
            out.append("}")
        else:
            out.append("[")
            for index, item in enumerate(value):
                if index:
                    out.append(",")
                if not _stringify_into(item, out, ancestors):
                    out.append("null")
            out.append("]")
        ancestors.discard(marker)
    else:
        raise ExpressionError(
            f"Values of type {type(value).__name__} cannot be converted to JSON.",
            code="type_error",
            js_name="TypeError",
        )
    return True


def json_stringify(value: Any) -> str | Any:
    """JavaScript ``JSON.stringify(value)`` in JS property order; :data:`UNDEFINED` when
    JavaScript returns ``undefined`` (for ``undefined`` itself and functions)."""
    out: list[str] = []
    if not _stringify_into(value, out, set()):
        return UNDEFINED
    return "".join(out)
