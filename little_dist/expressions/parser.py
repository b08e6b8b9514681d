"""Parsing ``{{ ... }}`` expression bodies into an immutable AST (templates around them are
:mod:`little_dist.expressions.templates`).

The grammar is upstream's, which is defined by how its evaluator cuts text apart:

* split at every top-level ``||`` (quote- and bracket-aware), else at every ``&&``;
* else split at the **first** top-level comparison operator (``===`` ``!==`` ``>=`` ``<=``
  ``==`` ``!=`` ``>`` ``<``, tried in that order at each position), so ``2 == 2 == 2`` is
  ``2 == (2 == 2)``;
* else an operand: a quoted string (a backslash takes the next character literally), a number
  ``-?(0|[1-9]\\d*)(\\.\\d+)?``, ``true``/``false``/``null``, a call ``name(args, ...)``, or a path
  rooted at ``input | item | step | steps | workflow``.

There are no parentheses for grouping, no ``!`` and no arithmetic. Upstream parses lazily while
it evaluates, so an operand that cannot be parsed only fails when it is reached (``true || ??``
is ``true``). The AST keeps that behaviour: a bad operand becomes an :class:`Invalid` node that
raises when evaluated. Parsing itself never raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Final

from little_dist.expressions.jsvalues import JS_WHITESPACE
from little_dist.expressions.nodes import (
    EXPRESSION_ROOTS,
    FORBIDDEN_PATH_SEGMENTS,
    FUNCTION_ARITY,
    INFINITE_INDEX,
    And,
    Call,
    Compare,
    Expression,
    Invalid,
    Literal,
    Or,
    Path,
    Segment,
    StepReference,
)
from little_dist.expressions.scanning import (
    close_paren,
    find_comparison,
    read_quoted,
    split_top_level,
    trim,
)

__all__ = [
    "CACHE_MAX_LENGTH",
    "MAX_NESTING",
    "is_valid_expression",
    "parse_expression",
    "step_references",
]

# Deeper nesting than this (calls inside calls ...) is refused rather than risk the stack.
MAX_NESTING: Final = 64
# Longer texts are parsed every time rather than pinned in the caches (long prompt templates).
CACHE_MAX_LENGTH: Final = 4096

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_ROOT_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SEGMENT_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_DIGITS = re.compile(r"[0-9]+")
_CALL_HEAD = re.compile(rf"([A-Za-z_$][A-Za-z0-9_$]*)[{JS_WHITESPACE}]*\(")


def _index_segment(digits: str) -> int:
    """``Number(digits)`` as an int: rounded like a double, :data:`INFINITE_INDEX` past range."""
    if len(digits) <= 15:
        return int(digits)
    number = float(digits)
    return int(number) if number != float("inf") else INFINITE_INDEX


def _parse_path(text: str) -> Path | None:
    head = _ROOT_NAME.match(text)
    if head is None or head.group() not in EXPRESSION_ROOTS:
        return None
    segments: list[Segment] = []
    index = head.end()
    length = len(text)
    while index < length:
        char = text[index]
        if char == ".":
            name = _SEGMENT_NAME.match(text, index + 1)
            if name is None or name.group() in FORBIDDEN_PATH_SEGMENTS:
                return None
            segments.append(name.group())
            index = name.end()
        elif char == "[":
            quoted = read_quoted(text, index + 1)
            if quoted is not None:
                value, end = quoted
                if text[end : end + 1] != "]" or value in FORBIDDEN_PATH_SEGMENTS:
                    return None
                segments.append(value)
                index = end + 1
                continue
            digits = _DIGITS.match(text, index + 1)
            if digits is None or text[digits.end() : digits.end() + 1] != "]":
                return None
            segments.append(_index_segment(digits.group()))
            index = digits.end() + 1
        else:
            return None
    return Path(head.group(), tuple(segments), text)


def _parse_call(text: str, depth: int) -> Call | None:
    head = _CALL_HEAD.match(text)
    if head is None or not text.endswith(")"):
        return None
    open_index = head.end() - 1
    if close_paren(text, open_index) != len(text) - 1:
        return None
    inner = trim(text[open_index + 1 : -1])
    arg_texts = split_top_level(inner, ",") if inner else []
    args = tuple(_parse(trim(arg), depth + 1) for arg in arg_texts)
    return Call(head.group(1), args, text)


def _number_literal(text: str) -> int | float:
    # Up to 15 digits an int is exact as a double; beyond, round as JavaScript's Number() does.
    if "." not in text and text != "-0" and len(text.lstrip("-")) <= 15:
        return int(text)
    return float(text)


def _parse_operand(text: str, depth: int) -> Expression:
    if not text:
        return Invalid(text, "Unsupported empty expression.", "empty_expression")
    quoted = read_quoted(text, 0)
    if quoted is not None and quoted[1] == len(text):
        return Literal(quoted[0])
    if _NUMBER.fullmatch(text):
        return Literal(_number_literal(text))
    if text == "true":
        return Literal(True)
    if text == "false":
        return Literal(False)
    if text == "null":
        return Literal(None)
    call = _parse_call(text, depth)
    if call is not None:
        return call
    path = _parse_path(text)
    if path is None:
        return Invalid(text, f"Unsupported expression: {text}", "parse_error")
    return path


def _parse(text: str, depth: int) -> Expression:
    """Parse an already-trimmed expression body."""
    if depth > MAX_NESTING:
        return Invalid(text, "Expression is nested too deeply.", "too_deep")
    parts = split_top_level(text, "||")
    if len(parts) > 1:
        return Or(tuple(_parse(trim(part), depth + 1) for part in parts))
    parts = split_top_level(text, "&&")
    if len(parts) > 1:
        return And(tuple(_parse(trim(part), depth + 1) for part in parts))
    comparison = find_comparison(text)
    if comparison is not None:
        index, operator = comparison
        left = _parse(trim(text[:index]), depth + 1)
        right = _parse(trim(text[index + len(operator) :]), depth + 1)
        return Compare(operator, left, right)
    return _parse_operand(text, depth)


def _parse_body(body: str) -> Expression:
    return _parse(trim(body), 0)


_parse_body_cached = lru_cache(maxsize=4096)(_parse_body)


def parse_expression(body: str) -> Expression:
    """Parse an expression body (the text between ``{{`` and ``}}``). Never raises: parts that
    do not parse become :class:`Invalid` nodes. Cached per body; the AST is immutable."""
    if len(body) > CACHE_MAX_LENGTH:
        return _parse_body(body)
    return _parse_body_cached(body)


def _is_operand(node: Expression) -> bool:
    return isinstance(node, Literal | Path | Call)


def _valid(node: Expression) -> bool:
    if isinstance(node, Literal | Path):
        return True
    if isinstance(node, Or | And):
        return all(_valid(operand) for operand in node.operands)
    if isinstance(node, Compare):
        # Upstream's static check takes each side as a single operand: `1 == 1 == 1` and
        # `a || b == c )` are rejected statically although the runtime evaluates the first.
        return (
            _is_operand(node.left)
            and _is_operand(node.right)
            and _valid(node.left)
            and _valid(node.right)
        )
    if isinstance(node, Call):
        arity = FUNCTION_ARITY.get(node.name)
        if arity is None:
            return False
        low, high = arity
        if len(node.args) < low or (high is not None and len(node.args) > high):
            return False
        return all(_valid(arg) for arg in node.args)
    return False


def is_valid_expression(body: str) -> bool:
    """Upstream's static ``isValidExpression`` (lwir.ts): every operand parses, every function is
    known and called with an allowed number of arguments, comparisons join two plain operands.
    The keyword blacklist, item scope and ``steps[0]`` rules are the LWIR validator's."""
    return _valid(parse_expression(body))


def _walk(node: Expression) -> Iterator[Expression]:
    yield node
    if isinstance(node, Or | And):
        for operand in node.operands:
            yield from _walk(operand)
    elif isinstance(node, Compare):
        yield from _walk(node.left)
        yield from _walk(node.right)
    elif isinstance(node, Call):
        for arg in node.args:
            yield from _walk(arg)


def step_references(body: str) -> tuple[StepReference, ...]:
    """Every ``steps.<id>...`` / ``steps["id"]...`` path in the expression, in source order.

    ``segments`` is the path after the id: ``("output", "score")``, ``("lastOutput",)``, or
    ``()`` for a bare ``steps.id``. Paths whose first segment is not a non-empty string
    (``steps``, ``steps[0]``) are not references; operands that do not parse are skipped.
    """
    refs: list[StepReference] = []
    for node in _walk(parse_expression(body)):
        if isinstance(node, Path) and node.root == "steps" and node.segments:
            step_id = node.segments[0]
            if isinstance(step_id, str) and step_id:
                refs.append(StepReference(step_id, node.segments[1:]))
    return tuple(refs)
