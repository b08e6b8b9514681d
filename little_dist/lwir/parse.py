"""``parse_lwir``: validate an LWIR document, then load it into the typed models."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from little_dist.lwir.findings import LwirValidationError, error
from little_dist.lwir.models import LwirDocument
from little_dist.lwir.validate import validated_clone

__all__ = ["parse_lwir"]


def parse_lwir(doc: Any) -> LwirDocument:
    """Return ``doc`` as an :class:`LwirDocument`.

    Raises :class:`LwirValidationError` (an ``InvalidInputError``) listing every finding when
    the document is invalid.
    """
    findings, clone = validated_clone(doc)
    if findings:
        raise LwirValidationError(findings)
    try:
        return LwirDocument.model_validate(clone)
    except ValidationError as exc:
        # Only documents upstream accepts but no runtime could use get here, e.g. a decision
        # whose `cases` is a string: report them the same way rather than as a crash.
        problems = [
            error("schema.invalid", _document_path(clone, problem["loc"]), problem["msg"])
            for problem in exc.errors()
        ]
        raise LwirValidationError(problems) from exc


def _document_path(doc: Any, loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a JSON path, without the union tags it inserts."""
    path = "$"
    node = doc
    for part in loc:
        if type(node) is list and type(part) is int and 0 <= part < len(node):
            path, node = f"{path}[{part}]", node[part]
        elif type(node) is dict and part in node:
            path, node = f"{path}.{part}", node[part]
    return path
