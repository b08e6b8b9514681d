"""The static expression checks, against the ``kind: "validate"`` vectors of expressions.json."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.lwir.expression_checks import (
    contains_unscannable_expression,
    expression_body_references_root,
    is_safe_expression_body,
    is_valid_template_expression,
    references_expression_root,
    scan_expressions,
    step_reference_ids_in,
    step_references_in,
    validate_expressions,
)
from little_dist.lwir.findings import Finding
from tests.conftest import load_vectors

VECTORS: list[dict[str, Any]] = [
    vector for vector in load_vectors("expressions") if vector.get("kind") == "validate"
]


def _id(vector: dict[str, Any]) -> str:
    scope = "branch" if vector["allow_item_expressions"] else "top"
    return f"{vector['mode']}-{scope}-{vector['template']}"


def test_every_validate_vector_is_collected() -> None:
    assert len(VECTORS) == 39


@pytest.mark.parametrize("vector", VECTORS, ids=[_id(vector) for vector in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    allow_item = vector["allow_item_expressions"]
    if vector["mode"] == "with_field":
        findings: list[Finding] = []
        validate_expressions(
            vector["template"],
            "$.steps[0].with.prompt",
            findings,
            allow_item_expressions=allow_item,
        )
        assert (not findings) == vector["valid"], findings
        if not vector["valid"]:
            assert [(f.code, f.path) for f in findings] == [
                ("expression.invalid", "$.steps[0].with.prompt")
            ]
        if "message" in vector:
            assert findings[0].message == vector["message"]
    else:
        assert vector["mode"] == "template_expression"
        result = is_valid_template_expression(vector["template"], allow_item_expressions=allow_item)
        assert result == vector["valid"]


def test_one_finding_per_string_and_paths_use_dots_and_indexes() -> None:
    findings: list[Finding] = []
    value = {"a": ["ok {{ input.x }}", "{{ eval }} {{ new }}"], "b": {"c": "{{}}"}}
    validate_expressions(value, "$.steps[0].with", findings)
    assert [(f.path, f.message) for f in findings] == [
        ("$.steps[0].with.a[1]", "Unsafe template expression."),
        ("$.steps[0].with.b.c", "Malformed template expression."),
    ]


@pytest.mark.parametrize(
    ("text", "expressions", "unscannable"),
    [
        ("plain", (), False),
        ("{{ a }} and {{b}}", ("a", "b"), False),
        ("{{ }}", ("",), False),
        ("{{}}", (), True),
        ("{{{{ a }}}}", (), True),
        ("x }} y", (), True),
    ],
)
def test_scan(text: str, expressions: tuple[str, ...], unscannable: bool) -> None:
    scan = scan_expressions(text)
    assert scan.expressions == expressions
    assert scan.unscannable is unscannable


@pytest.mark.parametrize(
    ("body", "safe"),
    [
        ("input.a\n", True),
        ("'process'", False),  # the blacklist also reads string literals
        ("input.newValue", True),
        ("item.id", False),
        ("input.item", True),
        ("'item'", True),  # literals are not the item root
        ("steps['0'].output", True),
        ("steps [ 0 ].output", False),
        ("coalesce(input.a, 'b')", True),
        ("coalesce(input.a)", False),
        ("input.a == input.b == input.c", False),
        ("\ufeffinput.a\ufeff", True),  # JavaScript's trim also strips the BOM
    ],
)
def test_is_safe_expression_body(body: str, safe: bool) -> None:
    assert is_safe_expression_body(body) is safe


def test_item_root_allowed_in_branches() -> None:
    assert is_safe_expression_body("item.id == 'x'", allow_item_expressions=True)
    assert expression_body_references_root("coalesce(item, 1)", "item")
    assert not expression_body_references_root("input.item", "item")


def test_template_expression_must_be_the_whole_string() -> None:
    assert is_valid_template_expression("{{ input.a }}")
    assert not is_valid_template_expression(" {{ input.a }}")
    assert not is_valid_template_expression("{{ input.a }}{{ input.b }}")


def test_step_references_carry_property_and_string_path() -> None:
    refs = step_references_in(
        {"p": "{{ steps.a.output.x }} {{ steps['b'].lastOutput }}", "q": ["{{ steps.c }}"]},
        "$.steps[1].with",
    )
    assert [(r.step_id, r.property, r.path) for r in refs] == [
        ("a", "output", "$.steps[1].with.p"),
        ("b", "lastOutput", "$.steps[1].with.p"),
        ("c", None, "$.steps[1].with.q[0]"),
    ]


def test_step_references_ignore_string_literals_and_unscannable_strings() -> None:
    assert step_references_in('{{ coalesce(input.a, "steps.x.output") }}', "$") == []
    assert step_references_in("{{ steps.x.output }} }}", "$") == []


def test_document_level_helpers() -> None:
    value = {"a": ["{{ steps.x.output }}", "{{ steps.y.lastOutput }} {{ steps.x.output.z }}"]}
    assert step_reference_ids_in(value) == ["x", "y"]
    assert not contains_unscannable_expression(value)
    assert contains_unscannable_expression({"b": ["ok", "{{ input.a }} }}"]})
    assert references_expression_root({"p": "{{ workflow.metadata.name }}"}, "workflow")
    assert not references_expression_root({"p": "'{{ input.workflow }}'"}, "workflow")
