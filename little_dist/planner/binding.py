"""Validation of a planner draft against the request: LWIR findings, then upstream's
request binding (name, schemas, model slots and tools must match the definition)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from little_dist.canonical import sha256_digest
from little_dist.lwir import Finding, validate_lwir
from little_dist.planner.request import OrchestrationRequest

__all__ = ["binding_findings", "draft_findings"]


def _binding(code: str, path: str, message: str) -> Finding:
    return Finding("error", code, path, message)


def binding_findings(lwir: Any, request: OrchestrationRequest) -> list[Finding]:
    """Upstream's request binding: the draft must be for this workflow and its capabilities."""
    if not isinstance(lwir, Mapping):
        return [_binding("binding.invalid", "$", "LWIR document must be an object.")]
    body = request.body
    findings: list[Finding] = []
    metadata = lwir.get("metadata")
    if not isinstance(metadata, Mapping) or metadata.get("name") != body["metadata"]["name"]:
        findings.append(
            _binding(
                "binding.workflow_name_mismatch",
                "$.metadata.name",
                "LWIR workflow name must match the orchestration request.",
            )
        )
    lwir_input = lwir.get("input")
    if not isinstance(lwir_input, Mapping) or (
        sha256_digest(lwir_input.get("schema")) != body["locks"]["inputSchemaHash"]
    ):
        findings.append(
            _binding(
                "binding.input_schema_mismatch",
                "$.input.schema",
                "LWIR input schema must match the orchestration request input schema.",
            )
        )
    lwir_output = lwir.get("output")
    if not isinstance(lwir_output, Mapping) or sha256_digest(
        lwir_output.get("schema")
    ) != sha256_digest(request.requested_output_schema):
        findings.append(
            _binding(
                "binding.output_schema_mismatch",
                "$.output.schema",
                "LWIR output schema must match the orchestration request output schema.",
            )
        )
    manifest = body["capabilityManifest"]
    allowed = {
        "models": set(manifest["modelSlots"]),
        "tools": {item["name"] for item in manifest["tools"]},
        "secrets": set(manifest["secrets"]),
        "network": set(manifest["network"]["allow"]),
    }
    permissions = lwir.get("permissions")
    if isinstance(permissions, Mapping):
        for key, names in allowed.items():
            values = permissions.get(key)
            if not isinstance(values, list):
                continue
            for index, value in enumerate(values):
                if isinstance(value, str) and value not in names:
                    findings.append(
                        _binding(
                            f"binding.{key[:-1]}_disallowed",
                            f"$.permissions.{key}[{index}]",
                            f"{key[:-1]} '{value}' is not available in the orchestration request.",
                        )
                    )
    _bound_steps(lwir.get("steps"), "$.steps", allowed["models"], allowed["tools"], findings)
    return findings


def _bound_steps(
    steps: Any, path: str, models: set[str], tools: set[str], findings: list[Finding]
) -> None:
    if not isinstance(steps, list):
        return
    for index, step in enumerate(steps):
        if not isinstance(step, Mapping):
            continue
        here = f"{path}[{index}]"
        config = step.get("with")
        if isinstance(config, Mapping):
            chosen = config.get("model")
            if (
                step.get("uses") == "ai.generate"
                and isinstance(chosen, str)
                and chosen not in models
            ):
                findings.append(
                    _binding(
                        "binding.model_disallowed",
                        f"{here}.with.model",
                        f"Model '{chosen}' is not available in the orchestration request.",
                    )
                )
            name = config.get("tool")
            if step.get("uses") == "tool.call" and isinstance(name, str) and name not in tools:
                findings.append(
                    _binding(
                        "binding.tool_disallowed",
                        f"{here}.with.tool",
                        f"Tool '{name}' is not available in the orchestration request.",
                    )
                )
        _bound_steps(step.get("steps"), f"{here}.steps", models, tools, findings)


def draft_findings(lwir: Any, request: OrchestrationRequest) -> list[Finding]:
    errors = [finding for finding in validate_lwir(lwir) if finding.severity == "error"]
    return errors if errors else binding_findings(lwir, request)
