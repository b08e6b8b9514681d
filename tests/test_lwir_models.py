"""parse_lwir and the typed models: round trips, discriminated steps, errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from little_dist.errors import InvalidInputError
from little_dist.lwir import (
    AiGenerateStep,
    ChoiceOutput,
    CodeRunStep,
    DecisionStep,
    JsonOutput,
    LwirDocument,
    LwirValidationError,
    ParallelStep,
    TextOutput,
    ToolCallStep,
    code_file_digest,
    parse_lwir,
)
from tests.conftest import load_vectors

VECTORS: list[dict[str, Any]] = load_vectors("lwir_validation")
VALID = [vector for vector in VECTORS if vector["valid"]]
INVALID = [vector for vector in VECTORS if not vector["valid"]]


@pytest.mark.parametrize("vector", VALID, ids=[vector["name"] for vector in VALID])
def test_valid_documents_round_trip(vector: dict[str, Any]) -> None:
    original = copy.deepcopy(vector["lwir"])
    document = parse_lwir(vector["lwir"])
    assert isinstance(document, LwirDocument)
    assert document.model_dump(by_alias=True, exclude_unset=True) == original
    assert vector["lwir"] == original  # parsing does not touch its input
    again = LwirDocument.model_validate(document.model_dump(by_alias=True, exclude_unset=True))
    assert again == document


@pytest.mark.parametrize("vector", INVALID, ids=[vector["name"] for vector in INVALID])
def test_invalid_documents_raise_with_findings(vector: dict[str, Any]) -> None:
    with pytest.raises(LwirValidationError) as raised:
        parse_lwir(vector["lwir"])
    assert isinstance(raised.value, InvalidInputError)
    assert raised.value.findings
    first = raised.value.findings[0]
    assert first.path in str(raised.value) and first.code in str(raised.value)


def _vector(name: str) -> dict[str, Any]:
    (vector,) = [v for v in VECTORS if v["name"] == name]
    return vector["lwir"]  # type: ignore[no-any-return]


def test_steps_are_discriminated_on_uses() -> None:
    base = parse_lwir(_vector("valid_base_workflow"))
    tool, ai = base.steps
    assert isinstance(tool, ToolCallStep) and tool.with_.tool == "lookupCustomer"
    assert isinstance(tool.output, JsonOutput) and tool.output.json_schema is True
    assert isinstance(ai, AiGenerateStep) and ai.with_.model == "model.structured"
    assert ai.dependencies == ["lookup-customer"] and ai.visit_limit == 1
    assert base.api_version == "littleworkflow.dev/v0.1"
    assert base.step("summarize") is ai and base.step("nope") is None

    code = parse_lwir(_vector("valid_code_run_network_deny_only")).steps[0]
    assert isinstance(code, CodeRunStep)
    main = code.with_.files["main.ts"]
    assert main.sha256 == code_file_digest(main.content)
    assert code.with_.sandbox.network == "deny"

    parallel = parse_lwir(_vector("valid_parallel_with_fan_in_envelope")).steps[0]
    assert isinstance(parallel, ParallelStep)
    assert parallel.with_.item_key == "{{ item.candidateId }}"
    assert parallel.with_.fan_in.order == "input" and parallel.with_.max_branches == 25
    assert isinstance(parallel.steps[0], AiGenerateStep)

    loop = parse_lwir(_vector("valid_decision_loop_max_visits_5"))
    route = loop.steps[2]
    assert isinstance(route, DecisionStep)
    assert route.with_.default == "worker" and route.with_.cases[0].to == "end"
    assert loop.steps[0].visit_limit == 5

    modes = parse_lwir(_vector("valid_ai_generate_output_modes")).steps
    assert isinstance(modes[2].output, ChoiceOutput)  # type: ignore[union-attr]
    assert isinstance(modes[3].output, TextOutput)  # type: ignore[union-attr]


def test_models_are_frozen_and_keep_unknown_keys() -> None:
    doc = copy.deepcopy(_vector("valid_base_workflow"))
    doc["steps"][0]["retry"] = {"max": 2}  # upstream ignores unknown step keys
    document = parse_lwir(doc)
    assert document.model_dump(by_alias=True, exclude_unset=True) == doc
    with pytest.raises(ValueError):
        document.steps[0].id = "other"  # type: ignore[misc]


def test_integral_floats_parse_as_javascript_sees_them() -> None:
    doc = copy.deepcopy(_vector("valid_max_visits_3"))
    doc["steps"][0]["maxVisits"] = 3.0
    assert parse_lwir(doc).steps[0].max_visits == 3


def test_code_file_digest_matches_the_vector() -> None:
    example = load_vectors("ids")["examples"]["code_file_digest"]
    assert code_file_digest(example["content"]) == example["sha256"]


def test_exported_names_are_pinned() -> None:
    import little_dist.lwir as lwir

    assert set(lwir.__all__) == {
        "API_VERSION",
        "KIND",
        "UNIMPLEMENTED_FIELD_CODE",
        "AiGenerateConfig",
        "AiGenerateStep",
        "ArrayOutput",
        "ChoiceOutput",
        "CodeFile",
        "CodeRunConfig",
        "CodeRunSandbox",
        "CodeRunStep",
        "DecisionCase",
        "DecisionConfig",
        "DecisionStep",
        "FanIn",
        "Finding",
        "FixerConfig",
        "JsonOutput",
        "JsonSchema",
        "LwirDocument",
        "LwirValidationError",
        "Metadata",
        "ObjectOutput",
        "OnFailure",
        "ParallelCardinality",
        "ParallelConfig",
        "ParallelStep",
        "Permissions",
        "RepairConfig",
        "SchemaSpec",
        "Step",
        "StepOutput",
        "TextOutput",
        "ToolCallConfig",
        "ToolCallStep",
        "code_file_digest",
        "parse_lwir",
        "validate_lwir",
    }
    assert all(hasattr(lwir, name) for name in lwir.__all__)


def test_pure_core_imports_no_infrastructure() -> None:
    import subprocess
    import sys

    code = (
        "import sys, little_dist.lwir; "
        "bad = [m for m in ('litellm', 'celery', 'boto3', 'redis') if m in sys.modules]; "
        "print(bad)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_documents_upstream_accepts_but_no_runtime_can_use_raise_cleanly() -> None:
    doc = copy.deepcopy(_vector("valid_decision_self_loop"))
    doc["steps"][0]["with"]["cases"] = ""  # a zero-length "array" to upstream's loop
    with pytest.raises(LwirValidationError) as raised:
        parse_lwir(doc)
    assert [(f.code, f.path) for f in raised.value.findings] == [
        ("schema.invalid", "$.steps[0].with.cases")
    ]


def test_unvalidated_fields_are_kept_as_given() -> None:
    doc = copy.deepcopy(_vector("valid_output_on_default_single_visit_step"))
    doc["steps"][0]["output"]["schema"] = 5  # ignored by upstream for text outputs
    doc["metadata"]["version"] = 3
    assert parse_lwir(doc).model_dump(by_alias=True, exclude_unset=True) == doc


def test_a_parsed_document_validates_as_its_json() -> None:
    from little_dist.lwir import validate_lwir

    assert validate_lwir(parse_lwir(_vector("valid_parallel_with_fan_in_envelope"))) == []
