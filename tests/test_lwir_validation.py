"""validate_lwir against every upstream vector in tests/conformance/lwir_validation.json."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.lwir import Finding, validate_lwir
from tests.conftest import load_vectors

VECTORS: list[dict[str, Any]] = load_vectors("lwir_validation")


def _pairs(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(finding.code, finding.path) for finding in findings]


@pytest.mark.parametrize("vector", VECTORS, ids=[vector["name"] for vector in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    findings = validate_lwir(vector["lwir"])
    got = _pairs(findings)
    assert all(isinstance(finding, Finding) for finding in findings)
    assert all(finding.severity == "error" for finding in findings)
    assert (not findings) == vector["valid"], [str(finding) for finding in findings]

    expected = vector.get("findings", [])
    if vector["match"] == "none":
        assert findings == []
    elif vector["match"] == "exact":
        assert got == [(item["code"], item["path"]) for item in expected]
    else:
        assert vector["match"] == "contains"
        for item in expected:
            assert (item["code"], item["path"]) in got, [str(finding) for finding in findings]
    for item in expected:
        if "message_contains" in item:
            messages = [
                finding.message
                for finding in findings
                if (finding.code, finding.path) == (item["code"], item["path"])
            ]
            assert any(item["message_contains"] in message for message in messages), messages
    for code in vector.get("absent_codes") or []:
        assert code not in {finding.code for finding in findings}
    # finding_codes is the union of codes the vector mentions; every asserted code appears.
    assert {item["code"] for item in expected} <= set(vector["finding_codes"])


def test_nonempty_secrets_gives_exactly_one_unimplemented_field() -> None:
    (vector,) = [v for v in VECTORS if v["name"] == "invalid_nonempty_permissions_secrets"]
    findings = validate_lwir(vector["lwir"])
    unimplemented = [f for f in findings if f.code == "schema.unimplemented_field"]
    assert len(unimplemented) == 1
    assert "silently ignored" in unimplemented[0].message


def test_residual_cycle_message_names_only_the_decision_free_loop() -> None:
    (vector,) = [v for v in VECTORS if v["name"] == "invalid_residual_cycle_without_decision"]
    cycles = [f for f in validate_lwir(vector["lwir"]) if f.code == "lwir.invalid_cycle"]
    assert len(cycles) == 1
    members = cycles[0].message.split("[", 1)[1].split("]", 1)[0].split(" -> ")
    assert sorted(members) == ["A", "B"]


def test_decision_when_with_item_inside_branch_has_no_expression_finding() -> None:
    (vector,) = [
        v for v in VECTORS if v["name"] == "decision_when_item_allowed_inside_parallel_branch"
    ]
    findings = validate_lwir(vector["lwir"])
    assert not [
        f for f in findings if f.code.startswith("expression.") and "cases[0].when" in f.path
    ]


def test_finding_to_json_is_the_wire_shape() -> None:
    finding = validate_lwir({})[0]
    assert finding.to_json() == {
        "severity": "error",
        "code": "schema.invalid",
        "path": "$.apiVersion",
        "message": "apiVersion must be littleworkflow.dev/v0.1.",
    }
