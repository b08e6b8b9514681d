"""The planner: a workflow definition and an input -> a registered WorkflowVersion.

Upstream's compile pipeline (``compiler.ts``, ``planner-reuse.ts``,
``workflow-version-reuse.ts``; docs ``foundations/planner-lifecycle.mdx``):

1. **Reuse.** A definition whose hash already has a registered version (the world's version
   index) reuses the newest one whose planned input has the same structure as this input
   (upstream's ``structure`` rule: same fields and kinds; arrays a parallel step fans out
   over may change length up to its ``maxBranches``). No model is called; the run records
   ``PlannerReuseDecisionRecorded`` (``reuse_unchanged``).
2. **Draft -> validate -> repair.** Otherwise the planner harness (role ``planner``, task
   ``plan``) drafts an LWIR: the default one asks the planner model for one JSON object.
   Each draft is validated (``validate_lwir`` plus upstream's request binding: name,
   schemas, model slots and tools must match the definition); the findings go back to the
   planner, one line each, until a draft is valid or ``max_revisions`` drafts were made.
   Upstream's deterministic floor follows: a workflow without tools gets the obvious
   single ``ai.generate`` step. A fixed ``plan=`` is the only draft (no model call).
3. **Register.** The valid LWIR is compiled against the request (the lock binds the
   definition hash and the planned input), stored in the world and indexed under the
   definition hash.

Everything is recorded on the run before ``RunStarted``: ``OrchestrationRequested``,
``PlannerStarted``, the planner's ``harness.model.*`` calls, ``PlannerDraftedWorkflow``,
``WorkflowValidationFailed`` | ``WorkflowValidationSucceeded`` (or
``PlannerReuseDecisionRecorded``); the runner then records ``WorkflowVersionRegistered``.
Every event has an occurrence id and recorded drafts and model replies are reused, so a
planning session that crashed resumes without paying for a draft twice. When no valid
draft comes, the run fails with causeCode ``planner_validation_exhausted``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler import CompileRequest, WorkflowVersion, compile_lwir
from little_dist.compiler.lock import concrete_input_structure
from little_dist.errors import InvalidInputError, LittleError
from little_dist.events import Event, EventInput
from little_dist.harness.memo import Memo
from little_dist.harness.recorder import EventRecorder
from little_dist.harness.types import (
    DEFAULT_HARNESS_ID,
    DelegateToDefault,
    HarnessContext,
    HarnessResult,
    HarnessScope,
    HarnessTask,
    PlanResult,
    PlanTask,
)
from little_dist.lwir import API_VERSION, KIND, Finding, validate_lwir

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.harness.types import Harness
    from little_dist.runtime.capabilities import Capabilities
    from little_dist.world.base import World

__all__ = [
    "PLANNER_STEP_TYPES",
    "DefaultPlanner",
    "OrchestrationRequest",
    "PlannerError",
    "binding_findings",
    "input_structure_compatible",
    "orchestration_request",
    "planning_context",
    "resolve_version",
    "synthesize_simple_lwir",
]

#: Upstream's ``ALPHA_STEP_TYPES``: what a planned LWIR may use.
PLANNER_STEP_TYPES: Final = ("ai.generate", "tool.call", "code.run", "parallel", "decision")
_UNCOMPILED: Final = "uncompiled"
_ITEMS_FROM_INPUT = re.compile(r"^\{\{\s*input((?:\.[A-Za-z_$][A-Za-z0-9_$-]*)*)\s*\}\}$")
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)

_PLANNER_ROLE = """You are the planner of little-workflow. You design a workflow as one LWIR \
document (apiVersion "littleworkflow.dev/v0.1", kind "Workflow") that achieves the goal for \
inputs like the one given. Rules:
- metadata.name must be the workflow id; input.schema and output.schema must equal the given \
schemas exactly.
- Steps use only: ai.generate (with.model = a model slot id, with.prompt), tool.call \
(with.tool = a tool name, with.args), parallel (fan out over an array with item/itemKey), \
decision (with.cases/when/to, default). Reference data with {{ input.x }}, \
{{ steps.<id>.output.y }}, {{ item.z }}.
- List the model slots and tools you use in permissions.models and permissions.tools.
- The last step's output is the workflow output and must match output.schema.
Reply with the LWIR JSON object only: no prose, no markdown fences."""


class PlannerError(LittleError):
    """The planner harness could not be run (a model call failed, a harness misbehaved)."""


# -- the orchestration request --------------------------------------------------------------


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


def _step_output(requested: Mapping[str, Any]) -> dict[str, Any]:
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
        "bash": {"enabled": False},
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


# -- validation of a draft against the request ---------------------------------------------


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


def _draft_findings(lwir: Any, request: OrchestrationRequest) -> list[Finding]:
    errors = [finding for finding in validate_lwir(lwir) if finding.severity == "error"]
    return errors if errors else binding_findings(lwir, request)


# -- what the planner is told ---------------------------------------------------------------


def synthesize_simple_lwir(request: OrchestrationRequest) -> dict[str, Any] | None:
    """Upstream's deterministic floor: one ``ai.generate`` step on the first model slot,
    for a workflow that has a model and no tools (``None`` otherwise)."""
    manifest = request.body["capabilityManifest"]
    if not manifest["modelSlots"] or manifest["tools"]:
        return None
    slot = manifest["modelSlots"][0]
    metadata = dict(request.body["metadata"])
    description = metadata.get("description")
    config: dict[str, Any] = {"model": slot}
    if description:
        config["prompt"] = description
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": metadata["name"],
            "version": "0.1.0-alpha",
            **({"description": description} if description else {}),
        },
        "input": {"schema": request.body["inputSchema"]},
        "output": {"schema": request.requested_output_schema},
        "permissions": {"tools": [], "models": [slot], "secrets": [], "network": []},
        "steps": [
            {
                "id": "generate",
                "uses": "ai.generate",
                "input": "{{ input }}",
                "with": config,
                "output": _step_output(request.body["requestedOutput"]),
            }
        ],
    }


def planning_context(request: OrchestrationRequest, definition: WorkflowDefinition) -> str:
    """Upstream's planning context: the capabilities the LWIR may bind, by id, the schemas,
    and (when one exists) a valid reference LWIR to adapt."""
    manifest = request.body["capabilityManifest"]
    lines = [
        "Available capabilities for this workflow (use ONLY these ids - never invent model "
        "or tool ids):"
    ]
    slots = [
        f"{slot_id}" + (f" ({slot.description})" if slot.description else "")
        for slot_id, slot in definition.models.items()
    ]
    lines.append(f"- model slots (set as a step's with.model): {', '.join(slots) or '(none)'}")
    lines.append(
        "- tools (set as a tool.call step's with.tool):" + ("" if manifest["tools"] else " (none)")
    )
    for item in manifest["tools"]:
        lines.append(
            f"  - {item['name']}: {item['description'] or '(no description)'}; "
            f"input schema {canonical_json(item['inputSchema'])}"
        )
    lines.append(f"- step types (a step's uses): {', '.join(manifest['stepTypes'])}")
    lines.append(f"Input schema (copy exactly): {canonical_json(request.body['inputSchema'])}")
    lines.append(f"Output schema (copy exactly): {canonical_json(request.requested_output_schema)}")
    reference = synthesize_simple_lwir(request)
    if reference is not None:
        lines.append("")
        lines.append(
            "A valid reference LWIR for THIS workflow is below. It already satisfies the output "
            "contract - return it as-is, or adapt it if the task needs more. Return ONLY the "
            "LWIR JSON:"
        )
        lines.append(json.dumps(reference, indent=2))
    return "\n".join(lines)


def _repair_note(previous: Any, findings: Sequence[Finding]) -> str:
    lines = [
        "",
        "Your previous draft was invalid. Fix every finding below and reply with the "
        "whole corrected LWIR:",
    ]
    lines += [f"- {f.severity} {f.code} at {f.path}: {f.message}" for f in findings]
    lines.append("Previous draft:")
    lines.append(previous if isinstance(previous, str) else canonical_json(previous))
    return "\n".join(lines)


# -- the default planner harness ------------------------------------------------------------


def _parse_reply(text: str) -> Any:
    """The JSON object in a planner reply (markdown fences tolerated); the raw text when it
    is not JSON, so validation reports it and the planner gets another try."""
    fenced = _FENCE.match(text)
    candidate = fenced.group(1) if fenced else text.strip()
    try:
        return json.loads(candidate)
    except json.JSONDecodeError:
        start, end = candidate.find("{"), candidate.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(candidate[start : end + 1])
            except json.JSONDecodeError:
                pass
    return text


class DefaultPlanner:
    """The default ``plan`` harness: one planner-model call per draft, whose reply is one
    JSON object.

    The call is recorded on the run as ``harness.model.called``/``harness.model.responded``
    without a ``stepPath`` (planning is not a step; its tokens count in the run's total),
    with occurrence ids ``model:planner:{revision}:1``/``model-end:planner:{revision}:1``
    (the revision is ``ctx.recorder.attempt``). A reply already recorded under that id is
    reused instead of calling the model again.
    """

    harness_id = DEFAULT_HARNESS_ID

    def run(self, task: HarnessTask, ctx: HarnessContext) -> HarnessResult:
        if not isinstance(task, PlanTask):
            return DelegateToDefault()
        system = "\n\n".join(
            part
            for part in (_PLANNER_ROLE, ctx.system, _skills_text(ctx), task.system_message)
            if part
        )
        user = canonical_json(
            {
                "goal": task.workflow_snapshot.get("description") or task.workflow_snapshot["id"],
                "workflow": task.workflow_snapshot,
                "input": task.input,
            }
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        recorder = ctx.recorder
        called = f"model:planner:{recorder.attempt}:1"
        ended = f"model-end:planner:{recorder.attempt}:1"
        for event in recorder.world.list_events(recorder.run_id):
            if event.occurrence_id == ended and event.type == "harness.model.responded":
                text = event.payload.get("response", {}).get("text")
                return PlanResult(lwir=_parse_reply(text if isinstance(text, str) else ""))
        return PlanResult(lwir=_parse_reply(_call_model(ctx, messages, called, ended)))


def _call_model(
    ctx: HarnessContext, messages: list[dict[str, Any]], called: str, ended: str
) -> str:
    from little_dist.harness.model_calls import import_litellm, usage_from_response

    world, run_id, model = ctx.recorder.world, ctx.run_id, ctx.model
    base = {"turn": 1, "callId": called, "role": "planner", "attempt": ctx.recorder.attempt}
    request = {"model": model.litellm_model, "messages": messages, "tools": []}
    world.append(
        run_id,
        EventInput(
            type="harness.model.called",
            occurrence_id=called,
            payload={**base, "promptHash": sha256_digest(request), "request": request},
        ),
    )
    started = time.monotonic()
    try:
        response = import_litellm().completion(
            model=model.litellm_model,
            messages=messages,
            metadata={"little": {"stepPath": "planner", "runId": run_id}},
            **dict(model.settings),
        )
    except Exception as error:
        world.append(
            run_id,
            EventInput(
                type="harness.model.failed",
                occurrence_id=ended,
                payload={
                    **base,
                    "error": {"name": type(error).__name__, "message": str(error) or "error"},
                    "durationMs": round((time.monotonic() - started) * 1000),
                },
            ),
        )
        raise PlannerError(f"planner model {model.litellm_model!r} failed: {error}") from error
    text = response.choices[0].message.content or ""
    world.append(
        run_id,
        EventInput(
            type="harness.model.responded",
            occurrence_id=ended,
            payload={
                **base,
                "model": model.identity(),
                "response": {"text": text, "usage": usage_from_response(response)},
                "durationMs": round((time.monotonic() - started) * 1000),
            },
        ),
    )
    return str(text)


def _skills_text(ctx: HarnessContext) -> str:
    if not ctx.skills:
        return ""
    parts = ["Skills:"]
    for item in ctx.skills:
        parts.append(
            f"## {item.name}\n{item.description}" + (f"\n{item.body}" if item.body else "")
        )
    return "\n".join(parts)


@dataclass(frozen=True)
class _FixedPlan:
    """The ``plan`` harness of a workflow defined with ``plan=``: that LWIR, no model."""

    lwir: Mapping[str, Any]
    harness_id: str = "fixedPlan@1.0.0"

    def run(self, task: HarnessTask, ctx: HarnessContext) -> HarnessResult:
        return PlanResult(lwir=json.loads(canonical_json(dict(self.lwir))))


# -- reuse ----------------------------------------------------------------------------------


def _adaptive_array_paths(lwir: Mapping[str, Any]) -> list[tuple[tuple[str, ...], int]]:
    """``(input path, maxBranches)`` of each top-level parallel step fanning out over an
    input array (``items: "{{ input.candidates }}"``): those arrays may change length."""
    found: list[tuple[tuple[str, ...], int]] = []
    for step in lwir.get("steps", []):
        if not isinstance(step, Mapping) or step.get("uses") != "parallel":
            continue
        config = step.get("with")
        items = config.get("items") if isinstance(config, Mapping) else None
        match = _ITEMS_FROM_INPUT.match(items) if isinstance(items, str) else None
        if match is None:
            continue
        branches = config.get("maxBranches") if isinstance(config, Mapping) else None
        limit = branches if isinstance(branches, int) and not isinstance(branches, bool) else 0
        path = tuple(part for part in match.group(1).split(".") if part)
        found.append((path, limit))
    return found


def input_structure_compatible(
    planned: Mapping[str, Any],
    run_input: Any,
    adaptive: Sequence[tuple[tuple[str, ...], int]] = (),
) -> bool:
    """Upstream's ``structure`` reuse rule: ``run_input`` has the planned input's structure;
    arrays at an adaptive path may hold any number of items up to its ``maxBranches``."""
    run_structure = concrete_input_structure(run_input)
    if not adaptive:
        return canonical_json(run_structure) == canonical_json(planned)
    return _compatible(planned, run_structure, run_input, adaptive, ())


def _compatible(
    planned: Mapping[str, Any],
    run: Mapping[str, Any],
    run_input: Any,
    adaptive: Sequence[tuple[tuple[str, ...], int]],
    path: tuple[str, ...],
) -> bool:
    if planned.get("kind") != run.get("kind"):
        return False
    kind = planned["kind"]
    if kind == "array":
        same_elements = canonical_json(planned["elements"]) == canonical_json(run["elements"])
        limits = [limit for at, limit in adaptive if at == path]
        if limits:
            length = _array_length_at(run_input, path)
            return length is not None and length <= min(limits) and same_elements
        return planned["length"] == run["length"] and same_elements
    if kind == "object":
        planned_fields, run_fields = planned["fields"], run["fields"]
        if len(planned_fields) != len(run_fields):
            return False
        return all(
            planned_key == run_key
            and _compatible(planned_value, run_value, run_input, adaptive, (*path, planned_key))
            for (planned_key, planned_value), (run_key, run_value) in zip(
                planned_fields, run_fields, strict=True
            )
        )
    return True


def _array_length_at(value: Any, path: tuple[str, ...]) -> int | None:
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return len(value) if isinstance(value, list) else None


def _reuse_candidate(world: World, definition_hash: str, run_input: Any) -> WorkflowVersion | None:
    for version_id in reversed(world.indexed_versions(definition_hash)):
        try:
            version = WorkflowVersion.from_json(world.get_version(version_id))
        except LittleError:
            continue  # unreadable or altered: never reuse it
        lock = version.lock
        if lock.get("workflowDefinitionHash") != definition_hash:
            continue
        planned = lock.get("plannedInputStructure")
        if isinstance(planned, Mapping) and input_structure_compatible(
            planned, run_input, _adaptive_array_paths(version.lwir)
        ):
            return version
    return None


def _reuse_brief(version: WorkflowVersion, definition: WorkflowDefinition) -> str:
    steps = [
        str(step.get("id")) for step in version.lwir.get("steps", []) if isinstance(step, Mapping)
    ]
    return "\n".join(
        [
            "# Planner Reuse Candidate",
            "",
            f"Candidate WorkflowVersion: {version.id}",
            f"Workflow ID: {definition.id}",
            f"Definition hash: {version.lock.get('workflowDefinitionHash')}",
            f"Steps: {' -> '.join(steps) or '(none)'}",
        ]
    )


# -- the session ----------------------------------------------------------------------------


class _Session:
    """One planning session on one run: appends its events with occurrence ids."""

    def __init__(self, world: World, run_id: str) -> None:
        self.world = world
        self.run_id = run_id
        self.recorded: dict[str, Event] = {
            event.occurrence_id: event
            for event in world.list_events(run_id)
            if event.occurrence_id is not None
        }

    def append(self, event_type: str, occurrence_id: str, payload: dict[str, Any]) -> Event:
        event = self.world.append(
            self.run_id, EventInput(type=event_type, occurrence_id=occurrence_id, payload=payload)
        )
        self.recorded[occurrence_id] = event
        return event


def _recorded_version_id(events: Sequence[Event]) -> str | None:
    for event in events:
        payload = event.payload
        if event.type == "PlannerReuseDecisionRecorded":
            found = payload.get("resultingWorkflowVersionId")
        elif event.type in (
            "WorkflowValidationSucceeded",
            "WorkflowVersionRegistered",
            "RunStarted",
        ):
            found = payload.get("workflowVersionId")
        else:
            continue
        if isinstance(found, str) and found != _UNCOMPILED:
            return found
    return None


def _planner_harness(
    definition: WorkflowDefinition, capabilities: Capabilities
) -> tuple[Harness, Harness]:
    """``(harness, default)`` for the plan task: a custom planner harness if configured."""
    default: Harness = (
        _FixedPlan(definition.plan) if definition.plan is not None else DefaultPlanner()
    )
    custom = capabilities.harness_for("planner")
    return (custom if custom is not None and definition.plan is None else default), default


def resolve_version(
    world: World,
    run_id: str,
    definition: WorkflowDefinition,
    run_input: Any,
    *,
    capabilities: Capabilities,
) -> WorkflowVersion | None:
    """The version ``run_id`` runs: recorded, reused, or planned now (see the module doc).

    Returns ``None`` when planning failed; the run then has ``RunFailed`` recorded with
    causeCode ``planner_validation_exhausted``.
    """
    events = world.list_events(run_id)
    recorded = _recorded_version_id(events)
    if recorded is not None:
        return WorkflowVersion.from_json(world.get_version(recorded))
    request = orchestration_request(definition, run_input)
    session = _Session(world, run_id)
    locks = request.body["locks"]
    session.append(
        "OrchestrationRequested",
        "planner:requested",
        {
            "requestId": request.request_id,
            "requestHash": locks["requestHash"],
            "inputHash": locks["inputHash"],
            "workflowDefinitionHash": locks["workflowDefinitionHash"],
            "inputSchemaHash": locks["inputSchemaHash"],
            "requestedOutputHash": locks["requestedOutputHash"],
            "capabilityManifestHash": request.compile_request.capability_manifest_hash,
            "workflowId": definition.id,
            **({"description": definition.description} if definition.description else {}),
            "maxWorkflowRevisions": definition.max_revisions,
        },
    )
    definition_hash = locks["workflowDefinitionHash"]
    # A fixed plan is not part of the definition hash, so its versions are never reused.
    if definition.plan is None and "planner:start:1" not in session.recorded:
        candidate = _reuse_candidate(world, definition_hash, run_input)
        if candidate is not None:
            brief = _reuse_brief(candidate, definition)
            session.append(
                "PlannerReuseDecisionRecorded",
                "planner:reuse",
                {
                    "decisionKind": "reuse_unchanged",
                    "candidateWorkflowVersionId": candidate.id,
                    "rationale": (
                        f"Definition {definition_hash} is unchanged since {candidate.id} was "
                        "planned and this input has the planned input's structure."
                    ),
                    "acknowledgedWarnings": [],
                    "inputHash": locks["inputHash"],
                    "inputStructure": locks["plannedInputStructure"],
                    "candidateBriefHash": sha256_digest(brief),
                    "resultingWorkflowVersionId": candidate.id,
                },
            )
            return candidate
    return _plan(world, session, definition, request, run_input, capabilities)


def _plan(
    world: World,
    session: _Session,
    definition: WorkflowDefinition,
    request: OrchestrationRequest,
    run_input: Any,
    capabilities: Capabilities,
) -> WorkflowVersion | None:
    harness, default = _planner_harness(definition, capabilities)
    revisions = 1 if definition.plan is not None else definition.max_revisions
    snapshot = {
        "id": definition.id,
        "description": definition.description,
        "inputSchema": definition.input_schema,
        "outputSchema": request.requested_output_schema,
        "workflowDefinitionHash": request.body["locks"]["workflowDefinitionHash"],
    }
    context = planning_context(request, definition)
    base_ctx = HarnessContext(
        run_id=session.run_id,
        role="planner",
        model=definition.planner_model.resolved(definition.planner_slot_id),
        recorder=EventRecorder(world, session.run_id, "planner", 1),
        memo=Memo.empty(),
        scope=HarnessScope(run_id=session.run_id, role="planner"),
        system=definition.system,
        skills=definition.skills,
    )
    note: str | None = None
    last_findings: list[Finding] = []
    for revision in range(1, revisions + 1):
        session.append(
            "PlannerStarted",
            f"planner:start:{revision}",
            {"requestId": request.request_id, "revision": revision, "repair": note is not None},
        )
        drafted = session.recorded.get(f"planner:draft:{revision}")
        if drafted is not None and "lwir" in drafted.payload:
            lwir: Any = drafted.payload["lwir"]
        else:
            task = PlanTask(
                workflow_snapshot=snapshot,
                input=run_input,
                system_message=context + (note or ""),
            )
            # One recorder per revision: its attempt number is the revision.
            recorder = EventRecorder(world, session.run_id, "planner", revision)
            ctx = dataclasses.replace(base_ctx, recorder=recorder)
            result = harness.run(task, ctx)
            if isinstance(result, DelegateToDefault):
                result = default.run(task, ctx)
            if not isinstance(result, PlanResult):
                raise PlannerError(
                    f"planner harness returned {getattr(result, 'kind', result)!r} for a plan task"
                )
            lwir = result.lwir
        findings = _draft_findings(lwir, request)
        version = _record_draft(session, request, revision, lwir, findings)
        if version is not None:
            return _register(world, session, definition, request, revision, lwir, version)
        note = _repair_note(lwir, findings)
        last_findings = findings
    floor = None if definition.plan is not None else synthesize_simple_lwir(request)
    if floor is not None and not _draft_findings(floor, request):
        revision = revisions + 1
        version = _record_draft(session, request, revision, floor, [])
        if version is not None:
            return _register(world, session, definition, request, revision, floor, version)
    _fail(session, definition, revisions, last_findings)
    return None


def _record_draft(
    session: _Session,
    request: OrchestrationRequest,
    revision: int,
    lwir: Any,
    findings: list[Finding],
) -> WorkflowVersion | None:
    try:
        lwir_hash = sha256_digest(lwir)
    except InvalidInputError:
        lwir_hash = sha256_digest(repr(lwir))
    payload: dict[str, Any] = {
        "requestId": request.request_id,
        "revision": revision,
        "valid": not findings,
        "lwirHash": lwir_hash,
    }
    if isinstance(lwir, Mapping):
        payload["lwir"] = json.loads(canonical_json(dict(lwir)))
    session.append("PlannerDraftedWorkflow", f"planner:draft:{revision}", payload)
    if findings:
        session.append(
            "WorkflowValidationFailed",
            f"planner:invalid:{revision}",
            {
                **payload,
                "findings": [
                    {"severity": f.severity, "code": f.code, "path": f.path, "message": f.message}
                    for f in findings
                ],
            },
        )
        return None
    return compile_lwir(lwir, request=request.compile_request)


def _register(
    world: World,
    session: _Session,
    definition: WorkflowDefinition,
    request: OrchestrationRequest,
    revision: int,
    lwir: Any,
    version: WorkflowVersion,
) -> WorkflowVersion:
    # Stored before the event that names it, so a reader never finds a dangling id.
    world.register_version(version.id, version.to_json())
    session.append(
        "WorkflowValidationSucceeded",
        "planner:valid",
        {
            "requestId": request.request_id,
            "revision": revision,
            "lwirHash": sha256_digest(lwir),
            "workflowVersionId": version.id,
            "lwirVersionId": version.lwir_version_id,
            "validationHash": version.validation_hash,
        },
    )
    if definition.plan is None:
        world.index_version(request.body["locks"]["workflowDefinitionHash"], version.id)
    return version


def _fail(
    session: _Session, definition: WorkflowDefinition, revisions: int, findings: list[Finding]
) -> None:
    detail = "; ".join(f"{f.path}: {f.message} ({f.code})" for f in findings[:5])
    message = (
        f"Planner did not produce valid LWIR for {definition.id!r} within {revisions} "
        f"revision(s)" + (f": {detail}" if detail else ".")
    )
    session.append("RunStarted", "run-start", {"workflowVersionId": _UNCOMPILED})
    session.append(
        "RunFailed",
        "run-end",
        {
            "workflowVersionId": _UNCOMPILED,
            "error": {
                "name": "WorkflowCompileError",
                "message": message,
                "causeCode": "planner_validation_exhausted",
                "retriable": False,
            },
        },
    )
