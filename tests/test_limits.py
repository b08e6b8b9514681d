"""Limits on submitted input: depth without recursion, sizes, step counts (little_dist.limits)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from little_dist.canonical import MAX_DEPTH, NonHashableValueError, canonical_json
from little_dist.compiler import compile_lwir
from little_dist.errors import InvalidInputError
from little_dist.limits import (
    InputLimitError,
    InputLimits,
    check_input,
    check_lwir,
    count_steps,
    deeper_than,
    loads_bounded,
)
from little_dist.lwir import validate_lwir
from tests import workflows_for_tests as wf

VERY_DEEP = 100_000


def nested_lists(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_dicts(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        (1, 0),
        ("x", 0),
        ([], 1),
        ({}, 1),
        ([[1]], 2),
        ({"a": [1, {"b": None}]}, 3),
        ((1, (2,)), 2),
        ([1, [2, [3]], [4]], 3),
    ],
)
def test_depth_counts_containers(value: Any, depth: int) -> None:
    assert not deeper_than(value, depth)
    assert deeper_than(value, depth - 1) == (depth > 0)


def test_a_cycle_is_deeper_than_any_limit() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert deeper_than(loop, 1000)


@pytest.mark.parametrize("build", [nested_lists, nested_dicts])
def test_a_very_deep_input_is_a_limit_error_not_a_recursion_error(build: Any) -> None:
    with pytest.raises(InputLimitError) as caught:
        check_input(build(VERY_DEEP), InputLimits())
    assert str(caught.value) == (
        "the run input is nested more than 64 levels deep (LITTLE_MAX_JSON_DEPTH=64)"
    )
    assert caught.value.setting == "LITTLE_MAX_JSON_DEPTH"


def test_an_input_at_the_depth_limit_passes_and_gives_its_canonical_json() -> None:
    value = {"b": nested_lists(63), "a": 1}
    assert check_input(value, InputLimits()) == canonical_json(value)
    with pytest.raises(InputLimitError, match="more than 63 levels"):
        check_input(value, InputLimits(max_json_depth=63))


def test_an_input_over_the_byte_limit_names_its_size_and_the_setting() -> None:
    value = {"text": "é" * 60}  # 120 bytes of UTF-8 in the string
    size = len(canonical_json(value).encode("utf-8"))
    assert check_input(value, InputLimits(max_input_bytes=size))
    with pytest.raises(InputLimitError) as caught:
        check_input(value, InputLimits(max_input_bytes=size - 1), "the --input")
    assert str(caught.value) == (
        f"the --input is {size:,} bytes of JSON, more than LITTLE_MAX_INPUT_BYTES={size - 1:,}"
    )


def test_an_input_that_is_not_json_is_the_canonical_error() -> None:
    with pytest.raises(NonHashableValueError):
        check_input({"x": float("nan")}, InputLimits())


def test_steps_are_counted_with_the_nested_ones() -> None:
    assert count_steps(wf.chain_lwir(5)) == 5
    assert count_steps(wf.fan_out_lwir()) == 2  # the parallel step and its branch step
    assert count_steps({"steps": "no"}) == 0
    assert count_steps([1]) == 0


def test_a_workflow_over_the_step_limit_is_refused() -> None:
    doc = wf.chain_lwir(12)
    check_lwir(doc, InputLimits(max_steps=12))
    with pytest.raises(InputLimitError) as caught:
        check_lwir(doc, InputLimits(max_steps=11))
    assert str(caught.value) == "the workflow has 12 steps, more than LITTLE_MAX_STEPS=11"


def test_a_workflow_over_the_byte_limit_is_refused() -> None:
    doc = wf.chain_lwir(3)
    size = len(canonical_json(doc).encode("utf-8"))
    check_lwir(doc, InputLimits(max_lwir_bytes=size))
    with pytest.raises(InputLimitError, match=f"is {size:,} bytes of JSON, more than LITTLE_MAX"):
        check_lwir(doc, InputLimits(max_lwir_bytes=size - 1))


def test_a_workflow_that_is_not_json_is_measured_anyway() -> None:
    # The validator names what is wrong; the limits must not fail first.
    doc = {**wf.chain_lwir(1), "bad": {1: float("nan"), (1, 2): "tuple key"}}
    check_lwir(doc, InputLimits())


def test_a_very_deep_workflow_is_a_limit_error() -> None:
    doc = wf.single_tool_lwir(args={"deep": nested_lists(VERY_DEEP)})
    with pytest.raises(InputLimitError, match="the workflow is nested more than 64 levels"):
        check_lwir(doc, InputLimits())


def test_loads_bounded_turns_the_parsers_recursion_error_into_the_limit() -> None:
    text = "[" * VERY_DEEP + "]" * VERY_DEEP
    with pytest.raises(InputLimitError, match="--input is nested more than 64 levels deep"):
        loads_bounded(text, 64, "--input")
    with pytest.raises(InputLimitError, match="nested more than 10 levels deep"):
        loads_bounded(json.dumps(nested_lists(11)), 10, "x")
    assert loads_bounded('{"a": [1]}', 2, "x") == {"a": [1]}


def test_canonical_json_refuses_values_deeper_than_it_can_walk() -> None:
    # Deep enough for a RecursionError in a recursive walk, not deep enough for the parser.
    for value in (nested_lists(VERY_DEEP), nested_dicts(2_000)):
        with pytest.raises(NonHashableValueError, match=f"more than {MAX_DEPTH} levels deep"):
            canonical_json(value)
    assert canonical_json(nested_lists(MAX_DEPTH)) == "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH


def test_the_validator_and_compiler_refuse_a_very_deep_document_with_a_finding() -> None:
    doc = wf.single_tool_lwir(args={"deep": nested_lists(VERY_DEEP)})
    (finding,) = validate_lwir(doc)
    assert finding.code == "lwir.non_hashable"
    assert finding.message.startswith(f"Values nested more than {MAX_DEPTH} levels deep")
    with pytest.raises(InvalidInputError):
        compile_lwir(doc)
