"""What an LWIR is compiled *for*: the request half of the lock.

A :class:`CompileRequest` holds every lock field that does not come from the LWIR itself —
the request id and hash, the input and its structure, the definition, the requested output,
the capability manifest, model slots and tools. The planner path (a later layer) builds one
from a workflow definition; :meth:`CompileRequest.for_direct_lwir` builds the one upstream's
CLI uses for a hand-written LWIR file, so ``little run wf.json --input in.json`` locks to the
same workflow version id here as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from little_dist.canonical import sha256_digest
from little_dist.compiler.lock import compiler_validation_hash, concrete_input_structure

__all__ = ["DIRECT_LWIR_SOURCE", "DIRECT_LWIR_STEP_TYPES", "CompileRequest"]

DIRECT_LWIR_SOURCE: Final = "little-cli.direct-lwir"
#: Upstream's CLI lists four step types in the direct-LWIR capability manifest (no
#: ``decision``); it is hashed, so it is kept exactly as upstream has it.
DIRECT_LWIR_STEP_TYPES: Final = ("ai.generate", "tool.call", "code.run", "parallel")


@dataclass(frozen=True, kw_only=True)
class CompileRequest:
    """The request half of a WorkflowVersion lock (upstream's field names in the lock).

    Optional fields (``input_binding``, ``planning_definition_snapshot`` and its hash) are
    left out of the lock, not written as null, when ``None``.
    """

    request_id: str
    request_hash: str
    input_hash: str
    planned_input_structure: Mapping[str, Any]
    planned_input_structure_hash: str
    workflow_definition_hash: str
    input_schema_hash: str
    requested_output: Mapping[str, Any]
    requested_output_hash: str
    capability_manifest: Mapping[str, Any]
    capability_manifest_hash: str
    model_slots: tuple[Any, ...] = ()
    tools: tuple[Any, ...] = ()
    input_binding: Literal["required"] | None = "required"
    planning_definition_snapshot: Any = field(default=None)
    planning_definition_snapshot_hash: str | None = None

    @classmethod
    def for_direct_lwir(cls, lwir: Mapping[str, Any], lwir_hash: str, input: Any) -> CompileRequest:
        """Upstream's lock recipe for an LWIR given directly (no planner, no definition).

        The request is derived from the LWIR's hash and the run's ``input``: the definition
        hash stands in for "this LWIR, from the CLI", the requested output is ``json`` with
        the LWIR's output schema, and the capability manifest grants no tools or models
        beyond what the LWIR itself declares.
        """
        input_hash = sha256_digest(input)
        structure = concrete_input_structure(input)
        request_id = "orq_cli_" + lwir_hash[7:23]
        workflow_definition_hash = sha256_digest(
            {"source": DIRECT_LWIR_SOURCE, "lwirHash": lwir_hash}
        )
        input_schema_hash = sha256_digest(_get(_get(lwir, "input"), "schema"))
        requested_output = {"mode": "json", "schema": _get(_get(lwir, "output"), "schema")}
        requested_output_hash = sha256_digest(requested_output)
        permissions = _get(lwir, "permissions")
        capability_manifest = {
            "stepTypes": list(DIRECT_LWIR_STEP_TYPES),
            "toolSelection": "explicit_only",
            "tools": [],
            "models": [],
            "modelSlots": [],
            "secrets": _get(permissions, "secrets", []),
            "network": {"default": "deny", "allow": _get(permissions, "network", [])},
        }
        capability_manifest_hash = sha256_digest(capability_manifest)
        request_hash = sha256_digest(
            {
                "source": DIRECT_LWIR_SOURCE,
                "requestId": request_id,
                "lwirHash": lwir_hash,
                "inputHash": input_hash,
                "workflowDefinitionHash": workflow_definition_hash,
                "inputSchemaHash": input_schema_hash,
                "requestedOutputHash": requested_output_hash,
                "capabilityManifestHash": capability_manifest_hash,
            }
        )
        return cls(
            request_id=request_id,
            request_hash=request_hash,
            input_hash=input_hash,
            planned_input_structure=structure,
            planned_input_structure_hash=sha256_digest(structure),
            workflow_definition_hash=workflow_definition_hash,
            input_schema_hash=input_schema_hash,
            requested_output=requested_output,
            requested_output_hash=requested_output_hash,
            capability_manifest=capability_manifest,
            capability_manifest_hash=capability_manifest_hash,
        )

    def validation_hash(self, *, lwir_version_id: str, lwir_hash: str) -> str:
        """The compiler's validation hash of an LWIR bound to this request."""
        return compiler_validation_hash(
            lwir_version_id=lwir_version_id,
            lwir_hash=lwir_hash,
            request_id=self.request_id,
            request_hash=self.request_hash,
            input_hash=self.input_hash,
            planned_input_structure_hash=self.planned_input_structure_hash,
            workflow_definition_hash=self.workflow_definition_hash,
            input_schema_hash=self.input_schema_hash,
            requested_output_hash=self.requested_output_hash,
            capability_manifest_hash=self.capability_manifest_hash,
        )

    def lock_seed(
        self, *, lwir_version_id: str, lwir_hash: str, validation_hash: str
    ) -> dict[str, Any]:
        """The lock seed for this request and an LWIR, in upstream's key order."""
        seed: dict[str, Any] = {
            "lwirVersionId": lwir_version_id,
            "lwirHash": lwir_hash,
            "requestId": self.request_id,
            "requestHash": self.request_hash,
            "inputHash": self.input_hash,
            "plannedInputStructure": self.planned_input_structure,
            "plannedInputStructureHash": self.planned_input_structure_hash,
        }
        if self.input_binding is not None:
            seed["inputBinding"] = self.input_binding
        seed["workflowDefinitionHash"] = self.workflow_definition_hash
        if self.planning_definition_snapshot is not None:
            seed["planningDefinitionSnapshot"] = self.planning_definition_snapshot
        if self.planning_definition_snapshot_hash is not None:
            seed["planningDefinitionSnapshotHash"] = self.planning_definition_snapshot_hash
        seed.update(
            {
                "inputSchemaHash": self.input_schema_hash,
                "requestedOutput": self.requested_output,
                "requestedOutputHash": self.requested_output_hash,
                "capabilityManifest": self.capability_manifest,
                "capabilityManifestHash": self.capability_manifest_hash,
                "modelSlots": list(self.model_slots),
                "tools": list(self.tools),
                "validationHash": validation_hash,
            }
        )
        return seed


def _get(value: Any, key: str, default: Any = None) -> Any:
    # `value?.key ?? default` on parsed JSON: a missing key and a null both give the default.
    found = value.get(key) if isinstance(value, Mapping) else None
    return default if found is None else found
