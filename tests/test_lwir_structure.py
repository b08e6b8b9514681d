"""Graph checks: SCCs, cycles, reachability, deadlocks, terminal steps, step-list rules."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from little_dist.lwir import validate_lwir
from little_dist.lwir.structure import Graph, can_reach, strongly_connected_components
from tests.conftest import load_vectors

_BASE: dict[str, Any] = load_vectors("lwir_validation")[0]["lwir"]


def _doc(steps: list[Any], **extra: Any) -> dict[str, Any]:
    doc = copy.deepcopy(_BASE)
    doc["permissions"]["models"] = ["m"]
    doc["steps"] = steps
    doc.update(extra)
    return doc


def _ai(step_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "ai.generate",
        "with": {"model": "m", "prompt": fields.pop("prompt", "Draft.")},
        "output": {"mode": "text"},
        **fields,
    }


def _codes(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f.code, f.path) for f in validate_lwir(doc)]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.sets(st.sampled_from("abcdef")), max_size=6))
def test_sccs_match_mutual_reachability(edges: dict[str, set[str]]) -> None:
    nodes = sorted(set(edges) | {n for targets in edges.values() for n in targets})
    graph: Graph = {node: dict.fromkeys(sorted(edges.get(node, ()))) for node in nodes}
    components = strongly_connected_components(nodes, graph)
    assert sorted(n for component in components for n in component) == nodes
    for component in components:
        for a in component:
            for b in component:
                if a != b:
                    assert can_reach(a, b, graph) and can_reach(b, a, graph)
    for i, first in enumerate(components):
        for second in components[i + 1 :]:
            assert not (
                can_reach(first[0], second[0], graph) and can_reach(second[0], first[0], graph)
            )


def test_tarjan_is_iterative() -> None:
    chain: Graph = {str(i): {str(i + 1): None} for i in range(20_000)}
    chain["20000"] = {"0": None}
    (component,) = strongly_connected_components(list(chain), chain)
    assert len(component) == 20_001


def test_valid_linear_chain_and_single_terminal() -> None:
    assert _codes(_doc([_ai("a"), _ai("b", needs=["a"])])) == []
    assert ("terminal.ambiguous", "$.steps") in _codes(_doc([_ai("a"), _ai("b")]))


def test_terminal_ambiguity_is_top_level_only() -> None:
    parallel = copy.deepcopy(
        next(
            v
            for v in load_vectors("lwir_validation")
            if v["name"] == "valid_parallel_with_fan_in_envelope"
        )["lwir"]
    )
    parallel["steps"][0]["steps"].append(copy.deepcopy(parallel["steps"][0]["steps"][0]))
    parallel["steps"][0]["steps"][1]["id"] = "second"
    assert validate_lwir(parallel) == []


def test_deadlock_when_a_step_needs_a_routed_target_with_needs() -> None:
    steps = [
        _ai("a"),
        {
            "id": "route",
            "uses": "decision",
            "needs": ["a"],
            "with": {"cases": [{"when": "{{ steps.a.output.ok }}", "to": "x"}], "default": "end"},
        },
        _ai("x", needs=["a"]),
        _ai("y", needs=["x"]),
    ]
    assert ("lwir.decision_target_referenced_by_needs", "$.steps[3].needs") in _codes(_doc(steps))
    steps[2].pop("needs")  # a target without needs runs on the first pass anyway
    assert "lwir.decision_target_referenced_by_needs" not in {c for c, _ in _codes(_doc(steps))}


def test_back_edge_reads_need_reachability() -> None:
    loop = [
        _ai("worker", maxVisits=3, prompt="{{ steps.review.lastOutput }}"),
        _ai("review", needs=["worker"], maxVisits=3),
        {
            "id": "route",
            "uses": "decision",
            "needs": ["review"],
            "maxVisits": 3,
            "with": {
                "cases": [{"when": "{{ steps.review.lastOutput.ok }}", "to": "end"}],
                "default": "worker",
            },
        },
    ]
    assert _codes(_doc(loop)) == []
    loop[0]["with"]["prompt"] = "{{ steps.review.output }}"  # not a loop read: needs `needs`
    codes = _codes(_doc(loop))
    assert ("step.undeclared_dependency", "$.steps[0].with.prompt") in codes
    assert ("lwir.output_ambiguous_for_multi_visit", "$.steps[0].with.prompt") in codes


def test_invalid_and_duplicate_ids_are_skipped_by_later_checks() -> None:
    steps: list[Any] = [
        _ai("a"),
        _ai("a", needs=["ghost"]),
        {"uses": "ai.generate"},
        "junk",
        _ai("", needs=[""]),
    ]
    assert _codes(_doc(steps)) == [
        ("step.duplicate_id", "$.steps[1].id"),
        ("step.invalid_id", "$.steps[2].id"),
        ("step.invalid", "$.steps[3]"),
        ("step.invalid_id", "$.steps[4].id"),
        # the terminal rule reads raw ids: both "a" steps count, "" is needed
        ("terminal.ambiguous", "$.steps"),
    ]


def test_max_visits_compares_like_javascript() -> None:
    # A string maxVisits is out of range, but upstream still coerces it when comparing.
    steps = [_ai("a", maxVisits="3"), _ai("b", needs=["a"], prompt="{{ steps.a.output }}")]
    codes = _codes(_doc(steps))
    assert ("step.max_visits_out_of_range", "$.steps[0].maxVisits") in codes
    assert ("lwir.output_ambiguous_for_multi_visit", "$.steps[1].with.prompt") in codes
    steps[0]["maxVisits"] = None  # null ?? 1 is 1
    assert ("lwir.output_ambiguous_for_multi_visit", "$.steps[1].with.prompt") not in _codes(
        _doc(steps)
    )


def test_undefined_and_null_differ() -> None:
    step = _ai("a")
    assert _codes(_doc([dict(step, sensitive=None)])) == [
        ("step.sensitive_must_be_boolean", "$.steps[0].sensitive")
    ]
    assert _codes(_doc([dict(step, cache=None)])) == [
        ("schema.unimplemented_field", "$.steps[0].cache")
    ]
    assert _codes(_doc([step], permissions=None)) == [
        ("schema.invalid", "$.permissions"),
        ("model.disallowed", "$.steps[0].with.model"),
    ]


def test_integral_floats_are_integers() -> None:
    assert _codes(_doc([_ai("a", maxVisits=2.0), _ai("b", needs=["a"])])) == []
