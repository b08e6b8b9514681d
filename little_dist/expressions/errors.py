"""The one error type the expression language raises."""

from __future__ import annotations

from little_dist.errors import InvalidInputError

__all__ = ["ExpressionError"]


class ExpressionError(InvalidInputError):
    """A ``{{ }}`` template or expression that cannot be parsed or evaluated.

    ``str(error)`` is upstream's message text, word for word (the conformance vectors' ``message``).
    ``code`` is our short machine-readable reason: ``parse_error`` (``Unsupported expression``),
    ``empty_expression``, ``malformed_template`` (unequal ``{{``/``}}`` counts),
    ``unresolved_path``, ``incomplete_step``, ``step_expression`` (``steps`` without a string
    id), ``item_scope``, ``unknown_function``, ``arity``, ``invalid_argument`` (``len`` of a
    non-container), ``invalid_date``, ``unsafe_segment`` (a forbidden key in a resolved object),
    ``not_hashable`` (``sha256`` of a non-JSON value), ``type_error`` (JavaScript TypeErrors),
    ``too_deep`` (nesting beyond our limit) and ``internal`` (any other failure, wrapped).
    ``position`` is the character
    offset in the template of the ``{{`` whose expression failed, when known. ``js_name`` is the
    JavaScript error class upstream throws (``Error``, ``RangeError`` for invalid dates,
    ``TypeError`` for a few property reads on ``null``).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        position: int | None = None,
        js_name: str = "Error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.position = position
        self.js_name = js_name

    def __repr__(self) -> str:
        return f"ExpressionError({self.message!r}, code={self.code!r}, position={self.position!r})"
