"""The syntax of ``{{ ... }}`` expressions and templates, in one place: the AST
(:mod:`~little_dist.expressions.nodes`), the parser (:mod:`~little_dist.expressions.parser`,
whose docstring gives upstream's grammar, on the text cutting of
:mod:`~little_dist.expressions.scanning`) and templates
(:mod:`~little_dist.expressions.templates`). Parsing never raises: a bad operand becomes an
:class:`Invalid` node that raises when evaluated.
"""

from __future__ import annotations

from little_dist.expressions.nodes import (
    COMPARISON_OPERATORS,
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
    StepReference,
)
from little_dist.expressions.parser import is_valid_expression, parse_expression, step_references
from little_dist.expressions.templates import Placeholder, Template, parse_template

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
    "Placeholder",
    "StepReference",
    "Template",
    "is_valid_expression",
    "parse_expression",
    "parse_template",
    "step_references",
]
