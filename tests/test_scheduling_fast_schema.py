"""The quick "valid" for structural output schemas agrees with jsonschema's draft-07."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator

from little_dist.scheduling.fast_schema import compile_check

TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]
NAMES = ["a", "b", "c", "itemKey", "status"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 2.5, -1.5])
    | st.sampled_from(["", "x", "1"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(NAMES), inner, max_size=4)
    ),
    max_leaves=12,
)


def _schemas(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keyword = st.one_of(
        st.tuples(
            st.just("type"),
            st.sampled_from(TYPES) | st.lists(st.sampled_from(TYPES), min_size=1, max_size=3),
        ),
        st.tuples(
            st.just("properties"), st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)
        ),
        st.tuples(st.just("required"), st.lists(st.sampled_from(NAMES), max_size=3)),
        st.tuples(st.just("additionalProperties"), inner),
        st.tuples(st.just("items"), inner | st.lists(inner, max_size=3)),
        st.tuples(st.just("additionalItems"), inner),
        st.tuples(
            st.sampled_from(["minItems", "maxItems", "minProperties", "maxProperties"]),
            st.integers(0, 3),
        ),
        st.tuples(st.sampled_from(["title", "description"]), st.just("note")),
        # Keywords the quick check leaves to jsonschema.
        st.tuples(st.just("enum"), st.lists(json_values, min_size=1, max_size=3)),
        st.tuples(st.just("minLength"), st.integers(0, 2)),
    )
    return st.lists(keyword, max_size=4).map(dict)


schemas = st.recursive(st.booleans() | st.just({}), _schemas, max_leaves=8)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, value=json_values)
def test_the_quick_check_answers_as_draft7_does_or_leaves_the_schema_to_it(
    schema: Any, value: Any
) -> None:
    check = compile_check(schema)
    if isinstance(schema, dict) and ("enum" in schema or "minLength" in schema):
        assert check is None
    if check is not None:
        assert check(value) is Draft7Validator(schema).is_valid(value), (schema, value)


def test_a_fan_in_schema_is_checked_quickly_and_exactly() -> None:
    envelope = {
        "type": "object",
        "required": ["itemKey", "status", "artifacts"],
        "properties": {
            "itemKey": {"type": "string"},
            "status": {"type": "string"},
            "output": {"type": "object"},
            "outputRef": {"type": "string"},
            "artifacts": {"type": "array", "items": {"type": "string"}},
        },
    }
    schema = {"type": "array", "items": envelope}
    check = compile_check(schema)
    assert check is not None
    good = [
        {"itemKey": f"k{i}", "status": "completed", "output": {"n": i}, "artifacts": ["x"]}
        for i in range(3)
    ]
    assert check(good)
    for bad in (
        [*good, {"itemKey": "k9", "status": "completed"}],  # no artifacts
        [*good, {"itemKey": 9, "status": "completed", "artifacts": []}],
        [*good, {"itemKey": "k9", "status": "ok", "artifacts": [1]}],
        {"not": "an array"},
    ):
        assert not check(bad)
        assert not Draft7Validator(schema).is_valid(bad)
    # A keyword it does not know: jsonschema decides.
    assert compile_check({**schema, "uniqueItems": True}) is None
    assert compile_check({"$ref": "#/definitions/x"}) is None
    assert compile_check({"type": "integer"})(2.0) is True  # draft-07: 2.0 is an integer
    assert compile_check({"type": "number"})(True) is False  # a boolean is not a number


def test_an_output_error_still_reads_as_jsonschemas() -> None:
    from little_dist.compiler import compile_lwir
    from little_dist.scheduling.schema_checks import compiled_schema
    from little_dist.scheduling.step_graph import plan_for, schema_error
    from tests.test_scheduling_parallel import fan_doc, items

    plan = plan_for(compile_lwir(fan_doc(), input=items("a")))
    schema = {"type": "array", "items": {"type": "object", "required": ["a"]}}
    compiled = compiled_schema(schema)
    assert compiled.quick is not None and compiled.validator.schema == schema
    assert schema_error(plan, schema, [{"a": 1}] * 50) is None
    assert schema_error(plan, schema, [{"a": 1}, {}]) == "/1 'a' is a required property"
    assert schema_error(plan, {"enum": [1]}, 2) == "2 is not one of [1]"  # jsonschema alone
