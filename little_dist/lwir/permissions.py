"""``permissions``: the compile-time allowlists of models and tools a workflow may bind.

``models`` and ``tools`` are enforced (every ``ai.generate`` model and ``tool.call`` tool must
be listed). ``secrets`` and ``network`` are accepted only when empty: nothing in the alpha
runtime reads them, so a non-empty list would be a boundary that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from little_dist.lwir._js import MISSING, is_record, is_string_array
from little_dist.lwir.findings import Finding, error, unimplemented_field

__all__ = [
    "Allowlists",
    "allowlists_for",
    "check_ai_model",
    "check_tool",
    "validate_permissions",
]

_PERMISSION_KEYS = ("models", "tools", "secrets", "network")


@dataclass(frozen=True, slots=True)
class Allowlists:
    """Declared model slots and tools; ``None`` when undeclared (then nothing is allowed)."""

    models: frozenset[str] | None = None
    tools: frozenset[str] | None = None

    def allows_model(self, model: str) -> bool:
        return self.models is not None and model in self.models

    def allows_tool(self, tool: str) -> bool:
        return self.tools is not None and tool in self.tools


def allowlists_for(doc: dict[str, Any]) -> Allowlists:
    """The allowlists an LWIR document declares (only well-formed string arrays count)."""
    permissions = doc.get("permissions")
    if not is_record(permissions):
        return Allowlists()
    models = permissions.get("models")
    tools = permissions.get("tools")
    return Allowlists(
        models=frozenset(models) if is_string_array(models) else None,
        tools=frozenset(tools) if is_string_array(tools) else None,
    )


def validate_permissions(permissions: Any, findings: list[Finding]) -> None:
    """Check ``$.permissions`` (called only when the key is present)."""
    if not is_record(permissions):
        findings.append(error("schema.invalid", "$.permissions", "permissions must be an object."))
        return
    for key in _PERMISSION_KEYS:
        value = permissions.get(key, MISSING)
        if value is MISSING:
            continue
        if not is_string_array(value):
            findings.append(
                error(
                    "schema.invalid",
                    f"$.permissions.{key}",
                    "permission entries must be string arrays.",
                )
            )
            continue
        # An empty list grants nothing, so it stays legal (upstream's compiler emits them).
        if key in ("secrets", "network") and value:
            findings.append(unimplemented_field(f"permissions.{key}", f"$.permissions.{key}"))


def check_ai_model(config: Any, step_path: str, allow: Allowlists, findings: list[Finding]) -> None:
    """``ai.generate`` needs ``with.model``, and the slot must be in ``permissions.models``."""
    model = config.get("model") if is_record(config) else None
    if type(model) is not str or not model:
        findings.append(
            error("model.missing", f"{step_path}.with.model", "AI steps require a model slot.")
        )
        return
    if not allow.allows_model(model):
        findings.append(
            error(
                "model.disallowed",
                f"{step_path}.with.model",
                f"Model '{model}' is not in the workflow allowlist.",
            )
        )


def check_tool(config: Any, step_path: str, allow: Allowlists, findings: list[Finding]) -> None:
    """``tool.call`` needs ``with.tool``, and it must be in ``permissions.tools``."""
    tool = config.get("tool") if is_record(config) else None
    if type(tool) is not str or not tool:
        findings.append(
            error(
                "tool.missing",
                f"{step_path}.with.tool",
                "Tool steps require a tool capability.",
            )
        )
        return
    if not allow.allows_tool(tool):
        findings.append(
            error(
                "tool.disallowed",
                f"{step_path}.with.tool",
                f"Tool '{tool}' is not in the workflow allowlist.",
            )
        )
