"""Evaluating templates against a run context, as upstream's ``resolveExpressionValue`` does.

The context is a mapping with the roots ``input``, ``steps`` (step id -> ``{"output": ...,
"visits": [...]}``), and optionally ``item`` (present only inside a parallel branch — the key's
presence is what counts), ``step`` and ``workflow`` (the whole LWIR document). Evaluation is
pure: no IO, no clock.
"""

from __future__ import annotations

import hashlib
import hmac as hmac_lib
from collections.abc import Callable, Mapping
from typing import Any, Final

from little_dist.canonical import NonHashableValueError, sha256_digest
from little_dist.expressions.dates import iso_date_string
from little_dist.expressions.errors import ExpressionError
from little_dist.expressions.jsvalues import (
    NATIVE_FUNCTIONS,
    UNDEFINED,
    js_keys,
    js_string,
    json_stringify,
    loose_equals,
    number_string,
    relational,
    strict_equals,
    truthy,
    utf16_length,
)
from little_dist.expressions.syntax import (
    FORBIDDEN_PATH_SEGMENTS,
    INFINITE_INDEX,
    And,
    Call,
    Compare,
    Expression,
    Literal,
    Or,
    Path,
    parse_expression,
    parse_template,
)

__all__ = ["evaluate", "evaluate_expression", "resolve_value"]

_SWALLOWED_BY_COALESCE: Final = ("could not be resolved", "references incomplete step")


def _type_error(message: str) -> ExpressionError:
    return ExpressionError(message, code="type_error", js_name="TypeError")


def _segment_text(segment: str | int) -> str:
    if isinstance(segment, str):
        return segment
    return "Infinity" if segment >= INFINITE_INDEX else number_string(segment)


def _read_path(value: Any, segments: tuple[str | int, ...], text: str) -> Any:
    """Walk own properties only: ints index arrays, strings index plain objects."""
    for segment in segments:
        if isinstance(segment, str):
            if isinstance(value, Mapping) and segment in value:
                value = value[segment]
                continue
        elif isinstance(value, list | tuple) and 0 <= segment < len(value):
            value = value[segment]
            continue
        raise ExpressionError(
            f"Expression '{text}' could not be resolved at '{_segment_text(segment)}'.",
            code="unresolved_path",
        )
    return value


def _member(value: Any, name: str) -> Any:
    """JavaScript ``value[name]`` for the few reads upstream does on step records."""
    if value is None or value is UNDEFINED:
        raise _type_error(f"Cannot read properties of {js_string(value)} (reading '{name}')")
    if isinstance(value, Mapping):
        return value.get(name, UNDEFINED)
    if isinstance(value, list | tuple | str):
        length = len(value) if not isinstance(value, str) else utf16_length(value)
        if name == "length":
            return length
        if name.isascii() and name.isdigit() and (name == "0" or name[0] != "0"):
            index = int(name)
            if index < length:
                if isinstance(value, str):
                    units = value.encode("utf-16-le", "surrogatepass")
                    return units[2 * index : 2 * index + 2].decode("utf-16-le", "surrogatepass")
                return value[index]
    return UNDEFINED


def _step_record(context: Mapping[str, Any], step_id: str) -> Any:
    steps = context.get("steps", UNDEFINED)
    if steps is None or steps is UNDEFINED:
        raise _type_error(f"Cannot read properties of {js_string(steps)} (reading '{step_id}')")
    if isinstance(steps, Mapping):
        if step_id in steps:
            return steps[step_id]
        # Upstream reads context.steps[id] without an own-property check, so the names of
        # Object.prototype's methods resolve to those functions.
        return NATIVE_FUNCTIONS.get(step_id, UNDEFINED)
    return _member(steps, step_id)


def _eval_steps_path(node: Path, context: Mapping[str, Any]) -> Any:
    segments = node.segments
    step_id = segments[0] if segments else None
    if not isinstance(step_id, str) or not step_id:
        raise ExpressionError(f"Unsupported step expression: {node.text}", code="step_expression")
    step = _step_record(context, step_id)
    if step is UNDEFINED:
        raise ExpressionError(
            f"Expression references incomplete step '{step_id}'.", code="incomplete_step"
        )
    accessor = segments[1] if len(segments) > 1 else None
    if accessor == "lastOutput":
        visits = _member(step, "visits")
        if visits is not UNDEFINED and relational(_member(visits, "length"), 0, ">"):
            length = _member(visits, "length")
            last = _member(visits, number_string(length - 1)) if isinstance(length, int) else None
            return _read_path(last, segments[2:], node.text)
        return _read_path(_member(step, "output"), segments[2:], node.text)
    if accessor == "allVisits":
        visits = _member(step, "visits")
        if visits is UNDEFINED:
            output = _member(step, "output")
            visits = [] if output is UNDEFINED else [output]
        return _read_path(visits, segments[2:], node.text)
    return _read_path(step, segments[1:], node.text)


def _eval_path(node: Path, context: Mapping[str, Any]) -> Any:
    root = node.root
    if root == "steps":
        return _eval_steps_path(node, context)
    if root == "item" and "item" not in context:
        raise ExpressionError(
            f"Expression references item outside a parallel branch: {node.text}",
            code="item_scope",
        )
    return _read_path(context.get(root, UNDEFINED), node.segments, node.text)


def _coalesce(node: Call, context: Mapping[str, Any]) -> Any:
    if len(node.args) < 2:
        raise ExpressionError("coalesce() requires at least two arguments.", code="arity")
    for arg in node.args:
        try:
            value = _eval(arg, context)
        except ExpressionError as error:
            # Upstream matches on the message text, so any error whose message carries these
            # phrases (even a parse error quoting them) counts as "missing".
            if any(phrase in error.message for phrase in _SWALLOWED_BY_COALESCE):
                continue
            raise
        if value is not None and value is not UNDEFINED:
            return value
    return UNDEFINED


def _exactly_one(name: str, values: list[Any]) -> Any:
    if len(values) != 1:
        raise ExpressionError(f"{name}() requires one argument.", code="arity")
    return values[0]


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Node encodes lone surrogates as U+FFFD; pairs split across code points join up.
        return (
            text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode("utf-8")
        )


def _fn_date(values: list[Any]) -> Any:
    iso = iso_date_string(js_string(_exactly_one("date", values)))
    if iso is None:
        raise ExpressionError("Invalid time value", code="invalid_date", js_name="RangeError")
    return iso


def _fn_hmac(values: list[Any]) -> Any:
    if len(values) != 2:
        raise ExpressionError("hmac() requires two arguments.", code="arity")
    key, value = values
    message = value if isinstance(value, str) else json_stringify(value)
    if not isinstance(message, str):
        raise _type_error(
            'The "data" argument must be of type string or an instance of Buffer, TypedArray, '
            "or DataView. Received undefined"
        )
    digest = hmac_lib.new(_utf8(js_string(key)), _utf8(message), hashlib.sha256).hexdigest()
    return f"sha256:{digest}"


def _fn_len(values: list[Any]) -> Any:
    value = _exactly_one("len", values)
    if isinstance(value, str):
        return utf16_length(value)
    if isinstance(value, list | tuple | Mapping):
        return len(value)
    raise ExpressionError("len() supports strings, arrays, and objects.", code="invalid_argument")


def _fn_sha256(values: list[Any]) -> Any:
    if not values:
        raise ExpressionError("sha256() requires at least one argument.", code="arity")
    try:
        return sha256_digest(values[0] if len(values) == 1 else values)
    except NonHashableValueError as error:
        raise ExpressionError(str(error), code="not_hashable") from error


_EAGER: Final[dict[str, Callable[[list[Any]], Any]]] = {
    "date": _fn_date,
    "hmac": _fn_hmac,
    "json": lambda values: json_stringify(_exactly_one("json", values)),
    "len": _fn_len,
    "lower": lambda values: js_string(_exactly_one("lower", values)).lower(),
    "sha256": _fn_sha256,
    "upper": lambda values: js_string(_exactly_one("upper", values)).upper(),
}


def _eval_call(node: Call, context: Mapping[str, Any]) -> Any:
    if node.name == "coalesce":
        return _coalesce(node, context)
    function = _EAGER.get(node.name)
    if function is None:
        raise ExpressionError(
            f"Unsupported expression function '{node.name}'.", code="unknown_function"
        )
    # Arguments are evaluated before the arity check, as upstream does.
    return function([_eval(arg, context) for arg in node.args])


def _eval_compare(node: Compare, context: Mapping[str, Any]) -> bool:
    left = _eval(node.left, context)
    right = _eval(node.right, context)
    operator = node.operator
    if operator == "===":
        return strict_equals(left, right)
    if operator == "!==":
        return not strict_equals(left, right)
    if operator == "==":
        return loose_equals(left, right)
    if operator == "!=":
        return not loose_equals(left, right)
    return relational(left, right, operator)


def _eval(node: Expression, context: Mapping[str, Any]) -> Any:
    if isinstance(node, Path):
        return _eval_path(node, context)
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Compare):
        return _eval_compare(node, context)
    if isinstance(node, Call):
        return _eval_call(node, context)
    if isinstance(node, Or):
        return any(truthy(_eval(part, context)) for part in node.operands)
    if isinstance(node, And):
        return all(truthy(_eval(part, context)) for part in node.operands)
    raise ExpressionError(node.message, code=node.code)


def _eval_at(node: Expression, context: Mapping[str, Any], offset: int) -> Any:
    try:
        return _eval(node, context)
    except ExpressionError as error:
        if error.position is None:
            error.position = offset
        raise


def _embed(value: Any) -> str:
    """How upstream writes a value into surrounding text."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, int | float):  # bools are ints
        return js_string(value)
    text = json_stringify(value)
    return text if isinstance(text, str) else "undefined"


def _resolve_string(template: str, context: Mapping[str, Any]) -> Any:
    compiled = parse_template(template)
    if compiled.kind == "text":
        return template
    if compiled.kind == "malformed":
        raise ExpressionError(compiled.message, code="malformed_template")
    if compiled.kind == "whole":
        placeholder = compiled.pieces[0]
        assert not isinstance(placeholder, str)
        return _eval_at(placeholder.expression, context, placeholder.offset)
    return "".join(
        piece
        if isinstance(piece, str)
        else _embed(_eval_at(piece.expression, context, piece.offset))
        for piece in compiled.pieces
    )


def _resolve(value: Any, context: Mapping[str, Any]) -> Any:
    if isinstance(value, str):
        return _resolve_string(value, context)
    if isinstance(value, list | tuple):
        return [_resolve(item, context) for item in value]
    if isinstance(value, Mapping):
        resolved: dict[Any, Any] = {}
        for key in js_keys(value):
            if key in FORBIDDEN_PATH_SEGMENTS:
                raise ExpressionError(
                    f"Unsafe expression path segment '{key}'.", code="unsafe_segment"
                )
            resolved[key] = _resolve(value[key], context)
        return resolved
    return value


def _guarded(function: Callable[[], Any]) -> Any:
    """Run an evaluation so that only ExpressionError can escape, whatever the input."""
    try:
        return function()
    except ExpressionError:
        raise
    except RecursionError:
        raise ExpressionError("Expression value is nested too deeply.", code="too_deep") from None
    except Exception as error:  # a hostile context must not surface foreign errors
        raise ExpressionError(
            f"Expression evaluation failed: {type(error).__name__}: {error}", code="internal"
        ) from error


def resolve_value(value: Any, context: Mapping[str, Any]) -> Any:
    """Upstream ``resolveExpressionValue``: strings are templates (see :func:`evaluate`), lists
    and objects are resolved element by element into new containers (an object key
    ``__proto__``/``constructor``/``prototype`` raises "Unsafe expression path segment"), and
    other values are returned unchanged."""
    return _guarded(lambda: _resolve(value, context))


def evaluate(template: str, context: Mapping[str, Any]) -> Any:
    """Resolve a template string against ``context``.

    ``"{{ e }}"`` (only whitespace around one expression) returns the typed value of ``e``,
    possibly :data:`UNDEFINED`. Text with embedded expressions returns a string in which each
    value is written as upstream writes it (``String(n)`` for numbers, ``JSON.stringify`` in
    JavaScript property order for objects and arrays, ``undefined`` for undefined). Text
    without delimiters is returned as is. Raises :class:`ExpressionError` and nothing else.
    A non-string ``template`` is resolved like :func:`resolve_value`.
    """
    if not isinstance(template, str):
        return resolve_value(template, context)
    return _guarded(lambda: _resolve_string(template, context))


def evaluate_expression(body: str, context: Mapping[str, Any]) -> Any:
    """Evaluate a bare expression body (no ``{{ }}``), returning its typed value."""
    return _guarded(lambda: _eval(parse_expression(body), context))
