from __future__ import annotations

import datetime
import decimal
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from little_dist import canonical
from little_dist.canonical import (
    NonHashableValueError,
    canonical_json,
    canonical_json_exact,
    js_number_string,
    sha256_digest,
    sha256_hex,
)
from tests.conftest import load_vectors

VECTORS = load_vectors("canonical")
ACCEPTED = [v for v in VECTORS if not v.get("error")]


def _input_of(vector: dict[str, Any]) -> Any:
    # Where Python's json would not hold the value the way JavaScript does, the vector gives the
    # JSON text upstream parsed; JSON.parse turns every number into a double.
    text = vector.get("input_json_text")
    if text is None:
        return vector["input"]
    return json.loads(text)


@pytest.mark.parametrize("vector", ACCEPTED, ids=lambda v: v["canonical"][:40])
def test_accepted_vector(vector: dict[str, Any]) -> None:
    value = _input_of(vector)
    assert canonical_json(value) == vector["canonical"]
    assert sha256_digest(value) == vector["digest"]
    assert sha256_hex(value) == vector["digest"].removeprefix("sha256:")


class _Wrapper:
    value = 1


def _cyclic_dict() -> Any:
    d: dict[str, Any] = {}
    d["self"] = d
    return d


def _cyclic_list() -> Any:
    items: list[Any] = []
    items.append(items)
    return items


# The Python equivalents of upstream's rejected inputs (the vectors describe JavaScript values).
REJECTED: list[tuple[str, Any, str]] = [
    ("nan", math.nan, "$"),
    ("infinity", math.inf, "$"),
    ("-infinity", -math.inf, "$"),
    ("nan-in-object", {"value": math.nan}, "$.value"),
    ("function", lambda: 1, "$"),
    ("function-property", {"run": lambda: 1}, "$.run"),
    ("lone-high-surrogate", "\ud800", "$"),
    ("lone-low-surrogate", "\udead", "$"),
    ("lone-surrogate-in-array", ["\udead"], "$[0]"),
    ("lone-surrogate-key", {"\ud800": "x"}, '$["\ud800"]'),
    ("lone-surrogate-value", {"value": "\udead"}, "$.value"),
    ("reversed-pair", "\ude00\ud83d", "$"),
    ("cyclic-object", _cyclic_dict(), "$.self"),
    ("cyclic-array", _cyclic_list(), "$[0]"),
    ("set", {1, 2, 3}, "$"),
    ("frozenset", frozenset(), "$"),
    ("class-instance", _Wrapper(), "$"),
    ("date", datetime.date(1970, 1, 1), "$"),
    ("datetime-nested", {"a": [1, 2, datetime.datetime(1970, 1, 1)]}, "$.a[2]"),
    ("bytes", b"x", "$"),
    ("decimal", decimal.Decimal("1.5"), "$"),
    ("int-key", {1: "x"}, "$[1]"),
    ("int-beyond-double", 10**400, "$"),
    ("key-needing-quotes", {"a b": {"c": math.inf}}, '$["a b"].c'),
]


@pytest.mark.parametrize(("value", "path"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejected_values_name_their_path(value: Any, path: str) -> None:
    with pytest.raises(NonHashableValueError) as info:
        canonical_json(value)
    assert info.value.path == path
    assert path in str(info.value)


def test_every_upstream_rejection_has_a_python_equivalent() -> None:
    # Upstream's rejections that have a Python counterpart are all covered above.
    described = {v["description"] for v in VECTORS if v.get("error")}
    assert {"Number.NaN", "cycle", "Set", "Date", "class instance", "function"} <= described


def test_shared_acyclic_references_are_fine() -> None:
    shared = {"x": 1}
    assert canonical_json({"a": shared, "b": [shared, shared]}) == (
        '{"a":{"x":1},"b":[{"x":1},{"x":1}]}'
    )


def test_tuple_is_an_array() -> None:
    assert canonical_json({"a": (1, "b")}) == '{"a":[1,"b"]}'


def test_surrogate_pair_as_two_code_points_is_one_character() -> None:
    assert canonical_json("\ud83d\ude00") == canonical_json("\U0001f600")


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1.0, "1"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (-1.5e-10, "-1.5e-10"),
        (123e-20, "1.23e-18"),
        (0.1 + 0.2, "0.30000000000000004"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e308".replace("e", "e+")),
        (2**53 + 1, "9007199254740992"),
        (-(2**60), "-1152921504606847000"),
        (12345678901234567890.0, "12345678901234567000"),
    ],
)
def test_js_number_string(number: float, text: str) -> None:
    assert js_number_string(number) == text


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


def _js_parse_int(text: str) -> int | float:
    # JSON.parse reads every number as a double; big integers come back as floats.
    number = int(text)
    return number if abs(number) <= 2**53 else float(number)


def _normalize(value: Any) -> Any:
    # -0.0 prints as 0, as in JavaScript; every other value parses back equal.
    if isinstance(value, float) and value == 0:
        return 0
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    return value


@settings(max_examples=300)
@given(json_values)
def test_canonical_json_round_trips_and_is_stable(value: Any) -> None:
    text = canonical_json(value)
    parsed = json.loads(text, parse_int=_js_parse_int)
    assert parsed == _normalize(value)
    assert canonical_json(parsed) == text


@given(st.dictionaries(st.text(max_size=4), st.integers(), max_size=8))
def test_key_order_ignores_insertion_order(mapping: dict[str, int]) -> None:
    reversed_mapping = dict(reversed(list(mapping.items())))
    assert canonical_json(mapping) == canonical_json(reversed_mapping)
    keys = list(json.loads(canonical_json(mapping)).keys())
    assert keys == sorted(keys, key=lambda k: k.encode("utf-16-be"))


def _walked(value: Any) -> str:
    parts: list[str] = []
    canonical._serialize(value, "$", set(), parts)
    return "".join(parts)


# Characters around the fast path's limits: surrogates (lone, or a pair as two code points),
# private use, astral, line separators, DEL and NUL.
_edge_chars = st.characters(codec="utf-8") | st.sampled_from(
    "\ud800\udc00\ue000\U0001f600\u2028\x7f\x00"
)
_key_chars = st.characters(codec="utf-8") | st.sampled_from("\ue000\U0001f600")
_plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([1e-4, 9.9999e-5, 0.081, -0.5, 1e16 - 2, 1e16, 2.5e15 + 0.5, 1.0, -0.0])
    | st.text(
        alphabet=st.characters(codec="utf-8")
        | st.sampled_from("\ud800\udc00\ue000\U0001f600\u2028\x7f\x00")
    ),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(
                alphabet=st.characters(codec="utf-8") | st.sampled_from("\ue000\U0001f600"),
                max_size=3,
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=500)
@given(_plain_values)
def test_the_fast_path_prints_what_the_walk_prints(value: Any) -> None:
    # Values without floats (or with fractional ones in [1e-4, 1e16)) may take the C
    # encoder; whatever path is taken, the text (or the error) is the walk's.
    try:
        expected = _walked(value)
    except NonHashableValueError as error:
        with pytest.raises(NonHashableValueError) as caught:
            canonical_json(value)
        assert caught.value.path == error.path
        return
    assert canonical_json(value) == expected


def test_the_fast_path_leaves_what_it_cannot_print_to_the_walk() -> None:
    assert canonical_json({"n": 2**53}) == '{"n":9007199254740992}'
    assert canonical_json({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'
    assert canonical_json([1.0, {"x": 1e21}]) == '[1,{"x":1e+21}]'
    deep: Any = "leaf"
    for _ in range(100):
        deep = [deep]
    assert canonical_json(deep) == "[" * 100 + '"leaf"' + "]" * 100
    with pytest.raises(NonHashableValueError):
        canonical_json({1: "int key"})


@pytest.mark.parametrize(
    "value",
    [
        {"a": "b", "n": 3, "f": 0.25, "t": True, "z": None, "l": [1, {"x": "é"}]},
        {},
        [],
        "text",
    ],
)
def test_an_exact_value_reads_back_equal_with_the_same_types(value: Any) -> None:
    text, exact = canonical_json_exact(value)
    assert text == canonical_json(value)
    assert exact
    assert json.loads(text) == value


@pytest.mark.parametrize(
    "value",
    [
        {"a": (1, "b")},  # read back as a list
        {"f": 1.0},  # printed as 1, read back as an int
        {"big": 2**60},  # beyond a safe integer: rounded as JavaScript would
        {"s": "\U0001f600"},  # beyond U+D7FF: the walk prints it
        {"tiny": 1e-7},
    ],
)
def test_a_value_the_text_may_change_is_not_taken_as_exact(value: Any) -> None:
    text, exact = canonical_json_exact(value)
    assert text == canonical_json(value)
    assert not exact
