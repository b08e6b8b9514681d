"""The compiler: ids.json vectors, the direct-LWIR lock recipe, determinism and sensitivity."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler import (
    CANONICALIZER,
    CompileRequest,
    LwirInvalidError,
    ModelSlotSnapshot,
    PlannerConfigSnapshot,
    ToolIdentitySnapshot,
    WorkerConfigSnapshot,
    WorkflowDefinitionSnapshot,
    WorkflowVersion,
    WorkflowVersionMismatchError,
    code_file_digest,
    compile_lwir,
    compiled_version_identity,
    compiler_validation_hash,
    concrete_input_structure,
    global_tools_hash,
    lwir_version_id_for_hash,
    workflow_version_id_for_hash,
)
from little_dist.compiler.lock import lock_seed_from
from little_dist.errors import InvalidInputError
from little_dist.lwir import LwirValidationError
from tests.conftest import load_vectors

IDS = load_vectors("ids")
EXAMPLES = IDS["examples"]
WFVER = re.compile(next(p["regex"] for p in IDS["patterns"] if p["name"] == "workflow_version_id"))
LWIR_VECTORS = load_vectors("lwir_validation")
VALID_LWIRS = [v for v in LWIR_VECTORS if v["match"] == "none"]
INVALID_LWIRS = [v for v in LWIR_VECTORS if not v["valid"]]
BASE_LWIR: dict[str, Any] = EXAMPLES["workflow_version"]["lwir"]
EXAMPLE_FILES = sorted((Path(__file__).parent.parent / "examples" / "lwir").glob("*.json"))
TICKET_INPUT = {"ticketId": "T-1042", "transcript": "The export button does nothing."}


# --- ids.json vectors ---------------------------------------------------------------------


def test_workflow_version_vector() -> None:
    example = EXAMPLES["workflow_version"]
    version = compile_lwir(example["lwir"], input=TICKET_INPUT)
    assert version.canonical_json == example["canonical_json"]
    assert version.lwir_hash == example["hash"]
    assert version.lwir_version_id == example["id"]
    assert version.canonicalizer == example["canonicalizer"] == CANONICALIZER
    assert WFVER.match(version.id)


def test_validation_hash_vector() -> None:
    vector = EXAMPLES["compiler_lock"]["validation_hash"]
    given = vector["input"]
    assert sha256_digest(vector["hashed_object"]) == vector["expected"]
    assert (
        compiler_validation_hash(
            canonicalizer=given["canonicalizer"],
            lwir_version_id=given["lwirVersionId"],
            lwir_hash=given["lwirHash"],
            request_id=given["requestId"],
            request_hash=given["requestHash"],
            input_hash=given["inputHash"],
            planned_input_structure_hash=given["plannedInputStructureHash"],
            workflow_definition_hash=given["workflowDefinitionHash"],
            input_schema_hash=given["inputSchemaHash"],
            requested_output_hash=given["requestedOutputHash"],
            capability_manifest_hash=given["capabilityManifestHash"],
        )
        == vector["expected"]
    )


def test_compiled_version_vector() -> None:
    vector = EXAMPLES["compiler_lock"]["compiled_version"]
    seed = vector["lock_seed"]
    assert sha256_digest(vector["hashed_object"]) == vector["workflowVersionHash"]
    assert compiled_version_identity(
        seed, lwir_version_id=seed["lwirVersionId"], lwir_hash=seed["lwirHash"]
    ) == (vector["workflowVersionHash"], vector["workflowVersionId"])
    assert (
        workflow_version_id_for_hash(vector["workflowVersionHash"]) == vector["workflowVersionId"]
    )
    # The seed read back out of its envelope is the same seed, in the same order.
    envelope = {
        "workflowVersionId": vector["workflowVersionId"],
        "workflowVersionHash": vector["workflowVersionHash"],
        **seed,
    }
    assert list(lock_seed_from(envelope).items()) == list(seed.items())


def test_lwir_version_id_for_hash_vector() -> None:
    vector = EXAMPLES["compiler_lock"]["lwir_version_id_for_hash"]
    assert lwir_version_id_for_hash(vector["lwirHash"]) == vector["expected"]


def test_code_file_digest_vector() -> None:
    vector = EXAMPLES["code_file_digest"]
    assert code_file_digest(vector["content"]) == vector["sha256"]
    # Raw text, not canonical JSON: the JSON string of the content hashes differently.
    assert code_file_digest(vector["content"]) != sha256_digest(vector["content"])


def test_optional_seed_keys_are_absent_not_null() -> None:
    seed = dict(EXAMPLES["compiler_lock"]["compiled_version"]["lock_seed"])
    del seed["inputBinding"]
    trimmed = lock_seed_from({"workflowVersionId": "x", "workflowVersionHash": "y", **seed})
    assert "inputBinding" not in trimmed
    assert "planningDefinitionSnapshot" not in trimmed
    with pytest.raises(KeyError, match="validationHash"):
        lock_seed_from({k: v for k, v in seed.items() if k != "validationHash"})


# --- the direct-LWIR lock ------------------------------------------------------------------


def test_direct_lwir_lock_relations() -> None:
    version = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    lock = version.lock
    assert lock["lwirHash"] == version.lwir_hash == sha256_digest(BASE_LWIR)
    assert lock["lwirVersionId"] == version.lwir_version_id
    assert version.hash != version.lwir_hash
    assert lock["workflowVersionId"] == version.id
    assert lock["workflowVersionHash"] == version.hash
    assert lock["inputHash"] == version.input_hash == sha256_digest(TICKET_INPUT)
    assert lock["inputBinding"] == "required"
    assert lock["requestId"] == "orq_cli_" + version.lwir_hash[7:23]
    assert lock["workflowDefinitionHash"] == sha256_digest(
        {"source": "little-cli.direct-lwir", "lwirHash": version.lwir_hash}
    )
    assert lock["inputSchemaHash"] == sha256_digest(BASE_LWIR["input"]["schema"])
    assert lock["requestedOutput"] == {"mode": "json", "schema": BASE_LWIR["output"]["schema"]}
    assert lock["requestedOutputHash"] == sha256_digest(lock["requestedOutput"])
    manifest = lock["capabilityManifest"]
    assert manifest["stepTypes"] == ["ai.generate", "tool.call", "code.run", "parallel"]
    assert manifest["toolSelection"] == "explicit_only"
    assert manifest["network"] == {"default": "deny", "allow": []}
    assert lock["capabilityManifestHash"] == sha256_digest(manifest)
    assert lock["plannedInputStructure"] == concrete_input_structure(TICKET_INPUT)
    assert lock["plannedInputStructureHash"] == sha256_digest(lock["plannedInputStructure"])
    assert lock["requestHash"] == sha256_digest(
        {
            "source": "little-cli.direct-lwir",
            "requestId": lock["requestId"],
            "lwirHash": version.lwir_hash,
            "inputHash": lock["inputHash"],
            "workflowDefinitionHash": lock["workflowDefinitionHash"],
            "inputSchemaHash": lock["inputSchemaHash"],
            "requestedOutputHash": lock["requestedOutputHash"],
            "capabilityManifestHash": lock["capabilityManifestHash"],
        }
    )
    assert version.validation_hash == compiler_validation_hash(
        lwir_version_id=version.lwir_version_id,
        lwir_hash=version.lwir_hash,
        request_id=lock["requestId"],
        request_hash=lock["requestHash"],
        input_hash=lock["inputHash"],
        planned_input_structure_hash=lock["plannedInputStructureHash"],
        workflow_definition_hash=lock["workflowDefinitionHash"],
        input_schema_hash=lock["inputSchemaHash"],
        requested_output_hash=lock["requestedOutputHash"],
        capability_manifest_hash=lock["capabilityManifestHash"],
    )
    assert compiled_version_identity(
        lock_seed_from(lock), lwir_version_id=version.lwir_version_id, lwir_hash=version.lwir_hash
    ) == (version.hash, version.id)
    assert list(lock)[:2] == ["workflowVersionId", "workflowVersionHash"]
    assert "planningDefinitionSnapshot" not in lock


def test_direct_lwir_lock_pinned() -> None:
    # Regression pin (computed by this implementation from upstream's recipe): a change here
    # means every stored direct-LWIR version id changes.
    version = compile_lwir(BASE_LWIR, input=None)
    assert version.lock["plannedInputStructure"] == {"kind": "null"}
    assert version.id == "wfver_9d357d99556537d3"


def test_input_changes_version_but_not_lwir_id() -> None:
    first = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    second = compile_lwir(BASE_LWIR, input={**TICKET_INPUT, "ticketId": "T-1043"})
    assert first.lwir_version_id == second.lwir_version_id
    assert first.id != second.id
    assert first.lock["plannedInputStructureHash"] == second.lock["plannedInputStructureHash"]


# --- determinism and sensitivity ------------------------------------------------------------


def _reverse_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reverse_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse_keys(item) for item in value]
    return value


def test_same_lwir_same_hashes() -> None:
    first = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    second = compile_lwir(copy.deepcopy(BASE_LWIR), input=copy.deepcopy(TICKET_INPUT))
    assert (first.id, first.hash, first.lwir_hash, first.validation_hash) == (
        second.id,
        second.hash,
        second.lwir_hash,
        second.validation_hash,
    )
    assert first.to_json() == second.to_json()
    assert first == second and hash(first) == hash(second)


def test_key_order_does_not_change_hashes() -> None:
    reordered = _reverse_keys(BASE_LWIR)
    assert list(reordered) != list(BASE_LWIR)
    first = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    second = compile_lwir(reordered, input=_reverse_keys(TICKET_INPUT))
    assert (first.id, first.lwir_hash) == (second.id, second.lwir_hash)
    assert first.canonical_json == second.canonical_json


def _set(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE_LWIR)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


CHANGES = {
    "description": _set(("metadata", "description"), "Summarize a support ticket."),
    "version": _set(("metadata", "version"), "0.1.1-alpha"),
    "prompt whitespace": _set(
        ("steps", 1, "with", "prompt"),
        "Summarize {{ input.transcript }} for {{ steps.lookup-customer.output.plan }}. ",
    ),
    "model": _set(("steps", 1, "with", "model"), "model.text"),
    "enum order": _set(
        ("output", "schema", "properties", "severity", "enum"), ["high", "medium", "low"]
    ),
    "model permission order": _set(
        ("permissions", "models"), ["model.text", "model.structured", "model.fast"]
    ),
    "tool args": _set(("steps", 0, "with", "args"), {"accountId": "{{ input.transcript }}"}),
    "max visits": _set(("steps", 1, "maxVisits"), 1),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_any_change_changes_the_version_hash(name: str) -> None:
    base = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    changed = compile_lwir(CHANGES[name], input=TICKET_INPUT)
    assert changed.lwir_hash != base.lwir_hash
    assert changed.hash != base.hash
    assert changed.id != base.id


@pytest.mark.parametrize("vector", VALID_LWIRS, ids=lambda v: v["name"])
def test_every_valid_vector_compiles_and_round_trips(vector: dict[str, Any]) -> None:
    version = compile_lwir(vector["lwir"])
    assert WFVER.match(version.id) and WFVER.match(version.lwir_version_id)
    assert version.lwir_hash == sha256_digest(vector["lwir"])
    stored = json.loads(json.dumps(version.to_json()))
    assert WorkflowVersion.from_json(stored) == version


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_examples_compile(path: Path) -> None:
    version = compile_lwir(json.loads(path.read_text(encoding="utf-8")))
    assert WFVER.match(version.id)


# --- invalid input --------------------------------------------------------------------------


@pytest.mark.parametrize("vector", INVALID_LWIRS[:12], ids=lambda v: v["name"])
def test_invalid_lwir_raises_with_findings(vector: dict[str, Any]) -> None:
    with pytest.raises(LwirInvalidError) as caught:
        compile_lwir(vector["lwir"])
    codes = {finding.code for finding in caught.value.findings}
    assert {f["code"] for f in vector["findings"]} <= codes
    assert isinstance(caught.value, InvalidInputError)
    assert isinstance(caught.value, LwirValidationError)


@pytest.mark.parametrize("doc", [None, [], "workflow", {}], ids=repr)
def test_non_documents_raise_lwir_invalid(doc: Any) -> None:
    with pytest.raises(LwirInvalidError) as caught:
        compile_lwir(doc)
    assert caught.value.findings


def test_non_json_input_is_rejected() -> None:
    with pytest.raises(InvalidInputError):
        compile_lwir(BASE_LWIR, input={"when": float("nan")})


# --- stored versions ------------------------------------------------------------------------


def test_to_json_shape() -> None:
    version = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    stored = version.to_json()
    assert list(stored) == [
        "id",
        "hash",
        "canonicalizer",
        "canonicalJson",
        "lwir",
        "lwirVersionId",
        "lwirHash",
        "lock",
    ]
    assert stored["canonicalJson"] == EXAMPLES["workflow_version"]["canonical_json"]
    assert canonical_json(stored["lwir"]) == stored["canonicalJson"]
    # The copy is the caller's: changing it changes nothing in the version.
    stored["lock"]["inputHash"] = "sha256:" + "0" * 64
    stored["lwir"]["metadata"]["name"] = "other"
    assert version.to_json()["lock"]["inputHash"] == sha256_digest(TICKET_INPUT)
    assert version.lwir["metadata"]["name"] == BASE_LWIR["metadata"]["name"]


TAMPERS = {
    "lwir prompt": lambda d: d["lwir"]["steps"][1]["with"].update(prompt="Summarize."),
    "lock input hash": lambda d: d["lock"].update(inputHash="sha256:" + "0" * 64),
    "id": lambda d: d.update(id="wfver_0000000000000000"),
    "lwir hash": lambda d: d.update(lwirHash="sha256:" + "1" * 64),
    "lock version id": lambda d: d["lock"].update(workflowVersionId="wfver_0000000000000000"),
    "canonical json": lambda d: d.update(canonicalJson="{}"),
    "lock missing key": lambda d: d["lock"].pop("requestHash"),
    "lock validation hash": lambda d: d["lock"].update(validationHash="sha256:" + "2" * 64),
    "not an object": lambda d: d.pop("lock"),
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_from_json_rejects_tampered_versions(name: str) -> None:
    stored = compile_lwir(BASE_LWIR, input=TICKET_INPUT).to_json()
    TAMPERS[name](stored)
    with pytest.raises((WorkflowVersionMismatchError, LwirInvalidError)):
        WorkflowVersion.from_json(stored)


def test_from_json_rejects_a_consistently_rehashed_forgery() -> None:
    # Rewrite the lock's validation hash and recompute every id and hash over it: the ids
    # agree with each other, but the validation hash no longer follows from the lock.
    stored = compile_lwir(BASE_LWIR, input=TICKET_INPUT).to_json()
    lock = stored["lock"]
    lock["validationHash"] = "sha256:" + "2" * 64
    version_hash, version_id = compiled_version_identity(
        lock_seed_from(lock), lwir_version_id=lock["lwirVersionId"], lwir_hash=lock["lwirHash"]
    )
    lock.update(workflowVersionHash=version_hash, workflowVersionId=version_id)
    stored.update(hash=version_hash, id=version_id)
    with pytest.raises(WorkflowVersionMismatchError, match="validationHash"):
        WorkflowVersion.from_json(stored)


def test_from_json_without_revalidation() -> None:
    version = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    assert WorkflowVersion.from_json(version.to_json(), validate=False) == version


def test_from_json_rejects_non_objects() -> None:
    with pytest.raises(WorkflowVersionMismatchError):
        WorkflowVersion.from_json([1, 2])


# --- an explicit compile request (the planner path) -------------------------------------------


def _request(**overrides: Any) -> CompileRequest:
    fields: dict[str, Any] = {
        "request_id": "orq_example",
        "request_hash": "sha256:" + "1" * 64,
        "input_hash": "sha256:" + "2" * 64,
        "planned_input_structure": {"kind": "object", "fields": []},
        "planned_input_structure_hash": "sha256:" + "3" * 64,
        "workflow_definition_hash": "sha256:" + "4" * 64,
        "input_schema_hash": "sha256:" + "5" * 64,
        "requested_output": {"mode": "text"},
        "requested_output_hash": "sha256:" + "6" * 64,
        "capability_manifest": {"stepTypes": ["ai.generate"]},
        "capability_manifest_hash": "sha256:" + "7" * 64,
    }
    fields.update(overrides)
    return CompileRequest(**fields)


def test_request_locks_its_fields() -> None:
    snapshot = {"id": "support.summarize-ticket", "description": ""}
    request = _request(
        planning_definition_snapshot=snapshot,
        planning_definition_snapshot_hash=sha256_digest(snapshot),
    )
    version = compile_lwir(BASE_LWIR, input="ignored", request=request)
    lock = version.lock
    assert lock["requestId"] == "orq_example"
    assert lock["inputHash"] == "sha256:" + "2" * 64
    assert lock["planningDefinitionSnapshot"] == snapshot
    keys = list(lock)
    assert keys.index("workflowDefinitionHash") < keys.index("planningDefinitionSnapshot")
    assert keys.index("planningDefinitionSnapshotHash") < keys.index("inputSchemaHash")
    assert version.id != compile_lwir(BASE_LWIR, request=_request()).id


def test_request_without_input_binding_omits_it() -> None:
    version = compile_lwir(BASE_LWIR, request=_request(input_binding=None))
    assert "inputBinding" not in version.lock
    assert version.id != compile_lwir(BASE_LWIR, request=_request()).id


# --- the input structure ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, {"kind": "null"}),
        (True, {"kind": "boolean"}),
        (0, {"kind": "number"}),
        (1.5, {"kind": "number"}),
        ("", {"kind": "string"}),
        ([], {"kind": "array", "length": "empty", "elements": []}),
        ([3], {"kind": "array", "length": "single", "elements": [{"kind": "number"}]}),
        (
            [1, "a", 2, None, "b"],
            {
                "kind": "array",
                "length": "many",
                "elements": [{"kind": "null"}, {"kind": "number"}, {"kind": "string"}],
            },
        ),
        (
            {"b": {}, "a": [True]},
            {
                "kind": "object",
                "fields": [
                    ["a", {"kind": "array", "length": "single", "elements": [{"kind": "boolean"}]}],
                    ["b", {"kind": "object", "fields": []}],
                ],
            },
        ),
    ],
    ids=repr,
)
def test_concrete_input_structure(value: Any, expected: Any) -> None:
    assert concrete_input_structure(value) == expected


def test_input_structure_orders_keys_by_utf16() -> None:
    # U+1F600 (a surrogate pair in UTF-16) sorts before U+FB33 there, after it by code point.
    structure = concrete_input_structure({"\ufb33": 1, "\U0001f600": 2})
    assert [field[0] for field in structure["fields"]] == ["\U0001f600", "\ufb33"]


# --- the workflow definition snapshot ----------------------------------------------------------

PLANNER_SLOT = ModelSlotSnapshot(id="planner", provider_id="openai", model_id="gpt-4o")


def _snapshot(**overrides: Any) -> WorkflowDefinitionSnapshot:
    fields: dict[str, Any] = {
        "id": "support.summarize-ticket",
        "description": "Summarize a ticket.",
        "input_schema_hash": sha256_digest(True),
        "output_schema_hash": sha256_digest({"kind": "text", "name": "", "description": ""}),
        "model_slots": (
            ModelSlotSnapshot(id="gpt-4o-mini", provider_id="openai", model_id="gpt-4o-mini"),
            ModelSlotSnapshot(id="claude", provider_id="anthropic", model_id="claude-3-5"),
        ),
        "planner_config": PlannerConfigSnapshot(
            model_slot_id="planner",
            model_identity=PLANNER_SLOT,
            harness_id="workflowHarness@1.0.0",
            system_hash=sha256_digest(""),
            skills_hash=sha256_digest([]),
        ),
        "worker_config": WorkerConfigSnapshot(skills_hash=sha256_digest([])),
        "global_tools": ("search", "lookupCustomer"),
        "global_tools_hash": global_tools_hash(
            [
                ToolIdentitySnapshot.for_tool("search", description="Search the docs."),
                ToolIdentitySnapshot(name="lookupCustomer", registered=False),
            ]
        ),
        "bash_config": {"network": False, "python": True, "javascript": True},
    }
    fields.update(overrides)
    return WorkflowDefinitionSnapshot(**fields)


def test_definition_snapshot_has_upstreams_shape() -> None:
    snapshot = _snapshot()
    shape = snapshot.to_json()
    assert list(shape) == [
        "id",
        "description",
        "inputSchemaHash",
        "outputSchemaHash",
        "modelSlots",
        "plannerConfig",
        "workerConfig",
        "globalTools",
        "globalToolsHash",
        "toolSelection",
        "memoryConfig",
        "bashConfig",
    ]
    assert shape["globalTools"] == ["lookupCustomer", "search"]
    assert [slot["id"] for slot in shape["modelSlots"]] == ["claude", "gpt-4o-mini", "planner"]
    assert shape["modelSlots"][0] == {
        "id": "claude",
        "providerId": "anthropic",
        "modelId": "claude-3-5",
        "description": "",
    }
    assert shape["plannerConfig"]["modelIdentity"]["modelId"] == "gpt-4o"
    assert shape["workerConfig"] == {
        "harnessId": "customHarness@unknown",
        "skillsHash": sha256_digest([]),
    }
    assert shape["memoryConfig"] == {"workflow": "rw", "org": "ro", "attached": []}
    assert shape["toolSelection"] == "planner_selected"
    assert snapshot.definition_hash() == sha256_digest(shape)


def test_definition_hash_ignores_given_order_but_not_content() -> None:
    base = _snapshot()
    reordered = _snapshot(
        model_slots=tuple(reversed(base.model_slots)), global_tools=("search", "lookupCustomer")
    )
    assert reordered.definition_hash() == base.definition_hash()
    assert _snapshot(description="Other.").definition_hash() != base.definition_hash()
    assert _snapshot(global_tools=("search",)).definition_hash() != base.definition_hash()


def test_tool_identity_snapshot() -> None:
    tool = ToolIdentitySnapshot.for_tool(
        "search", description="Search.", input_schema={"type": "object"}, needs_approval=True
    )
    assert tool.to_json() == {
        "name": "search",
        "registered": True,
        "descriptionHash": sha256_digest("Search."),
        "inputSchemaHash": sha256_digest({"type": "object"}),
        "approvalPolicy": "required",
    }


def test_to_json_is_a_fresh_copy_of_the_version() -> None:
    version = compile_lwir(BASE_LWIR, input=TICKET_INPUT)
    first, second = version.to_json(), version.to_json()
    assert first == second
    assert first["lwir"] == dict(version.lwir)
    assert list(first["lwir"]) == list(version.lwir)  # JavaScript's property order too
    first["lwir"]["steps"].clear()
    first["lock"].clear()
    assert version.to_json() == second
    assert WorkflowVersion.from_json(second).hash == version.hash
