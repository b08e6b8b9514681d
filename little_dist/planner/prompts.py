"""What the planner is told: the planning context, the repair note after an invalid
draft, and upstream's deterministic single-step floor (also shown as a reference LWIR)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from little_dist.canonical import canonical_json
from little_dist.lwir import API_VERSION, KIND, Finding
from little_dist.planner.request import OrchestrationRequest, step_output

if TYPE_CHECKING:
    from little_dist.authoring import WorkflowDefinition

__all__ = ["outer_loop_text", "planning_context", "repair_note", "synthesize_simple_lwir"]


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
                "output": step_output(request.body["requestedOutput"]),
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


def outer_loop_text(request: OrchestrationRequest) -> str:
    """What the planner is told of its outer-loop cycle: which cycle of how many, what the
    earlier cycles produced, and the supervisor's note (upstream's ``messages.system``,
    with its separator); ``""`` outside an outer loop."""
    loop = request.body.get("outerLoop")
    lines: list[str] = []
    if isinstance(loop, dict):
        final = " (the final cycle)" if loop.get("isFinalCycle") else ""
        lines.append("")
        lines.append(
            f"Outer loop: this is cycle {loop.get('cycleNumber')} of at most "
            f"{loop.get('maxCycles')}{final}. A supervisor reviews each cycle's output."
        )
        for prior in loop.get("priorCycles") or []:
            lines.append(
                f"- cycle {prior.get('cycleNumber')} ({prior.get('status')}): "
                f"output {canonical_json(prior.get('output'))}"
                + (f"; note: {prior['summary']}" if prior.get("summary") else "")
            )
    system = request.body["messages"].get("system")
    text = "\n".join(lines)
    return text + system if isinstance(system, str) else text


def repair_note(previous: Any, findings: Sequence[Finding]) -> str:
    lines = [
        "",
        "Your previous draft was invalid. Fix every finding below and reply with the "
        "whole corrected LWIR:",
    ]
    lines += [f"- {f.severity} {f.code} at {f.path}: {f.message}" for f in findings]
    lines.append("Previous draft:")
    lines.append(previous if isinstance(previous, str) else canonical_json(previous))
    return "\n".join(lines)
