"""Property tests: evaluation only ever raises ExpressionError, and parsing is total."""

from __future__ import annotations

import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from little_dist.expressions import (
    ExpressionError,
    evaluate,
    is_valid_expression,
    parse_expression,
    resolve_value,
    step_references,
)

# Pieces of the grammar (and of things that break it) that random text rarely hits.
_WORDS = (
    "{{ }} { } ( ) [ ] . , - || && == === != !== < <= > >= => ! ' \" \\ "
    "input item step steps workflow lastOutput allVisits output toString valueOf "
    "coalesce( date( hmac( json( len( lower( upper( sha256( nope( "
    "__proto__ constructor prototype 0 1 -1 01 1.5 true false null 'x' a b x ok "
    "2024-01-02 T03:04:05Z +02:00"
)
FRAGMENTS = [
    *_WORDS.split(),
    " ",
    "9" * 30,
    '"a\\"b"',
    "\u00a0",
    "\ufeff",
    "\x1c",
    "\n",
    "😀",
    "\ud800",
]

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.sampled_from(["a", "b", "x", "ok", "1", "output", "visits"]), children, max_size=4
        ),
    ),
    max_leaves=12,
)
contexts = st.fixed_dictionaries(
    {
        "input": json_values,
        "steps": st.dictionaries(
            st.sampled_from(["a", "b", "x", "toString"]),
            st.one_of(
                st.fixed_dictionaries({"output": json_values}),
                st.fixed_dictionaries({"output": json_values, "visits": st.lists(json_values)}),
                json_values,
            ),
            max_size=3,
        ),
    },
    optional={"item": json_values, "step": json_values, "workflow": json_values},
)
grammar_text = st.lists(st.sampled_from(FRAGMENTS), max_size=25).map("".join)
templates = st.one_of(
    st.text(max_size=60),
    grammar_text,
    grammar_text.map(lambda body: "{{ " + body.replace("{", "").replace("}", "") + " }}"),
)


def _evaluate_safely(template: str, context: dict[str, Any]) -> None:
    try:
        evaluate(template, context)
    except ExpressionError as error:
        assert isinstance(error.code, str) and error.code
        assert error.position is None or 0 <= error.position < len(template)


@settings(max_examples=600, deadline=None)
@given(template=templates, context=contexts)
def test_evaluate_raises_only_expression_error(template: str, context: dict[str, Any]) -> None:
    _evaluate_safely(template, context)


@settings(max_examples=300, deadline=None)
@given(body=st.one_of(st.text(max_size=60), grammar_text))
def test_parsing_is_total(body: str) -> None:
    tree = parse_expression(body)
    assert parse_expression(body) is tree
    assert isinstance(is_valid_expression(body), bool)
    for ref in step_references(body):
        assert ref.step_id and isinstance(ref.segments, tuple)


@settings(max_examples=200, deadline=None)
@given(value=json_values, context=contexts)
def test_resolve_value_raises_only_expression_error(value: Any, context: dict[str, Any]) -> None:
    with contextlib.suppress(ExpressionError):
        resolve_value(value, context)


def test_pathological_inputs_raise_expression_error() -> None:
    context: dict[str, Any] = {"input": {"a": 1}, "steps": {}}
    deep_call = "{{ " + "len(" * 5000 + "input.a" + ")" * 5000 + " }}"
    deep_brackets = "{{ input" + "[0" * 5000 + "]" * 5000 + " }}"
    for template in (deep_call, deep_brackets, "{{ " + "1 == " * 3000 + "1 }}"):
        _evaluate_safely(template, context)
    nested: Any = 1
    for _ in range(5000):
        nested = [nested]
    _evaluate_safely("x{{ input }}", {"input": nested, "steps": {}})
    _evaluate_safely("{{ sha256(input) }}", {"input": nested, "steps": {}})
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    _evaluate_safely("x{{ input }}", {"input": cyclic, "steps": {}})
    _evaluate_safely("{{ input }}", {"steps": {}})  # no input at all
    _evaluate_safely("{{ steps.a.output }}", {"input": {}})  # no steps at all
    _evaluate_safely("{{ input.a }}", "not a mapping")  # type: ignore[arg-type]
