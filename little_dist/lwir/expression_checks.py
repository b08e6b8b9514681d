"""Static checks of ``{{ }}`` expressions inside an LWIR document.

The validator is stricter than the runtime on purpose (upstream's ``isSafeExpressionBody``):

* a keyword blacklist runs over the RAW body, so it also rejects segment names
  (``input.new``) and string literals (``'process'``, ``'x;y'``);
* ``{{}}``, empty bodies and stray delimiters are rejected;
* a numeric ``steps[0]`` index is rejected (``steps['0']`` names a step);
* the ``item`` root is rejected outside parallel branches.

What remains must be accepted by the expression parser (:mod:`little_dist.expressions`);
this module never parses expressions itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from little_dist.expressions import is_valid_expression, step_references
from little_dist.lwir._js import is_record, js_trim
from little_dist.lwir.findings import Finding, error

__all__ = [
    "ExpressionScan",
    "StepRef",
    "contains_unscannable_expression",
    "expression_body_references_root",
    "expressions_in",
    "is_safe_expression_body",
    "is_valid_template_expression",
    "references_expression_root",
    "scan_expressions",
    "step_reference_ids_in",
    "step_references_in",
    "template_expression_references_root",
    "validate_expressions",
]

_TEMPLATE: Final = re.compile(r"\{\{([^{}]+)\}\}")
# JavaScript's \b is ASCII-only; re.ASCII gives Python the same word characters.
_UNSAFE: Final = re.compile(
    r";|`|=>|\bawait\b|\bnew\b|\bfunction\b|\bimport\b|\brequire\b|\bprocess\b"
    r"|\bglobalThis\b|\bglobal\b|\beval\b|\bconstructor\b|\bprototype\b|__proto__",
    re.ASCII,
)
# JavaScript's `.` stops at every line terminator, not only "\n".
_STRING_LITERAL: Final = re.compile(
    r'"(?:\\[^\n\r\u2028\u2029]|[^"\\])*"|\'(?:\\[^\n\r\u2028\u2029]|[^\'\\])*\''
)
_NUMERIC_STEP_INDEX: Final = re.compile(r"(?:^|[^A-Za-z0-9_$.-])steps\s*\[\s*[0-9]+\s*\]")
_ROOT_PATTERNS: dict[str, re.Pattern[str]] = {}


@dataclass(frozen=True, slots=True)
class ExpressionScan:
    """The ``{{ … }}`` bodies of a string, or ``unscannable`` when a delimiter is left over.

    An unscannable string reports no expressions, which does not mean it holds none: the
    runtime resolves any string whose ``{{``/``}}`` counts match.
    """

    expressions: tuple[str, ...]
    unscannable: bool


@dataclass(frozen=True, slots=True)
class StepRef:
    """A ``steps.<id>`` read found in the string at ``path``; ``property`` is the next segment."""

    step_id: str
    property: str | None
    path: str


def scan_expressions(text: str) -> ExpressionScan:
    """Every ``{{ body }}`` in ``text`` (bodies trimmed), or unscannable on a stray delimiter."""
    bodies: list[str] = []
    covered = text
    for match in _TEMPLATE.finditer(text):
        bodies.append(js_trim(match.group(1)))
        covered = covered.replace(match.group(0), "", 1)
    if "{{" in covered or "}}" in covered:
        return ExpressionScan((), True)
    return ExpressionScan(tuple(bodies), False)


def expressions_in(text: str) -> tuple[str, ...]:
    """The expression bodies of ``text`` (empty when it is unscannable)."""
    return scan_expressions(text).expressions


def _without_string_literals(body: str) -> str:
    return _STRING_LITERAL.sub("", body)


def expression_body_references_root(body: str, root: str) -> bool:
    """Whether ``body`` reads the root ``root`` (``item``, ``input``, ...) outside literals."""
    pattern = _ROOT_PATTERNS.get(root)
    if pattern is None:
        pattern = re.compile(rf"(?:^|[^A-Za-z0-9_$.-]){re.escape(root)}(?=\Z|\s|[.\[\],=!<>|&)])")
        _ROOT_PATTERNS[root] = pattern
    return pattern.search(_without_string_literals(body)) is not None


def template_expression_references_root(text: str, root: str) -> bool:
    """Whether ``text`` holds exactly one expression and it reads ``root``."""
    bodies = expressions_in(text)
    return len(bodies) == 1 and expression_body_references_root(bodies[0], root)


def is_safe_expression_body(body: str, *, allow_item_expressions: bool = False) -> bool:
    """Whether one expression body passes the static checks and the expression parser."""
    trimmed = js_trim(body)
    if not trimmed or _UNSAFE.search(trimmed):
        return False
    if not allow_item_expressions and expression_body_references_root(trimmed, "item"):
        return False
    if _NUMERIC_STEP_INDEX.search(_without_string_literals(trimmed)):
        return False
    return is_valid_expression(trimmed)


def is_valid_template_expression(text: str, *, allow_item_expressions: bool = False) -> bool:
    """A whole-string ``{{ expression }}`` (decision ``when``, parallel ``items``/``itemKey``)."""
    if not text.startswith("{{") or not text.endswith("}}"):
        return False
    bodies = expressions_in(text)
    return len(bodies) == 1 and is_safe_expression_body(
        bodies[0], allow_item_expressions=allow_item_expressions
    )


def _strings_in(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every string inside a JSON value with its path (``$.a.b[0]``), in document order."""
    if type(value) is str:
        yield value, path
    elif type(value) is list:
        for index, item in enumerate(value):
            yield from _strings_in(item, f"{path}[{index}]")
    elif is_record(value):
        for key, item in value.items():
            yield from _strings_in(item, f"{path}.{key}")


def validate_expressions(
    value: Any, path: str, findings: list[Finding], *, allow_item_expressions: bool = False
) -> None:
    """``expression.invalid`` for each string under ``value`` holding a bad ``{{ }}`` (one each)."""
    for text, text_path in _strings_in(value, path):
        if "{{" not in text and "}}" not in text:
            continue
        scan = scan_expressions(text)
        if scan.unscannable or not scan.expressions:
            findings.append(
                error("expression.invalid", text_path, "Malformed template expression.")
            )
            continue
        for body in scan.expressions:
            if not is_safe_expression_body(body, allow_item_expressions=allow_item_expressions):
                findings.append(
                    error("expression.invalid", text_path, "Unsafe template expression.")
                )
                break


def step_references_in(value: Any, path: str) -> list[StepRef]:
    """Every ``steps.<id>`` read inside a JSON value, in document order, with its string's path."""
    found: list[StepRef] = []
    for text, text_path in _strings_in(value, path):
        if "{{" not in text:
            continue
        for body in expressions_in(text):
            for reference in step_references(body):
                first = reference.segments[0] if reference.segments else None
                found.append(
                    StepRef(reference.step_id, first if type(first) is str else None, text_path)
                )
    return found


def step_reference_ids_in(value: Any) -> list[str]:
    """The distinct step ids read anywhere inside ``value``, first appearance first."""
    return list(dict.fromkeys(reference.step_id for reference in step_references_in(value, "$")))


def contains_unscannable_expression(value: Any) -> bool:
    """Whether any string inside ``value`` has a stray ``{{``/``}}`` the scanner cannot place.

    Such a string reports no expressions yet may hold some at run time, so callers that decide
    on "no expressions here" (an input cone, a cache key) must treat it as "anything".
    """
    return any(scan_expressions(text).unscannable for text, _ in _strings_in(value, "$"))


def references_expression_root(value: Any, root: str) -> bool:
    """Whether any expression inside ``value`` reads ``root`` (``workflow`` is the whole LWIR)."""
    return any(
        expression_body_references_root(body, root)
        for text, _ in _strings_in(value, "$")
        for body in expressions_in(text)
    )
