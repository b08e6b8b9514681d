"""The alpha JSON Schema subset, the draft-07 meta-schema gate and its fast path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator

from little_dist.lwir import validate_lwir
from little_dist.lwir.findings import Finding
from little_dist.lwir.schema import _surely_meta_valid, validate_schema_value
from tests.conftest import load_vectors

_BASE: dict[str, Any] = load_vectors("lwir_validation")[0]["lwir"]


def _messages(schema: Any) -> list[str]:
    findings: list[Finding] = []
    validate_schema_value(schema, "$.input.schema", findings)
    assert all((f.code, f.path) == ("schema.invalid", "$.input.schema") for f in findings)
    return [f.message for f in findings]


@pytest.mark.parametrize(
    "schema",
    [
        True,
        False,
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "required": ["a"]},
        {"anyOf": [{"type": "string"}, {"type": "number"}]},
        {"type": "array", "items": {"type": "string"}, "minItems": 0, "maxItems": 3},
        {"type": "object", "propertyNames": {"type": "string"}, "required": ["x"]},
        {"const": None, "title": "t", "examples": [1]},
    ],
)
def test_accepted(schema: Any) -> None:
    assert _messages(schema) == []


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (None, "Unsupported schema: expected a plain JSON Schema object or boolean schema."),
        ([], "Unsupported schema: expected a plain JSON Schema object or boolean schema."),
        ({"$ref": "#/x"}, "Unsupported JSON Schema keyword '$ref' in alpha LWIR."),
        ({"type": ["object", "null"]}, "Unsupported JSON Schema type 'object'."),
        (
            {"minimum": 3, "maximum": 1},
            "JSON Schema minimum must be less than or equal to maximum.",
        ),
        ({"properties": {"a": 5}}, "data/properties/a must be object,boolean"),
        ({"type": "strin"}, "data/type must match a schema in anyOf"),
    ],
)
def test_rejected(schema: Any, message: str) -> None:
    assert message in _messages(schema)[0]


def test_nested_findings_report_the_root_path_and_one_per_node() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "format": "email", "pattern": "x"}},
        "additionalProperties": {"default": 1},
    }
    assert _messages(schema) == [
        "Unsupported JSON Schema keyword 'format' in alpha LWIR.",
        "Unsupported JSON Schema keyword 'default' in alpha LWIR.",
    ]


def test_required_keys_see_object_prototype_members_like_javascript_in() -> None:
    # `"toString" in {}` is true in JavaScript, so upstream accepts this required key.
    assert _messages({"type": "object", "properties": {}, "required": ["toString"]}) == []
    assert _messages({"type": "object", "properties": {}, "required": ["x"]}) == [
        "JSON Schema required key 'x' must exist in properties."
    ]


def test_unsupported_keywords_are_reported_in_javascript_key_order() -> None:
    doc = dict(_BASE, input={"schema": {"pattern": "x", "10": 1, "2": 1}})
    (finding,) = [f for f in validate_lwir(doc) if f.path == "$.input.schema"]
    assert finding.message == "Unsupported JSON Schema keyword '2' in alpha LWIR."


_schema_keys = st.sampled_from(
    [
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "propertyNames",
        "anyOf",
        "oneOf",
        "maxItems",
        "minItems",
        "maxLength",
        "minLength",
        "maximum",
        "minimum",
        "description",
        "title",
        "examples",
        "format",
    ]
)
_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(-3, 3, allow_nan=False)
    | st.sampled_from(["string", "object", "array", "null", "x"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(_schema_keys | st.sampled_from(["a", "b"]), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(_values)
def test_fast_meta_check_never_accepts_what_draft7_rejects(value: Any) -> None:
    if _surely_meta_valid(value):
        assert list(Draft7Validator(Draft7Validator.META_SCHEMA).iter_errors(value)) == []
