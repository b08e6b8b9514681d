"""Input and output schemas of a definition: a pydantic model, a type or a JSON Schema,
turned into the LWIR schema subset (and an adapter that parses results back)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import TypeAdapter

from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.lwir.findings import Finding
from little_dist.lwir.schema import validate_schema_value

__all__ = ["json_path", "schema_of"]


def _inline_refs(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    """pydantic's schema without ``$ref``/``$defs``, ``title`` or ``default``: the LWIR
    schema subset has none of them."""
    if isinstance(node, list):
        return [_inline_refs(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            raise InvalidInputError(
                f"schema: recursive model {name!r} cannot be expressed in the LWIR schema subset"
            )
        target = _inline_refs(defs.get(name, {}), defs, (*seen, name))
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return {**target, **_inline_refs(siblings, defs, seen)}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$defs", "definitions", "default"):
            continue
        if key == "title" and not isinstance(value, dict):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: _inline_refs(sub, defs, seen) for name, sub in value.items()}
        elif key in ("enum", "const", "required", "examples"):
            out[key] = value
        else:
            out[key] = _inline_refs(value, defs, seen)
    return out


def _check_schema(schema: Any, what: str) -> None:
    findings: list[Finding] = []
    validate_schema_value(schema, f"$.{what}", findings)
    if findings:
        details = "; ".join(f"{finding.path}: {finding.message}" for finding in findings)
        raise InvalidInputError(f"{what} is outside the LWIR schema subset: {details}")


def schema_of(value: Any, what: str) -> tuple[Any, TypeAdapter[Any] | None]:
    """``(JSON Schema, adapter)`` of a schema-like value; the adapter is ``None`` for a plain
    JSON Schema (a dict or a bool) and parses results into Python objects otherwise."""
    if value is None:
        return True, None
    if isinstance(value, bool):
        return value, None
    if isinstance(value, Mapping):
        try:
            schema = json.loads(canonical_json(dict(value)))
        except InvalidInputError as error:
            raise InvalidInputError(f"{what}: {error}") from error
        _check_schema(schema, what)
        return schema, None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(value)
        raw = adapter.json_schema(mode="validation")
    except Exception as error:
        raise InvalidInputError(
            f"{what}: expected a pydantic model, a type or a JSON Schema, got {value!r} ({error})"
        ) from error
    schema = _inline_refs(raw, raw.get("$defs", {}), ())
    _check_schema(schema, what)
    return schema, adapter


def json_path(parts: Iterable[Any]) -> str:
    path = "input"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path
