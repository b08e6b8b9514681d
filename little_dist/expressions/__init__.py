"""Upstream's deterministic ``{{ ... }}`` expression language.

Templates appear in LWIR ``step.with``/``step.input``/``step.cache`` values, decision ``when``
and parallel ``items``/``itemKey``. :func:`evaluate` resolves one template string against a run
context exactly as upstream's ``resolveExpressionValue`` does (JavaScript truthiness, loose and
strict equality, relational coercion, ``JSON.stringify`` and ``String()`` rendering),
:func:`resolve_value` walks lists and objects. :func:`parse_expression` gives an immutable AST
(cached per body), :func:`is_valid_expression` is upstream's static check, and
:func:`step_references` lists the ``steps.<id>`` paths an expression reads.

JavaScript ``undefined`` is :data:`UNDEFINED`, never ``None``. Every failure is an
:class:`ExpressionError` whose ``str()`` is upstream's message.
"""

from __future__ import annotations

from little_dist.expressions.errors import ExpressionError
from little_dist.expressions.evaluator import evaluate, evaluate_expression, resolve_value
from little_dist.expressions.jsvalues import UNDEFINED, JSFunction
from little_dist.expressions.syntax import (
    And,
    Call,
    Compare,
    Expression,
    Invalid,
    Literal,
    Or,
    Path,
    StepReference,
    is_valid_expression,
    parse_expression,
    step_references,
)

__all__ = [
    "UNDEFINED",
    "And",
    "Call",
    "Compare",
    "Expression",
    "ExpressionError",
    "Invalid",
    "JSFunction",
    "Literal",
    "Or",
    "Path",
    "StepReference",
    "evaluate",
    "evaluate_expression",
    "is_valid_expression",
    "parse_expression",
    "resolve_value",
    "step_references",
]
