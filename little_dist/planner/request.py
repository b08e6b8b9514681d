"""The orchestration request: what the planner works from, and the compile request
(the lock's request half) derived from it (upstream's ``OrchestrationRequest``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist.canonical import (
    CanonicalTemplate,
    canonical_json,
    sha256_digest,
    sha256_hex_text,
)
from little_dist.compiler import CompileRequest
from little_dist.compiler.lock import concrete_input_structure
from little_dist.lwir import API_VERSION

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition

__all__ = [
    "PLANNER_STEP_TYPES",
    "PRIOR_CYCLE_NOTE_SEPARATOR",
    "OrchestrationRequest",
    "RequestTemplate",
    "bind_compile_request",
    "bind_request",
    "orchestration_request",
    "request_template",
    "step_output",
]

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


#: Upstream's separator before a supervisor's note in ``messages.system`` (Spec 3.4 step 6).
PRIOR_CYCLE_NOTE_SEPARATOR: Final = "\n\n--- Prior cycle note ---\n"


def orchestration_request(
    definition: WorkflowDefinition,
    run_input: Any,
    *,
    outer_loop: Mapping[str, Any] | None = None,
    prompt_note: str | None = None,
) -> OrchestrationRequest:
    """The request the planner works from, for ``definition`` and a validated input.

    ``outer_loop``: upstream's ``outerLoop`` context of one cycle of an outer loop
    (``cycleNumber``, ``maxCycles``, ``isFinalCycle``, ``priorCycles``); ``prompt_note``:
    the supervisor's note for this cycle, folded into ``messages.system``. Both are part of
    the request hash, so each cycle compiles its own WorkflowVersion.
    """
    template = request_template(definition, outer_loop=outer_loop, prompt_note=prompt_note)
    return bind_request(template, run_input)


@dataclass(frozen=True)
class RequestTemplate:
    """What every orchestration request of one definition shares, built once: the body's
    canonical JSON with holes where the input goes (:class:`CanonicalTemplate`), so
    :func:`bind_request` hashes a new input's request without walking the manifest again."""

    for_id: CanonicalTemplate  # the body the request id is the digest of
    for_hash: CanonicalTemplate  # the body with its id: the request hash
    final: CanonicalTemplate  # the body with its id and hash
    compile_fields: Mapping[str, Any]  # the compile request's fields that are not input's


# Long on purpose: the orchestration request's document, built field by field in upstream's
# shape (its hashes are compared with upstream's), mostly literal dictionaries.
def request_template(
    definition: WorkflowDefinition,
    *,
    outer_loop: Mapping[str, Any] | None = None,
    prompt_note: str | None = None,
) -> RequestTemplate:
    """The :class:`RequestTemplate` of ``definition``'s orchestration requests (of one
    outer-loop cycle when ``outer_loop`` / ``prompt_note`` are given: see
    :func:`orchestration_request`)."""
    hole = CanonicalTemplate.hole
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
        "bash": definition.bash_config().normalized(),
    }
    snapshot = definition.snapshot().to_json()
    locks: dict[str, Any] = {
        "inputHash": hole("inputHash"),
        "plannedInputStructure": hole("structure"),
        "plannedInputStructureHash": hole("structureHash"),
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
    messages = {"user": definition.description or definition.id}
    if prompt_note is not None:
        messages["system"] = PRIOR_CYCLE_NOTE_SEPARATOR + prompt_note
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "OrchestrationRequest",
        "metadata": metadata,
        "messages": messages,
        "input": hole("input"),
        "inputSchema": definition.input_schema,
        "requestedOutput": requested_output,
        "capabilityManifest": capability_manifest,
        "controls": {"maxWorkflowRevisions": definition.max_revisions},
        "locks": locks,
    }
    if outer_loop is not None:
        body["outerLoop"] = json.loads(canonical_json(dict(outer_loop)))
    with_id = {**body, "requestId": hole("requestId")}
    return RequestTemplate(
        for_id=CanonicalTemplate(body),
        for_hash=CanonicalTemplate(with_id),
        final=CanonicalTemplate(
            {**with_id, "locks": {**locks, "requestHash": hole("requestHash")}}
        ),
        compile_fields={
            "workflow_definition_hash": locks["workflowDefinitionHash"],
            "input_schema_hash": locks["inputSchemaHash"],
            "requested_output": requested_output,
            "requested_output_hash": locks["requestedOutputHash"],
            "capability_manifest": capability_manifest,
            "capability_manifest_hash": sha256_digest(capability_manifest),
            "model_slots": tuple(model_locks),
            "tools": tuple(tools),
            "planning_definition_snapshot": snapshot,
            "planning_definition_snapshot_hash": sha256_digest(snapshot),
        },
    )


def bind_request(template: RequestTemplate, run_input: Any) -> OrchestrationRequest:
    """The orchestration request of ``template``'s definition for a validated input."""
    compile_request, filled = _bind(template, run_input)
    return OrchestrationRequest(json.loads(template.final.text(filled)), compile_request)


def bind_compile_request(template: RequestTemplate, run_input: Any) -> CompileRequest:
    """The compile request of :func:`bind_request` alone (its body is not read back)."""
    return _bind(template, run_input)[0]


def _bind(template: RequestTemplate, run_input: Any) -> tuple[CompileRequest, dict[str, str]]:
    structure = concrete_input_structure(run_input)
    input_text = canonical_json(run_input)
    structure_text = canonical_json(structure)
    input_hash = "sha256:" + sha256_hex_text(input_text)
    structure_hash = "sha256:" + sha256_hex_text(structure_text)
    filled = {
        "input": input_text,
        "inputHash": json.dumps(input_hash),
        "structure": structure_text,
        "structureHash": json.dumps(structure_hash),
    }
    request_id = "orq_" + template.for_id.digest(filled)[7:23]
    filled["requestId"] = json.dumps(request_id)
    request_hash = template.for_hash.digest(filled)
    filled["requestHash"] = json.dumps(request_hash)
    compile_request = CompileRequest(
        request_id=request_id,
        request_hash=request_hash,
        input_hash=input_hash,
        planned_input_structure=structure,
        planned_input_structure_hash=structure_hash,
        **template.compile_fields,
    )
    return compile_request, filled
