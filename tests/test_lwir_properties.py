"""validate_lwir never raises, whatever it is given."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from little_dist.lwir import Finding, validate_lwir
from tests.conftest import load_vectors

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(
        ["{{", "}}", "{{ steps.a.output }}", "{{ item }}", "end", "decision", "parallel"]
    )
)
_json = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=30,
)
_keys = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "metadata",
        "input",
        "output",
        "permissions",
        "steps",
        "id",
        "uses",
        "needs",
        "with",
        "maxVisits",
        "onFailure",
        "schema",
        "mode",
        "cases",
        "default",
        "items",
        "itemKey",
        "fanIn",
        "files",
        "sandbox",
        "sensitive",
        "cache",
    ]
)
_lwir_shaped = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(_keys | st.text(max_size=4), children, max_size=6)
    ),
    max_leaves=40,
)
_BASE: list[dict[str, Any]] = [v["lwir"] for v in load_vectors("lwir_validation")]


def _check(value: Any) -> None:
    findings = validate_lwir(value)
    assert isinstance(findings, list)
    assert all(isinstance(finding, Finding) for finding in findings)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_arbitrary_json_never_raises(value: Any) -> None:
    _check(value)


@settings(max_examples=300, deadline=None)
@given(_lwir_shaped)
def test_lwir_shaped_junk_never_raises(value: Any) -> None:
    _check(value)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_BASE), st.lists(_keys, min_size=1, max_size=3), _lwir_shaped)
def test_mutated_vectors_never_raise(doc: Any, path: list[str], junk: Any) -> None:
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        child = target.get(key) if isinstance(target, dict) else None
        if isinstance(child, list) and child and isinstance(child[0], dict):
            child = child[0]
        if not isinstance(child, dict):
            break
        target = child
    if isinstance(target, dict):
        target[path[-1]] = junk
    _check(doc)


def test_non_json_values_become_findings() -> None:
    for value in ({1, 2}, object(), b"x", float("nan"), {"a": float("inf")}, {1: "x"}, "\ud800"):
        (finding,) = validate_lwir(value)
        assert finding.code == "lwir.non_hashable" and finding.path == "$"


def test_cycles_in_the_value_are_not_hashable() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    assert [f.code for f in validate_lwir(looped)] == ["lwir.non_hashable"]


def test_deep_nesting_becomes_a_finding() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = {"a": [deep]}
    findings = validate_lwir({"apiVersion": "littleworkflow.dev/v0.1", "steps": [deep]})
    assert findings and all(isinstance(f, Finding) for f in findings)
    # Within canonical JSON's MAX_DEPTH (256 containers): validated like any document.
    moderately_deep: Any = "{{ item }}"
    for _ in range(120):
        moderately_deep = {"a": [moderately_deep]}
    doc = copy.deepcopy(_BASE[0])
    doc["steps"][0]["with"]["args"] = moderately_deep
    assert [f.code for f in validate_lwir(doc)] == ["expression.invalid"]
