"""The ``{{ }}`` expression language: conformance vectors plus JavaScript corner cases."""

from __future__ import annotations

import re
from typing import Any

import pytest

from little_dist.expressions import (
    UNDEFINED,
    And,
    Call,
    Compare,
    ExpressionError,
    Invalid,
    JSFunction,
    Literal,
    Or,
    Path,
    StepReference,
    evaluate,
    evaluate_expression,
    is_valid_expression,
    parse_expression,
    resolve_value,
    step_references,
)
from tests.conftest import load_vectors

EVALUATE_VECTORS = [v for v in load_vectors("expressions") if v["kind"] == "evaluate"]


def _slug(vector: dict[str, Any]) -> str:
    text = vector["expression"] if "expression" in vector else f"value:{vector['value']!r}"
    slug = re.sub(r"[^A-Za-z0-9_.=<>!|&'\"-]+", "_", text).strip("_")
    return slug[:60] or "empty"


def _ids(vectors: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for vector in vectors:
        slug = _slug(vector)
        seen[slug] = seen.get(slug, 0) + 1
        ids.append(slug if seen[slug] == 1 else f"{slug}#{seen[slug]}")
    return ids


def _same_json(actual: Any, expected: Any) -> bool:
    """Equal as JSON values: types matter (True is not 1), int 5 equals float 5.0."""
    if isinstance(expected, bool) or expected is None:
        return actual is expected
    if isinstance(expected, int | float):
        return (
            isinstance(actual, int | float) and not isinstance(actual, bool) and actual == expected
        )
    if isinstance(expected, str):
        return isinstance(actual, str) and actual == expected
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(_same_json(a, e) for a, e in zip(actual, expected, strict=True))
        )
    assert isinstance(expected, dict)
    return (
        isinstance(actual, dict)
        and actual.keys() == expected.keys()
        and all(_same_json(actual[key], expected[key]) for key in expected)
    )


def test_vector_count() -> None:
    assert len(EVALUATE_VECTORS) == 149


@pytest.mark.parametrize("vector", EVALUATE_VECTORS, ids=_ids(EVALUATE_VECTORS))
def test_evaluate_vector(vector: dict[str, Any]) -> None:
    subject = vector["expression"] if "expression" in vector else vector["value"]
    context = vector["context"]
    if vector.get("error"):
        with pytest.raises(ExpressionError) as caught:
            evaluate(subject, context)
        assert str(caught.value) == vector["message"]
        assert caught.value.js_name == vector["error_name"]
    elif vector.get("expected_undefined"):
        assert evaluate(subject, context) is UNDEFINED
    else:
        result = evaluate(subject, context)
        assert _same_json(result, vector["expected"]), (result, vector["expected"])


CTX: dict[str, Any] = {
    "input": {
        "n": 5,
        "s": "5",
        "hex": "0x10",
        "oct": "0o17",
        "bin": "0b101",
        "inf": "Infinity",
        "list": [1, 2, 3],
        "nested": [[1, 2], [3]],
        "holes": [None, 1, None],
        "obj": {"x": 1},
        "objB": {"x": 1},
        "emoji": "😀",
        "pua": "\ue000",
        "big": 9007199254740993,
        "bigf": 9007199254740992.0,
        "neg0": -0.0,
        "ctrl": 'a"b\\c\n\x01\x7f',
        "lone": "\ud800x",
        "undef": UNDEFINED,
    },
    "steps": {
        "a": {"output": {"ok": True}},
        "loop": {"output": 3, "visits": [1, 2, 3]},
        "fresh": {"output": 7},
    },
}


def ev(body: str, context: dict[str, Any] | None = None) -> Any:
    return evaluate("{{ " + body + " }}", CTX if context is None else context)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("input.hex == 16", True),
        ("input.oct == 15", True),
        ("input.bin == 5", True),
        ("input.inf > 100000", True),
        ("input.inf == 'Infinity'", True),
        ("'  \\n 12 ' == 12", False),  # backslash-n is the letter n: 'n 12' is NaN
        ("'' == 0", True),
        ("'' == null", False),
        ("null == false", False),
        ("step == null", True),
        ("step === null", False),
        ("input.nested == '1,2,3'", True),
        ("input.holes == ',1,'", True),
        ("input.list == input.list", True),
        ("input.obj != input.objB", True),
        ("input.big === input.bigf", True),  # ints round to doubles first
        ("input.neg0 === 0", True),
        ("true == 1", True),
        ("true == '1'", True),
        ("'true' == true", False),
        ("'1e3' == 1000", True),
        ("'.5' == 0.5", True),
        ("'1_0' == 10", False),
        ("'١' == 1", False),  # Arabic-Indic digit: NaN in JavaScript
        ("'10' < '9'", True),
        ("10 < '9'", False),
        ("'a' < 1", False),
        ("'a' >= 1", False),
        ("step < 1", False),
        ("step >= 0", False),
        ("null <= 0", True),
        ("input.list >= '1,2,3'", True),
        ("input.emoji > input.pua", False),  # UTF-16: U+D83D < U+E000
        ("'a' === 'a'", True),
        ("2 == 2 == 2", False),
        ("1 == 1 == true", True),
    ],
)
def test_js_comparisons(body: str, expected: bool) -> None:
    assert ev(body) is expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ input.list }}!", "[1,2,3]!"),
        ("x{{ input.neg0 }}", "x0"),
        ("x{{ input.big }}", "x9007199254740992"),
        ("x{{ input.ctrl }}", 'xa"b\\c\n\x01\x7f'),
        ("x{{ json(input.ctrl) }}", 'x"a\\"b\\\\c\\n\\u0001\x7f"'),
        ("x{{ json(input.lone) }}", 'x"\\ud800x"'),
        ("x{{ input.holes }}", "x[null,1,null]"),
        ("x{{ 1.50 }}", "x1.5"),
        ("x{{ 'a' }}{{ 'b' }}", "xab"),
        ("{{ 'a' }} {{ 'b' }}", "a b"),
        ("{{{ 'a' }}", None),  # counts 1 vs 1: balanced, replaced inside
        ("x{{ steps.toString }}", "xundefined"),
    ],
)
def test_rendering(template: str, expected: str | None) -> None:
    if expected is None:
        assert evaluate(template, CTX) == "{a"
    else:
        assert evaluate(template, CTX) == expected


def test_json_property_order_and_undefined_members() -> None:
    context: dict[str, Any] = {
        "input": {"o": {"b": 1, "10": 2, "2": 3, "01": 4, "4294967295": 5, "u": UNDEFINED}}
    }
    assert ev("json(input.o)", context) == '{"2":3,"10":2,"b":1,"01":4,"4294967295":5}'
    assert ev("json(step)", context) is UNDEFINED
    context = {"input": {"a": [UNDEFINED, JSFunction("f")]}, "steps": {}}
    assert ev("json(input.a)", context) == "[null,null]"


def test_whole_form_keeps_type_and_identity() -> None:
    assert evaluate("  {{ input.obj }}\n", CTX) is CTX["input"]["obj"]
    assert evaluate("{{ input.n }}\n", CTX) == 5
    assert evaluate("{{input.n}}x", CTX) == "5x"
    assert ev("-0") == 0 and str(ev("-0")) == "-0.0"
    assert ev("12345678901234567890") == 12345678901234567890.0
    assert ev("9999999999999999") == 1e16
    assert evaluate("x{{ 9999999999999999 }}", CTX) == "x10000000000000000"
    assert ev("1" * 400) == float("inf")


def test_strings_and_literals() -> None:
    assert ev("'a\\\\b'") == "a\\b"
    assert ev('"it\'s"') == "it's"
    assert ev("'a||b' || false") is True
    assert ev("'x' && 'a&&b'") is True
    assert ev("'a == b'") == "a == b"
    with pytest.raises(ExpressionError, match="Unsupported expression: 'abc"):
        ev("'abc")


def test_short_circuit_and_lazy_parse() -> None:
    assert ev("true || input.__proto__") is True
    assert ev("false && nope(") is False
    assert ev("coalesce('x', input.__proto__)") == "x"
    with pytest.raises(ExpressionError) as caught:
        ev("false || input.__proto__")
    assert caught.value.code == "parse_error"


def test_coalesce_swallows_by_message() -> None:
    # Upstream tests the message text, so a parse error quoting the phrase is swallowed too.
    assert ev("coalesce(could not be resolved, 'x')") == "x"
    assert ev("coalesce(steps.nope.output, steps.a.output.ok)") is True
    assert ev("coalesce(input.missing, input.undef)") is UNDEFINED
    with pytest.raises(ExpressionError, match="requires at least two"):
        ev("coalesce(1)")


def test_function_arguments_evaluate_before_arity() -> None:
    with pytest.raises(ExpressionError, match="could not be resolved"):
        ev("len(input.missing, 1)")
    with pytest.raises(ExpressionError, match="Unsupported expression function 'nope'"):
        ev("nope(input.__proto__)")
    with pytest.raises(ExpressionError, match="len\\(\\) requires one argument"):
        ev("len( )")


def test_functions() -> None:
    assert ev("len(input.emoji)") == 2
    assert ev("len(input.list)") == 3
    assert ev("upper('straße')") == "STRASSE"
    assert ev("lower(input.nested)") == "1,2,3"
    assert ev("upper(step)") == "UNDEFINED"
    assert ev("json(1.0)") == "1"
    assert ev("sha256('abc')") == ev('sha256("abc")')
    assert ev("sha256(1, 2, 3)") == ev("sha256(input.list)")
    with pytest.raises(ExpressionError) as caught:
        ev("sha256(step)")
    assert caught.value.code == "not_hashable"
    with pytest.raises(ExpressionError) as caught:
        ev("hmac('k', step)")
    assert caught.value.js_name == "TypeError"
    assert ev("hmac(1, 'x')") == ev("hmac('1', 'x')")
    # a {{ }} body cannot contain braces, so compare through a bare expression
    assert ev("hmac('k', input.obj)") == evaluate_expression("hmac('k', '{\"x\":1}')", CTX)
    assert evaluate("{{ hmac('k', '{x}') }}", CTX) == "{{ hmac('k', '{x}') }}"


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2024-01-02T03:04:05Z", "2024-01-02T03:04:05.000Z"),
        ("2024-01-02T03:04:05+02:00", "2024-01-02T01:04:05.000Z"),
        ("2024-01-02T03:04:05-0130", "2024-01-02T04:34:05.000Z"),
        ("2024-01-02t03:04z", "2024-01-02T03:04:00.000Z"),
        ("2024-01-02T03:04:05.1Z", "2024-01-02T03:04:05.100Z"),
        ("2024-01-02T03:04:05.987654321Z", "2024-01-02T03:04:05.987Z"),
        ("2024", "2024-01-01T00:00:00.000Z"),
        ("2024-03", "2024-03-01T00:00:00.000Z"),
        ("2024-02-31", "2024-03-02T00:00:00.000Z"),
        ("2024-01-02T24:00:00Z", "2024-01-03T00:00:00.000Z"),
        ("+275760-09-13", "+275760-09-13T00:00:00.000Z"),
        ("-000001-01-01", "-000001-01-01T00:00:00.000Z"),
        ("1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.999Z"),
        ("2024-01-02 03:04:05Z", "2024-01-02T03:04:05.000Z"),
        ("2024-01-02T03:04:05", "2024-01-02T03:04:05.000Z"),  # local time in JS; UTC here
        # V8 drops "-000000" and reads the rest as legacy month/day with the default year 2001.
        ("-000000-01-01", "2001-01-01T00:00:00.000Z"),
        ("March 7 2024", "2024-03-07T00:00:00.000Z"),
    ],
)
def test_date_valid(text: str, iso: str) -> None:
    assert evaluate("{{ date(input.d) }}", {"input": {"d": text}}) == iso


@pytest.mark.parametrize(
    "text",
    [
        "2024-13-01",
        "2024-01-32",
        "2024-01-02T24:01:00Z",
        "2024-01-02T25:00Z",
        "2024-01-02T03:60Z",
        "2024-01-02T03Z",
        "2024-01-02T03:04:05+24:00",
        "-000000",
        "+275760-09-14",
        "2024-01-02T03:04:05Zjunk",
        "",
        "true",
        "[object Object]",
    ],
)
def test_date_invalid(text: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate("{{ date(input.d) }}", {"input": {"d": text}})
    assert str(caught.value) == "Invalid time value"
    assert caught.value.js_name == "RangeError"
    assert caught.value.code == "invalid_date"


def test_steps_lookup_quirks() -> None:
    assert ev("steps.loop.lastOutput") == 3
    assert ev("steps.fresh.allVisits") == [7]
    assert ev("steps.fresh.allVisits === steps.fresh.allVisits") is False  # fresh array
    assert ev("steps.loop.allVisits === steps.loop.allVisits") is True
    assert ev("steps.a") is CTX["steps"]["a"]
    # context.steps[id] has no own-property check upstream: prototype methods resolve.
    assert isinstance(ev("steps.toString"), JSFunction)
    assert ev("steps.toString === steps.toString") is True
    assert ev("steps.valueOf.lastOutput") is UNDEFINED
    assert ev("steps.valueOf.allVisits") == []
    with pytest.raises(ExpressionError, match="could not be resolved at 'output'"):
        ev("steps.toString.output")
    with pytest.raises(ExpressionError) as caught:
        ev("steps['']")
    assert caught.value.code == "step_expression"
    with pytest.raises(
        ExpressionError, match=r"Cannot read properties of null \(reading 'visits'\)"
    ):
        ev("steps.x.lastOutput", {"input": {}, "steps": {"x": None}})
    assert ev("steps.x", {"input": {}, "steps": {"x": None}}) is None


def test_path_quirks() -> None:
    assert ev("input.list[002]") == 3  # Number('002') is 2
    with pytest.raises(ExpressionError, match="could not be resolved at '7'"):
        ev("input.list[007]")
    with pytest.raises(ExpressionError, match="at '100000000000000000000'"):
        ev("input.list[100000000000000000000]")
    with pytest.raises(ExpressionError, match="at 'Infinity'"):
        ev("input.list[" + "9" * 400 + "]")
    with pytest.raises(ExpressionError, match="could not be resolved at 'length'"):
        ev("input.list.length")
    assert evaluate("{{ input }}", {"steps": {}}) is UNDEFINED
    with pytest.raises(ExpressionError, match="could not be resolved at 'a'"):
        evaluate("{{ input.a }}", {"steps": {}})
    assert ev("item", {"item": None}) is None
    assert ev("input.obj['x']") == 1
    assert ev("input.a-b", {"input": {"a-b": 2}}) == 2
    with pytest.raises(ExpressionError, match="Unsupported expression: input-b"):
        ev("input-b")


def test_error_positions_and_codes() -> None:
    with pytest.raises(ExpressionError) as caught:
        evaluate("ab {{ input.n }} {{ input.nope }}", CTX)
    assert caught.value.position == 17
    assert caught.value.code == "unresolved_path"
    with pytest.raises(ExpressionError) as caught:
        evaluate("{{ input.n }} }}", CTX)
    assert caught.value.code == "malformed_template"
    assert str(caught.value) == "Malformed embedded expression: {{ input.n }} }}"


def test_resolve_value_walks_containers() -> None:
    value = {"b": ["{{ input.n }}", 1], "2": "{{ input.s }}", "a": {"c": None}}
    assert resolve_value(value, CTX) == {"2": "5", "b": [5, 1], "a": {"c": None}}
    assert list(resolve_value(value, CTX)) == ["2", "b", "a"]
    # keys are checked in JS property order: "1" before "x"
    with pytest.raises(ExpressionError, match="could not be resolved"):
        resolve_value({"x": {"prototype": 1}, "1": "{{ input.nope }}"}, CTX)
    with pytest.raises(ExpressionError) as caught:
        resolve_value({"ok": 1, "__proto__": 2}, CTX)
    assert caught.value.code == "unsafe_segment"
    assert evaluate(7, CTX) == 7  # type: ignore[arg-type]


def test_evaluate_expression_without_braces() -> None:
    assert evaluate_expression("input.n >= 5", CTX) is True


def test_parse_tree_shapes() -> None:
    assert parse_expression(" input.a || input.b && input.c ") == Or(
        (
            Path("input", ("a",), "input.a"),
            And((Path("input", ("b",), "input.b"), Path("input", ("c",), "input.c"))),
        )
    )
    assert parse_expression("2 == 2 == 2") == Compare(
        "==", Literal(2), Compare("==", Literal(2), Literal(2))
    )
    tree = parse_expression("coalesce(steps['x-y'][0], 'a,b')")
    assert tree == Call(
        "coalesce",
        (Path("steps", ("x-y", 0), "steps['x-y'][0]"), Literal("a,b")),
        "coalesce(steps['x-y'][0], 'a,b')",
    )
    assert isinstance(parse_expression("input.__proto__"), Invalid)
    assert parse_expression("input.a") is parse_expression("input.a")  # cached


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ("input.a", True),
        ("steps", True),
        ("1 == 1", True),
        ("1 == 1 == 1", False),
        ("coalesce(input.a)", False),
        ("coalesce(input.a, 1, 2)", True),
        ("sha256()", False),
        ("len(input.a, input.b)", False),
        ("foo(1)", False),
        ("true || input.__proto__", False),
        ("", False),
        ("date(input.d)", True),
        ("hmac('k')", False),
        ("!input.a", False),
    ],
)
def test_is_valid_expression(body: str, valid: bool) -> None:
    assert is_valid_expression(body) is valid


def test_step_references() -> None:
    refs = step_references(
        "coalesce(steps.a.output.score, steps['b-c'].lastOutput) == steps.d || steps[0] && "
        "steps && 'steps.z.output' && step.x"
    )
    assert refs == (
        StepReference("a", ("output", "score")),
        StepReference("b-c", ("lastOutput",)),
        StepReference("d", ()),
    )
    assert step_references("steps.w.allVisits[2].v") == (StepReference("w", ("allVisits", 2, "v")),)
    assert step_references("input.__proto__ || steps.a.output") == (
        StepReference("a", ("output",)),
    )


def test_undefined_sentinel() -> None:
    import copy
    import pickle

    assert not UNDEFINED
    assert repr(UNDEFINED) == "UNDEFINED"
    assert UNDEFINED is not None
    assert copy.deepcopy(UNDEFINED) is UNDEFINED
    assert pickle.loads(pickle.dumps(UNDEFINED)) is UNDEFINED
    assert type(UNDEFINED)() is UNDEFINED
