"""The compiler's lock hash chain: validation hash, lock seed, compiled version identity.

A compiled WorkflowVersion is identified by more than its LWIR: the lock records what the
LWIR was compiled *for* (the request, the input, the definition, the capabilities), and the
workflow version hash covers both. Every function here is pure and reproduces upstream's
``compiler-lock.ts`` byte for byte, so a hash computed here equals upstream's::

    lwirHash            = sha256(canonical LWIR)                 -> lwirVersionId  wfver_...
    validationHash      = sha256({algorithm: compiler-binding, lwir ids, request hashes})
    lock seed           = {lwir ids, request locks..., validationHash}
    workflowVersionHash = sha256({algorithm: compiled-version, canonicalizer, lwir ids,
                                  lock: seed})                   -> workflowVersionId wfver_...
    lock                = {workflowVersionId, workflowVersionHash, **seed}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.ids import workflow_version_id_for

__all__ = [
    "CANONICALIZER",
    "COMPILED_WORKFLOW_VERSION_ALGORITHM",
    "COMPILER_VALIDATION_ALGORITHM",
    "INPUT_BOUND_LOCK_KEYS",
    "LOCK_SEED_KEYS",
    "SHARED_LOCK_KEYS",
    "compiled_version_identity",
    "compiler_validation_document",
    "compiler_validation_hash",
    "concrete_input_structure",
    "lock_seed_from",
    "lwir_version_id_for_hash",
    "shared_part_text",
    "version_identity_document",
    "workflow_version_id_for_hash",
]

CANONICALIZER: Final = "little-workflow-canonical-json@alpha"
COMPILER_VALIDATION_ALGORITHM: Final = "little-workflow-compiler-binding@v0.1-alpha"
COMPILED_WORKFLOW_VERSION_ALGORITHM: Final = "little-workflow-compiled-version@v0.1-alpha"

#: The lock seed's keys in upstream's order. ``inputBinding``, ``planningDefinitionSnapshot``
#: and ``planningDefinitionSnapshotHash`` are optional: absent, not null, when unset.
LOCK_SEED_KEYS: Final = (
    "lwirVersionId",
    "lwirHash",
    "requestId",
    "requestHash",
    "inputHash",
    "plannedInputStructure",
    "plannedInputStructureHash",
    "inputBinding",
    "workflowDefinitionHash",
    "planningDefinitionSnapshot",
    "planningDefinitionSnapshotHash",
    "inputSchemaHash",
    "requestedOutput",
    "requestedOutputHash",
    "capabilityManifest",
    "capabilityManifestHash",
    "modelSlots",
    "tools",
    "validationHash",
)
_OPTIONAL_SEED_KEYS: Final = frozenset(
    {"inputBinding", "planningDefinitionSnapshot", "planningDefinitionSnapshotHash"}
)


def lwir_version_id_for_hash(lwir_hash: str) -> str:
    """``wfver_`` + 16 hex of an LWIR hash: the id of the uncompiled LWIR document."""
    return workflow_version_id_for(lwir_hash)


def workflow_version_id_for_hash(workflow_version_hash: str) -> str:
    """``wfver_`` + 16 hex of a compiled workflow version hash."""
    return workflow_version_id_for(workflow_version_hash)


def compiler_validation_hash(
    *,
    lwir_version_id: str,
    lwir_hash: str,
    request_id: str,
    request_hash: str,
    input_hash: str,
    planned_input_structure_hash: str,
    workflow_definition_hash: str,
    input_schema_hash: str,
    requested_output_hash: str,
    capability_manifest_hash: str,
    canonicalizer: str = CANONICALIZER,
) -> str:
    """The digest that records "this LWIR passed validation bound to this request"."""
    return sha256_digest(
        compiler_validation_document(
            lwir_version_id=lwir_version_id,
            lwir_hash=lwir_hash,
            request_id=request_id,
            request_hash=request_hash,
            input_hash=input_hash,
            planned_input_structure_hash=planned_input_structure_hash,
            workflow_definition_hash=workflow_definition_hash,
            input_schema_hash=input_schema_hash,
            requested_output_hash=requested_output_hash,
            capability_manifest_hash=capability_manifest_hash,
            canonicalizer=canonicalizer,
        )
    )


def compiler_validation_document(
    *,
    lwir_version_id: str,
    lwir_hash: str,
    request_id: str,
    request_hash: str,
    input_hash: str,
    planned_input_structure_hash: str,
    workflow_definition_hash: str,
    input_schema_hash: str,
    requested_output_hash: str,
    capability_manifest_hash: str,
    canonicalizer: str = CANONICALIZER,
) -> dict[str, Any]:
    """What :func:`compiler_validation_hash` is the digest of."""
    return {
        "algorithm": COMPILER_VALIDATION_ALGORITHM,
        "valid": True,
        "findings": [],
        "lwirVersionId": lwir_version_id,
        "lwirHash": lwir_hash,
        "canonicalizer": canonicalizer,
        "requestId": request_id,
        "requestHash": request_hash,
        "inputHash": input_hash,
        "plannedInputStructureHash": planned_input_structure_hash,
        "requestBinding": {
            "requestHash": request_hash,
            "inputHash": input_hash,
            "plannedInputStructureHash": planned_input_structure_hash,
            "workflowDefinitionHash": workflow_definition_hash,
            "inputSchemaHash": input_schema_hash,
            "requestedOutputHash": requested_output_hash,
            "capabilityManifestHash": capability_manifest_hash,
        },
    }


def compiled_version_identity(
    lock_seed: Mapping[str, Any],
    *,
    lwir_version_id: str,
    lwir_hash: str,
    canonicalizer: str = CANONICALIZER,
) -> tuple[str, str]:
    """``(workflowVersionHash, workflowVersionId)`` of an LWIR compiled under ``lock_seed``."""
    workflow_version_hash = sha256_digest(
        version_identity_document(
            lock_seed,
            lwir_version_id=lwir_version_id,
            lwir_hash=lwir_hash,
            canonicalizer=canonicalizer,
        )
    )
    return workflow_version_hash, workflow_version_id_for_hash(workflow_version_hash)


def version_identity_document(
    lock_seed: Mapping[str, Any],
    *,
    lwir_version_id: str,
    lwir_hash: str,
    canonicalizer: str = CANONICALIZER,
) -> dict[str, Any]:
    """What a version's hash is the digest of (:func:`compiled_version_identity`)."""
    return {
        "algorithm": COMPILED_WORKFLOW_VERSION_ALGORITHM,
        "canonicalizer": canonicalizer,
        "lwirVersionId": lwir_version_id,
        "lwirHash": lwir_hash,
        "lock": dict(lock_seed),
    }


def lock_seed_from(lock: Mapping[str, Any]) -> dict[str, Any]:
    """The seed inside a lock envelope: every seed key, in order, minus the version ids.

    Optional keys that are absent stay absent; a required key that is missing raises
    ``KeyError`` naming it.
    """
    seed: dict[str, Any] = {}
    for key in LOCK_SEED_KEYS:
        if key in lock:
            seed[key] = lock[key]
        elif key not in _OPTIONAL_SEED_KEYS:
            raise KeyError(key)
    return seed


def concrete_input_structure(value: Any) -> dict[str, Any]:
    """The shape of an input without its values, as the lock's ``plannedInputStructure``.

    Objects list their fields sorted by key (UTF-16 code units, as JavaScript's ``<``);
    arrays record an ``empty``/``single``/``many`` length and their distinct element shapes,
    sorted by canonical JSON. Anything that is not JSON counts as ``null``, as upstream's
    ``typeof`` switch does (the input's own hash rejects such values first).
    """
    if value is None:
        return {"kind": "null"}
    if isinstance(value, bool):
        return {"kind": "boolean"}
    if isinstance(value, str):
        return {"kind": "string"}
    if isinstance(value, int | float):
        return {"kind": "number"}
    if isinstance(value, list | tuple):
        unique: dict[str, dict[str, Any]] = {}
        for entry in value:
            structure = concrete_input_structure(entry)
            unique.setdefault(canonical_json(structure), structure)
        return {
            "kind": "array",
            "length": "empty" if not value else "single" if len(value) == 1 else "many",
            "elements": [unique[key] for key in sorted(unique, key=_utf16)],
        }
    if isinstance(value, dict):
        keys = sorted((key for key in value if isinstance(key, str)), key=_utf16)
        return {
            "kind": "object",
            "fields": [[key, concrete_input_structure(value[key])] for key in keys],
        }
    return {"kind": "null"}


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


#: Lock fields that depend on the run's input: a fleet keeps them with the run (the version's
#: binding, :mod:`little_dist.fleet.versions`); every other field of the lock is the same for
#: every input and goes to the version's shared part.
INPUT_BOUND_LOCK_KEYS: Final = frozenset(
    {
        "requestId",
        "requestHash",
        "inputHash",
        "plannedInputStructure",
        "plannedInputStructureHash",
        "inputBinding",
        "validationHash",
    }
)
#: Lock fields that do not depend on the run's input: they go to the shared part.
SHARED_LOCK_KEYS: Final = frozenset(LOCK_SEED_KEYS) - INPUT_BOUND_LOCK_KEYS


def shared_part_text(
    *,
    canonical: str,
    lwir_hash: str,
    lwir_version_id: str,
    canonicalizer: str,
    lock: Mapping[str, Any],
) -> str:
    """The canonical JSON of a version's shared part: its LWIR and the lock's fields in
    :data:`SHARED_LOCK_KEYS` (``lock``: the lock or its seed; other fields are left out)."""
    return canonical_json(
        {
            "canonicalizer": canonicalizer,
            "canonicalJson": canonical,
            "lwirHash": lwir_hash,
            "lwirVersionId": lwir_version_id,
            "lock": {key: value for key, value in lock.items() if key in SHARED_LOCK_KEYS},
        }
    )
