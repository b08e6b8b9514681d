"""The one way tests build LWIR documents: :func:`workflow_doc` around steps, :func:`tool_step`.

:func:`workflow_doc` wraps steps in a valid document (``apiVersion``, ``kind``, metadata,
input and output schemas, permissions). Unless given, the tools it permits are the ones the
steps call (every ``tool.call``, nested steps included) and the models the ones they name
(``ai.generate``'s ``with.model``), so a test writes only the steps it is about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "API_VERSION",
    "fan_in_schema",
    "models_named",
    "tool_step",
    "tools_called",
    "workflow_doc",
]

API_VERSION = "littleworkflow.dev/v0.1"
_OBJECT: Mapping[str, Any] = {"type": "object"}


def workflow_doc(
    name: str,
    steps: Sequence[Mapping[str, Any]],
    *,
    input_schema: Any = _OBJECT,
    output_schema: Any = _OBJECT,
    tools: Iterable[str] | None = None,
    models: Iterable[str] | None = None,
    version: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An LWIR document of ``steps``; ``extra`` top-level fields are added as given."""
    metadata: dict[str, Any] = {"name": name}
    if version is not None:
        metadata["version"] = version
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Workflow",
        "metadata": metadata,
        "input": {
            "schema": dict(input_schema) if isinstance(input_schema, Mapping) else input_schema
        },
        "output": {
            "schema": dict(output_schema) if isinstance(output_schema, Mapping) else output_schema
        },
        "permissions": {
            "models": list(models_named(steps) if models is None else models),
            "tools": list(tools_called(steps) if tools is None else tools),
            "secrets": [],
            "network": [],
        },
        "steps": [dict(step) for step in steps],
    }
    doc.update(extra)
    return doc


def fan_in_schema(output: Any = None) -> dict[str, Any]:
    """The schema of a parallel step's array output: the fan-in envelopes (``itemKey``,
    ``status``, ``artifacts``; ``output``, described by ``output`` when given, and
    ``outputRef``)."""
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["itemKey", "status", "artifacts"],
            "properties": {
                "itemKey": {"type": "string"},
                "status": {"type": "string"},
                "output": {} if output is None else output,
                "outputRef": {"type": "string"},
                "artifacts": {"type": "array", "items": {"type": "string"}},
            },
        },
    }


def tool_step(step_id: str, tool_name: str, args: Any, **extra: Any) -> dict[str, Any]:
    """A ``tool.call`` step (object output unless ``output=`` says otherwise)."""
    output = extra.pop("output", {"mode": "object", "schema": {"type": "object"}})
    step: dict[str, Any] = {
        "id": step_id,
        "uses": "tool.call",
        "with": {"tool": tool_name, "args": args},
        "output": output,
    }
    step.update(extra)
    return step


def tools_called(steps: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tools ``steps`` call, nested steps included, sorted."""
    return sorted({str(s["with"]["tool"]) for s in _all(steps) if s.get("uses") == "tool.call"})


def models_named(steps: Iterable[Mapping[str, Any]]) -> list[str]:
    """The model slots ``steps``' ``ai.generate`` steps name, nested steps included, sorted."""
    return sorted(
        {
            str(s["with"]["model"])
            for s in _all(steps)
            if s.get("uses") == "ai.generate" and isinstance(s.get("with", {}).get("model"), str)
        }
    )


def _all(steps: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for step in steps:
        yield step
        yield from _all(step.get("steps", []))
