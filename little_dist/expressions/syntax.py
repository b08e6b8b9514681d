"""Parsing ``{{ ... }}`` templates and expression bodies into an immutable AST.

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
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from little_dist.expressions.jsvalues import JS_WHITESPACE

__all__ = [
    "COMPARISON_OPERATORS",
    "EXPRESSION_ROOTS",
    "FORBIDDEN_PATH_SEGMENTS",
    "FUNCTION_ARITY",
    "And",
    "Call",
    "Compare",
    "Expression",
    "Invalid",
    "Literal",
    "Or",
    "Path",
    "StepReference",
    "Template",
    "is_valid_expression",
    "parse_expression",
    "parse_template",
    "step_references",
]

EXPRESSION_ROOTS: Final = frozenset({"input", "item", "step", "steps", "workflow"})
FORBIDDEN_PATH_SEGMENTS: Final = frozenset({"__proto__", "constructor", "prototype"})
COMPARISON_OPERATORS: Final = ("===", "!==", ">=", "<=", "==", "!=", ">", "<")
# (min, max) argument counts the static validator allows; max None = unbounded.
FUNCTION_ARITY: Final[dict[str, tuple[int, int | None]]] = {
    "coalesce": (2, None),
    "date": (1, 1),
    "hmac": (2, 2),
    "json": (1, 1),
    "len": (1, 1),
    "lower": (1, 1),
    "sha256": (1, None),
    "upper": (1, 1),
}
# Deeper nesting than this (calls inside calls ...) is refused rather than risk the stack.
MAX_NESTING: Final = 64
# Longer texts are parsed every time rather than pinned in the caches (long prompt templates).
CACHE_MAX_LENGTH: Final = 4096
# A numeric path segment too large for a double (upstream's Number() gives Infinity).
INFINITE_INDEX: Final = 2**1024

Segment = str | int


@dataclass(frozen=True, slots=True)
class Literal:
    """A string, number, ``true``, ``false`` or ``null`` literal."""

    value: str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Path:
    """``root`` followed by ``.name`` / ``["name"]`` (str) and ``[n]`` (int) segments.

    ``text`` is the operand as written; upstream quotes it in error messages.
    """

    root: str
    segments: tuple[Segment, ...]
    text: str


@dataclass(frozen=True, slots=True)
class Call:
    """``name(arg, ...)``. The name is not checked here: unknown names fail when evaluated."""

    name: str
    args: tuple[Expression, ...]
    text: str


@dataclass(frozen=True, slots=True)
class Compare:
    """``left <operator> right`` with JavaScript comparison semantics."""

    operator: str
    left: Expression
    right: Expression


@dataclass(frozen=True, slots=True)
class Or:
    """``a || b || ...``: a boolean, short-circuiting."""

    operands: tuple[Expression, ...]


@dataclass(frozen=True, slots=True)
class And:
    """``a && b && ...``: a boolean, short-circuiting."""

    operands: tuple[Expression, ...]


@dataclass(frozen=True, slots=True)
class Invalid:
    """An operand that does not parse; evaluating it raises ``message``."""

    text: str
    message: str
    code: str


Expression = Literal | Path | Call | Compare | Or | And | Invalid


@dataclass(frozen=True, slots=True)
class StepReference:
    """A ``steps.<id>...`` reference: the step id and the path after it."""

    step_id: str
    segments: tuple[Segment, ...]


def trim(text: str) -> str:
    """JavaScript ``String#trim``."""
    return text.strip(JS_WHITESPACE)


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_ROOT_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SEGMENT_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_DIGITS = re.compile(r"[0-9]+")
_CALL_HEAD = re.compile(rf"([A-Za-z_$][A-Za-z0-9_$]*)[{JS_WHITESPACE}]*\(")
_QUOTED = {
    '"': re.compile(r'"((?:\\[\s\S]|[^"\\])*)"'),
    "'": re.compile(r"'((?:\\[\s\S]|[^'\\])*)'"),
}
_BACKSLASH = re.compile(r"\\([\s\S])")
_COMPARISON_CHARS = frozenset("=!<>")


def _read_quoted(text: str, index: int) -> tuple[str, int] | None:
    """A quoted literal starting at ``index``: (value, index after the closing quote)."""
    pattern = _QUOTED.get(text[index : index + 1])
    if pattern is None:
        return None
    match = pattern.match(text, index)
    if match is None:
        return None
    body = match.group(1)
    if "\\" in body:
        body = _BACKSLASH.sub(lambda escaped: escaped.group(1), body)
    return body, match.end()


def _split(text: str, token: str) -> list[str]:
    """Upstream's splitTopLevelByToken: cut at ``token`` outside quotes and brackets; the text
    stays whole when brackets close more than they open."""
    if token not in text:
        return [text]
    parts: list[str] = []
    start = depth = index = 0
    quote = ""
    length = len(text)
    while index < length:
        char = text[index]
        if quote:
            if char == "\\" and index + 1 < length:
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char == '"' or char == "'":
            quote = char
        elif char == "(" or char == "[":
            depth += 1
        elif char == ")" or char == "]":
            depth -= 1
            if depth < 0:
                return [text]
        elif depth == 0 and text.startswith(token, index):
            parts.append(text[start:index])
            index += len(token)
            start = index
            continue
        index += 1
    if not parts:
        return [text]
    parts.append(text[start:])
    return parts


def _find_comparison(text: str) -> tuple[int, str] | None:
    """The first top-level comparison operator: (index, operator)."""
    if _COMPARISON_CHARS.isdisjoint(text):
        return None
    depth = index = 0
    quote = ""
    length = len(text)
    while index < length:
        char = text[index]
        if quote:
            if char == "\\" and index + 1 < length:
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char == '"' or char == "'":
            quote = char
        elif char == "(" or char == "[":
            depth += 1
        elif char == ")" or char == "]":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and char in _COMPARISON_CHARS:
            for operator in COMPARISON_OPERATORS:
                if text.startswith(operator, index):
                    return index, operator
        index += 1
    return None


def _close_paren(text: str, open_index: int) -> int | None:
    """Index of the ``)`` matching the ``(`` at ``open_index`` (quote-aware, ignores ``[]``)."""
    depth = 0
    quote = ""
    index = open_index
    length = len(text)
    while index < length:
        char = text[index]
        if quote:
            if char == "\\" and index + 1 < length:
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char == '"' or char == "'":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
            if depth < 0:
                return None
        index += 1
    return None


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
            quoted = _read_quoted(text, index + 1)
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
    if _close_paren(text, open_index) != len(text) - 1:
        return None
    inner = trim(text[open_index + 1 : -1])
    arg_texts = _split(inner, ",") if inner else []
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
    quoted = _read_quoted(text, 0)
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
    parts = _split(text, "||")
    if len(parts) > 1:
        return Or(tuple(_parse(trim(part), depth + 1) for part in parts))
    parts = _split(text, "&&")
    if len(parts) > 1:
        return And(tuple(_parse(trim(part), depth + 1) for part in parts))
    comparison = _find_comparison(text)
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


@dataclass(frozen=True, slots=True)
class Placeholder:
    """One ``{{ body }}`` inside a template; ``offset`` is where its ``{{`` starts."""

    expression: Expression
    offset: int


@dataclass(frozen=True, slots=True)
class Template:
    """A compiled template string.

    ``kind`` is ``"text"`` (no delimiters: the string itself), ``"whole"`` (exactly one
    expression and only whitespace around it: the typed value of ``pieces[0]``),
    ``"embedded"`` (text and placeholders joined as a string) or ``"malformed"`` (unequal
    ``{{``/``}}`` counts; ``message`` says so).
    """

    kind: str
    pieces: tuple[str | Placeholder, ...] = ()
    message: str = ""


_WS_CLASS = f"[{JS_WHITESPACE}]"
# Upstream: /^\s*\{\{\s*([^{}]+?)\s*\}\}\s*$/u and /\{\{\s*([^{}]+?)\s*\}\}/gu. The bodies are
# trimmed afterwards, so matching the whole brace-free run is equivalent and cannot backtrack.
_WHOLE = re.compile(rf"\A{_WS_CLASS}*\{{\{{([^{{}}]+)\}}\}}{_WS_CLASS}*\Z")
_EMBEDDED = re.compile(r"\{\{([^{}]+)\}\}")


def parse_template(template: str) -> Template:
    """Compile a template string once (cached); evaluation then only walks the result."""
    if len(template) > CACHE_MAX_LENGTH:
        return _compile_template(template)
    return _compile_template_cached(template)


def _compile_template(template: str) -> Template:
    whole = _WHOLE.match(template)
    if whole is not None:
        return Template(
            "whole", (Placeholder(parse_expression(whole.group(1)), whole.start(1) - 2),)
        )
    if "{{" not in template and "}}" not in template:
        return Template("text", (template,))
    if template.count("{{") != template.count("}}"):
        return Template("malformed", message=f"Malformed embedded expression: {template}")
    pieces: list[str | Placeholder] = []
    last = 0
    for match in _EMBEDDED.finditer(template):
        if match.start() > last:
            pieces.append(template[last : match.start()])
        pieces.append(Placeholder(parse_expression(match.group(1)), match.start()))
        last = match.end()
    if last < len(template):
        pieces.append(template[last:])
    return Template("embedded", tuple(pieces))


_compile_template_cached = lru_cache(maxsize=4096)(_compile_template)
