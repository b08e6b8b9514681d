"""Canonical JSON and content digests, byte-identical to upstream little-workflow.

The canonical form of a JSON value is what JavaScript's ``JSON.stringify`` prints for it once
every object's keys are sorted in JavaScript's default order (UTF-16 code units), with no
whitespace. Hashes of workflows, events and artifacts are taken over this text, so a hash
computed here equals the one upstream computes for the same value.

Only plain JSON values are hashable: ``dict`` with ``str`` keys, ``list`` (and ``tuple``),
``str``, ``int``, ``float``, ``bool`` and ``None``. Anything else — NaN or an infinity, a lone
UTF-16 surrogate, a cycle, a set, bytes, a datetime, an object, or a value nested more than
:data:`MAX_DEPTH` containers deep — raises :class:`NonHashableValueError` naming the JSON path
of the offending value (``$.a[2]``); nothing is silently dropped or converted.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Final, NoReturn

from little_dist.errors import InvalidInputError

__all__ = [
    "MAX_DEPTH",
    "CanonicalTemplate",
    "NonHashableValueError",
    "canonical_json",
    "canonical_json_exact",
    "js_number_string",
    "js_stringify",
    "sha256_digest",
    "sha256_hex",
    "sha256_hex_text",
]

_IDENTIFIER = re.compile(r"^[A-Za-z_$][\w$]*$", re.ASCII)
# Integers beyond this lose precision in a JavaScript number; upstream sees them rounded.
_MAX_SAFE_INTEGER = 2**53 - 1
_encode_string = json.JSONEncoder(ensure_ascii=False).encode
#: The deepest value (in nested containers) that has a canonical form here. Far below
#: Python's recursion limit for this walk and for the recursive readers of the same values
#: downstream (the LWIR validator, jsonschema: about two stack frames per level), so a deeper
#: value is a clear error rather than a ``RecursionError``.
MAX_DEPTH: Final = 256


class NonHashableValueError(InvalidInputError):
    """A value with no canonical JSON form. ``path`` is its JSON path (``$.a[2]``)."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(f"{message} (at {path})")
        self.reason = message
        self.path = path


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of ``value``."""
    return _canonical(value, True)[0]


def canonical_json_exact(value: Any) -> tuple[str, bool]:
    """:func:`canonical_json` of ``value``, and whether that text read back
    (``json.loads``) equals ``value`` with the same types all through: dicts, lists,
    strings, booleans, ``None``, safe integers and the floats both languages print alike,
    no tuple (read back as a list). A writer that holds such a value and owns it may hand
    it on for the text read back, without the parse (its keys in the writer's order, not
    the text's sorted order)."""
    return _canonical(value, False)


def _canonical(value: Any, tuples: bool) -> tuple[str, bool]:
    """The canonical text of ``value``, and whether the fast path printed it (see
    :func:`canonical_json_exact`; ``tuples``: a tuple may take it too)."""
    # Most values the engine hashes (event payloads, LWIR documents) hold only strings,
    # safe integers, booleans, null and the odd duration in milliseconds: for those, the C
    # encoder of the standard library prints exactly the canonical form, about twice as
    # fast as the walk below.
    if _c_encode is not None and _plain(value, 0, tuples):
        text = "".join(_c_encode(value, 0))
        if text.isascii() or _BEYOND_D7FF.search(text) is None:
            return text, True
    parts: list[str] = []
    _serialize(value, "$", set(), parts)
    return "".join(parts), False


def _reject(value: Any) -> NoReturn:
    raise TypeError(type(value).__name__)


# The standard library's C encoder, built once: sorted keys, no whitespace, NaN refused, no
# cycle markers (``_plain`` bounds the depth, so a cycle takes the walk, which names it).
# It sorts keys by code point, which is JavaScript's UTF-16 order below U+D800; a text with
# anything from U+D800 up (astral characters, private use, a surrogate) takes the walk.
_c_encode: Any = (
    c_make_encoder(None, _reject, encode_basestring, None, ":", ",", True, False, False)
    if c_make_encoder is not None
    else None
)
_BEYOND_D7FF = re.compile("[\ud800-\U0010ffff]")
_PLAIN_DEPTH = 64
# Python's float repr and JavaScript's Number#toString print the same shortest digits; they
# lay them out alike for a fractional value in [1e-4, 1e16) (no exponent in either, and no
# "1.0" where JavaScript prints "1"), so such floats may take the C encoder.
_PLAIN_FLOAT_MIN = 1e-4
_PLAIN_FLOAT_MAX = 1e16


def _plain_float(value: float) -> bool:
    size = abs(value)
    return _PLAIN_FLOAT_MIN <= size < _PLAIN_FLOAT_MAX and not value.is_integer()


def _plain(value: Any, depth: int, tuples: bool = True) -> bool:
    """Whether ``value`` holds only str keys and str / safe int / bool / None leaves, or
    floats both languages print alike (:func:`_plain_float`), at most ``_PLAIN_DEPTH``
    deep, in dicts and lists (and tuples, if ``tuples``)."""
    kind = type(value)
    if kind is str or value is None or value is True or value is False:
        return True
    if kind is int:
        return bool(-_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER)
    if kind is float:
        return _plain_float(value)
    if depth >= _PLAIN_DEPTH:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            kind = type(item)
            if kind is str or item is None or item is True or item is False:
                continue
            if not _plain(item, depth + 1, tuples):
                return False
        return True
    if kind is list or (kind is tuple and tuples):
        for item in value:
            kind = type(item)
            if kind is str or item is None or item is True or item is False:
                continue
            if not _plain(item, depth + 1, tuples):
                return False
        return True
    return False


def sha256_hex_text(text: str) -> str:
    """Hex SHA-256 of the UTF-8 bytes of ``text`` (no canonicalisation)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_hex(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON of ``value``."""
    return sha256_hex_text(canonical_json(value))


def sha256_digest(value: Any) -> str:
    """``"sha256:" + sha256_hex(value)`` — the digest format upstream uses everywhere."""
    return "sha256:" + sha256_hex(value)


def js_number_string(number: int | float) -> str:
    """Print a finite number exactly as JavaScript's ``Number#toString`` / ``JSON.stringify``.

    ``1.0`` -> ``1``, ``-0.0`` -> ``0``, ``1e21`` -> ``1e+21``, ``1e20`` -> all digits,
    ``1e-7`` -> ``1e-7``, ``1e-6`` -> ``0.000001``; integers beyond 2**53 round to the nearest
    double first, as ``JSON.parse`` would have done.
    """
    if isinstance(number, int) and -_MAX_SAFE_INTEGER <= number <= _MAX_SAFE_INTEGER:
        return str(number)
    value = float(number)  # OverflowError for ints beyond the double range
    if value == 0:
        return "0"
    # repr gives the shortest round-tripping digits, as ECMAScript's Number::toString does;
    # only the layout of those digits differs.
    text = repr(value)
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp_text = text.partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    # n: the decimal exponent such that value = 0.d1d2...dk * 10**n
    point = len(int_part) + (int(exp_text) if exp_text else 0)
    leading_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    point -= leading_zeros
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= point <= 21:
        return sign + digits + "0" * (point - k)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * (-point) + digits
    exponent = point - 1
    exp_sign = "+" if exponent >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{head}e{exp_sign}{abs(exponent)}"


def js_stringify(value: Any) -> str:
    """``JSON.stringify(value)`` as JavaScript prints it: keys in their insertion order (not
    sorted: what upstream's ``--json`` outputs are), no whitespace, numbers as
    :func:`js_number_string`. For JSON data only (dicts with str keys, lists, str, finite
    numbers, bools, None)."""
    parts: list[str] = []

    def walk(item: Any) -> None:
        if item is None or item is True or item is False:
            parts.append("null" if item is None else ("true" if item else "false"))
        elif isinstance(item, str):
            parts.append(_encode_string(item))
        elif isinstance(item, int | float):
            parts.append(js_number_string(item))
        elif isinstance(item, dict):
            parts.append("{")
            for index, (key, inner) in enumerate(item.items()):
                if index:
                    parts.append(",")
                parts.append(_encode_string(str(key)))
                parts.append(":")
                walk(inner)
            parts.append("}")
        elif isinstance(item, list | tuple):
            parts.append("[")
            for index, inner in enumerate(item):
                if index:
                    parts.append(",")
                walk(inner)
            parts.append("]")
        else:
            raise TypeError(f"not JSON data: {type(item).__name__}")

    walk(value)
    return "".join(parts)


# Paths are built only when an error is raised: a path is "$" or (parent, key-or-index).
_Path = Any


def _render_path(path: _Path) -> str:
    parts: list[str] = []
    while isinstance(path, tuple):
        path, step = path
        if isinstance(step, int):
            parts.append(f"[{step}]")
        elif _IDENTIFIER.fullmatch(step):
            parts.append(f".{step}")
        else:
            parts.append(f"[{_encode_string(step)}]")
    return "$" + "".join(reversed(parts))


def _fail(message: str, path: _Path) -> NoReturn:
    raise NonHashableValueError(message, _render_path(path))


def _too_deep(path: _Path) -> NoReturn:
    where = _render_path(path)
    if len(where) > 60:
        where = where[:60] + "..."
    raise NonHashableValueError(
        f"Values nested more than {MAX_DEPTH} levels deep are not hashable.", where
    )


def _well_formed(text: str, path: _Path) -> str:
    """Return ``text`` with surrogate pairs joined; reject lone surrogates."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    # A Python str may hold a UTF-16 pair as two code points; JavaScript sees one character.
    try:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        _fail("Lone surrogates are not hashable.", path)


def _utf16_key(entry: tuple[str, Any]) -> bytes:
    return entry[0].encode("utf-16-be")


def _serialize(value: Any, path: _Path, ancestors: set[int], out: list[str]) -> None:
    kind = type(value)
    if kind is str:
        out.append(_encode_string(_well_formed(value, path)))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif kind is int:
        if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER:
            out.append(str(value))
        else:
            try:
                out.append(js_number_string(value))
            except OverflowError:
                _fail("Non-finite numbers are not hashable.", path)
    elif kind is float:
        if not math.isfinite(value):
            _fail("Non-finite numbers are not hashable.", path)
        out.append(js_number_string(value))
    elif kind is dict:
        _serialize_object(value, path, ancestors, out)
    elif kind is list or kind is tuple:
        marker = id(value)
        if marker in ancestors:
            _fail("Cyclic references are not hashable.", path)
        if len(ancestors) >= MAX_DEPTH:  # (the containers this one is inside)
            _too_deep(path)
        ancestors.add(marker)
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _serialize(item, (path, index), ancestors, out)
        out.append("]")
        ancestors.discard(marker)
    else:
        _fail(f"Values of type {kind.__name__} are not hashable.", path)


def _serialize_object(
    value: dict[Any, Any], path: _Path, ancestors: set[int], out: list[str]
) -> None:
    marker = id(value)
    if marker in ancestors:
        _fail("Cyclic references are not hashable.", path)
    if len(ancestors) >= MAX_DEPTH:
        _too_deep(path)
    ancestors.add(marker)
    items: list[tuple[str, Any]] = []
    all_ascii = True
    for key, item in value.items():
        if type(key) is not str:
            raise NonHashableValueError(
                f"Object keys must be strings, not {type(key).__name__}.",
                f"{_render_path(path)}[{key!r}]",
            )
        if not key.isascii():
            all_ascii = False
            key = _well_formed(key, (path, key))
        items.append((key, item))
    # Below U+D800 code-point order equals UTF-16 code-unit order; only then may the cheap
    # sort be used.
    if all_ascii:
        items.sort(key=lambda entry: entry[0])
    else:
        items.sort(key=_utf16_key)
    out.append("{")
    first = True
    for key, item in items:
        if first:
            first = False
        else:
            out.append(",")
        out.append(_encode_string(key))
        out.append(":")
        _serialize(item, (path, key), ancestors, out)
    out.append("}")
    ancestors.discard(marker)


_HOLE_TEXT = re.compile(r'"\\u0000little-hole:([A-Za-z_]+)\\u0000"')


class CanonicalTemplate:
    """The canonical JSON of a large value of which a few leaves vary, walked once and
    filled per value: ``CanonicalTemplate(value).text(x=...)`` is ``canonical_json`` of
    ``value`` with each :meth:`hole` replaced, in a string join instead of a walk.

    A container's canonical JSON is its members' canonical JSON in key order, so replacing
    a leaf's text gives the text of the value with that leaf replaced. The fill values are
    canonical JSON texts already (a caller hashing the same input twice prints it once).
    """

    def __init__(self, value: Any) -> None:
        pieces = _HOLE_TEXT.split(canonical_json(value))
        self._fixed: tuple[str, ...] = tuple(pieces[0::2])
        self._names: tuple[str, ...] = tuple(pieces[1::2])

    @staticmethod
    def hole(name: str) -> str:
        """The placeholder for the leaf ``name`` (letters and ``_``) in a template's value."""
        return f"\x00little-hole:{name}\x00"

    def text(self, filled: Mapping[str, str]) -> str:
        """The canonical JSON with every hole ``name`` replaced by ``filled[name]`` (a
        canonical JSON text)."""
        out = [self._fixed[0]]
        for name, fixed in zip(self._names, self._fixed[1:], strict=True):
            out.append(filled[name])
            out.append(fixed)
        return "".join(out)

    def digest(self, filled: Mapping[str, str]) -> str:
        """``sha256_digest`` of the filled value."""
        return "sha256:" + sha256_hex_text(self.text(filled))
