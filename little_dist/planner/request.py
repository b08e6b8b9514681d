"""The orchestration request: what the planner works from, and the compile request
(the lock's request half) derived from it (upstream's ``OrchestrationRequest``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler import CompileRequest
from little_dist.compiler.lock import concrete_input_structure
from little_dist.lwir import API_VERSION

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition

__all__ = ["PLANNER_STEP_TYPES", "OrchestrationRequest", "orchestration_request", "step_output"]

#: Upstream's ``ALPHA_STEP_TYPES``: what a planned LWIR may use.
PLANNER_STEP_TYPES: Final = ("ai.generate", "tool.call", "code.run", "parallel", "decision")


@dataclass(frozen=True)
class OrchestrationRequest:
    """Upstream's ``OrchestrationRequest`` (``body``, camelCase JSON) and the compile request
    (the lock's request half) derived from it."""

    body: Mapping[str, Any]
    compile_request: CompileRequest

    @property
    def request_id(self) -> str:
        return self.compile_request.request_id

    @property
    def requested_output_schema(self) -> Any:
        return _requested_schema(self.body["requestedOutput"])


def _requested_output(schema: Any) -> dict[str, Any]:
    # defineWorkflow's inference: an array schema is array output, a bare string schema is
    # text, an object schema is object output; anything else is json.
    if isinstance(schema, Mapping):
        kind = schema.get("type")
        if kind == "array":
            return {"mode": "array", "schema": schema}
        if kind == "string" and set(schema) <= {"type", "description"}:
            return {"mode": "text"}
        if kind == "object":
            return {"mode": "object", "schema": schema}
    return {"mode": "json", "schema": schema}


def _requested_schema(requested: Mapping[str, Any]) -> Any:
    if requested["mode"] == "text":
        return {"type": "string"}
    return requested.get("schema", True)


def step_output(requested: Mapping[str, Any]) -> dict[str, Any]:
    if requested["mode"] in ("object", "array"):
        return {"mode": requested["mode"], "schema": requested["schema"]}
    if requested["mode"] == "text":
        return {"mode": "text"}
    return {"mode": "json", "schema": requested.get("schema", True)}


def orchestration_request(definition: WorkflowDefinition, run_input: Any) -> OrchestrationRequest:
    """The request the planner works from, for ``definition`` and a validated input."""
    models = []
    model_locks = []
    for slot_id, slot in definition.models.items():
        metadata = {
            "id": slot_id,
            **({"description": slot.description} if slot.description else {}),
        }
        identity = {"providerId": slot.provider_id, "modelId": slot.model_id}
        lock = {
            "slotId": slot_id,
            "role": "model",
            "metadataHash": sha256_digest(metadata),
            "modelIdentityHash": sha256_digest(identity),
        }
        model_locks.append(lock)
        models.append({**lock, "metadata": metadata, "modelIdentity": identity})
    tools = definition.tool_snapshots()
    requested_output = _requested_output(definition.output_schema)
    capability_manifest = {
        "stepTypes": list(PLANNER_STEP_TYPES),
        "toolSelection": "planner_selected",
        "tools": tools,
        "models": models,
        "modelSlots": list(definition.models),
        "workerHarness": {"harnessId": definition.snapshot().worker_config.harness_id},
        "secrets": [],
        "network": {"default": "deny", "allow": []},
        "bash": definition.bash.normalized(),
    }
    structure = concrete_input_structure(run_input)
    snapshot = definition.snapshot().to_json()
    locks: dict[str, Any] = {
        "inputHash": sha256_digest(run_input),
        "plannedInputStructure": structure,
        "plannedInputStructureHash": sha256_digest(structure),
        "workflowDefinitionHash": sha256_digest(snapshot),
        "inputSchemaHash": sha256_digest(definition.input_schema),
        "requestedOutputHash": sha256_digest(requested_output),
        "capabilityManifest": capability_manifest,
        "modelSlots": model_locks,
        "tools": tools,
    }
    metadata = {"name": definition.id}
    if definition.description:
        metadata["description"] = definition.description
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "OrchestrationRequest",
        "metadata": metadata,
        "messages": {"user": definition.description or definition.id},
        "input": run_input,
        "inputSchema": definition.input_schema,
        "requestedOutput": requested_output,
        "capabilityManifest": capability_manifest,
        "controls": {"maxWorkflowRevisions": definition.max_revisions},
        "locks": locks,
    }
    request_id = "orq_" + sha256_digest(body)[7:23]
    request_hash = sha256_digest({**body, "requestId": request_id})
    body = {**body, "requestId": request_id, "locks": {**locks, "requestHash": request_hash}}
    compile_request = CompileRequest(
        request_id=request_id,
        request_hash=request_hash,
        input_hash=locks["inputHash"],
        planned_input_structure=structure,
        planned_input_structure_hash=locks["plannedInputStructureHash"],
        workflow_definition_hash=locks["workflowDefinitionHash"],
        input_schema_hash=locks["inputSchemaHash"],
        requested_output=requested_output,
        requested_output_hash=locks["requestedOutputHash"],
        capability_manifest=capability_manifest,
        capability_manifest_hash=sha256_digest(capability_manifest),
        model_slots=tuple(model_locks),
        tools=tuple(tools),
        planning_definition_snapshot=snapshot,
        planning_definition_snapshot_hash=sha256_digest(snapshot),
    )
    return OrchestrationRequest(json.loads(canonical_json(body)), compile_request)
