"""The expression AST: immutable nodes, and the names and limits the grammar fixes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "COMPARISON_OPERATORS",
    "EXPRESSION_ROOTS",
    "FORBIDDEN_PATH_SEGMENTS",
    "FUNCTION_ARITY",
    "INFINITE_INDEX",
    "And",
    "Call",
    "Compare",
    "Expression",
    "Invalid",
    "Literal",
    "Or",
    "Path",
    "Segment",
    "StepReference",
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
