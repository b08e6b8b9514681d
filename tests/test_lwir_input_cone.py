"""``lwir-input-cone@v1``, upstream's ``lwir-input-cone.test.ts`` cases ported: who is in a
step's cone, what edit changes its hash and what does not, the escape hatches to the whole
document, decision and parallel edges, cycles, and the errors."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from little_dist.lwir.input_cone import (
    LWIR_INPUT_CONE_ALGORITHM,
    LwirInputConeError,
    input_cone_hash,
    input_cone_snapshot,
)

OBJ = {"type": "object"}


def base(steps: list[Any], **overrides: Any) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "input-cone.test", "version": "0.1.0-alpha"},
        "input": {"schema": OBJ},
        "output": {"schema": OBJ},
        "permissions": {"models": ["m"], "tools": [], "secrets": [], "network": []},
        "steps": steps,
        **overrides,
    }


def gen(step_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "ai.generate",
        "input": "{{ input }}",
        "with": {"model": "m", "prompt": f"prompt for {step_id}"},
        "output": {"mode": "object", "schema": OBJ},
        **extra,
    }


def chain(mutate: Callable[[list[Any]], None] = lambda steps: None) -> dict[str, Any]:
    """a -> b -> c, and ``side``, which nothing needs."""
    steps = [
        gen("a"),
        gen("b", needs=["a"], input="{{ steps.a.output }}"),
        gen("c", needs=["b"], input="{{ steps.b.output }}"),
        gen("side"),
    ]
    mutate(steps)
    return base(steps)


def h(lwir: Any, step: str) -> str:
    return input_cone_hash(lwir, step).hash


def edited(index: int, step: dict[str, Any]) -> dict[str, Any]:
    def put(steps: list[Any]) -> None:
        steps[index] = step

    return chain(put)


def test_the_result_names_its_algorithm_and_the_digest_is_sha256() -> None:
    cone = input_cone_hash(chain(), "b")
    assert (cone.algorithm, cone.step_id, cone.scope, cone.cyclic) == (
        "lwir-input-cone@v1",
        "b",
        "steps",
        False,
    )
    assert LWIR_INPUT_CONE_ALGORITHM == "lwir-input-cone@v1"
    assert cone.hash.startswith("sha256:") and len(cone.hash) == 71
    assert input_cone_snapshot(chain(), "b")["algorithm"] == "lwir-input-cone@v1"


def test_the_cone_is_the_step_and_its_transitive_influencers_only() -> None:
    assert input_cone_hash(chain(), "c").step_ids == ("a", "b", "c")
    assert input_cone_hash(chain(), "b").step_ids == ("a", "b")
    assert input_cone_hash(chain(), "a").step_ids == ("a",)


def test_step_order_key_order_and_needs_order_do_not_matter() -> None:
    forward = base([gen("a"), gen("b", needs=["a"], input="{{ steps.a.output }}")])
    shuffled = base([gen("b", needs=["a"], input="{{ steps.a.output }}"), gen("a")])
    assert h(shuffled, "b") == h(forward, "b")
    reversed_keys = copy.deepcopy(forward)
    reversed_keys["steps"] = [dict(reversed(list(s.items()))) for s in forward["steps"]]
    assert h(reversed_keys, "b") == h(forward, "b")
    both = "{{ steps.a.output }}{{ steps.b.output }}"
    left = base([gen("a"), gen("b"), gen("c", needs=["a", "b"], input=both)])
    right = base([gen("a"), gen("b"), gen("c", needs=["b", "a"], input=both)])
    assert h(left, "c") == h(right, "c")
    empty = base([gen("a", needs=[]), gen("b", needs=["a"], input="{{ steps.a.output }}")])
    assert h(empty, "b") == h(forward, "b")


def test_after_the_escape_hatch_order_matters_again() -> None:
    def ordered(needs: list[str]) -> dict[str, Any]:
        return base([gen("a"), gen("side"), gen("b", needs=needs, input="own id is {{ step.id }}")])

    assert input_cone_hash(ordered(["a", "side"]), "b").scope == "whole-document"
    assert h(ordered(["side", "a"]), "b") != h(ordered(["a", "side"]), "b")


def test_upstream_edits_change_the_hash_and_downstream_or_unrelated_ones_do_not() -> None:
    before_c, before_b = h(chain(), "c"), h(chain(), "b")
    assert h(edited(0, gen("a", **{"with": {"model": "m", "prompt": "new"}})), "c") != before_c
    schema = {"mode": "object", "schema": {"type": "object", "required": ["x"]}}
    assert h(edited(0, gen("a", output=schema)), "c") != before_c
    assert h(edited(0, gen("a", sensitive=True)), "c") != before_c
    assert h(
        edited(0, gen("a", onFailure={"repair": {"mode": "self", "maxAttempts": 3}})), "c"
    ) != (before_c)
    downstream = gen(
        "c",
        needs=["b"],
        input="{{ steps.b.output }}",
        **{"with": {"model": "m", "prompt": "rewritten"}},
    )
    assert h(edited(2, downstream), "b") == before_b
    assert h(edited(3, gen("side", **{"with": {"model": "o", "prompt": "u"}})), "b") == before_b
    removed = base([gen("a"), gen("b", needs=["a"], input="{{ steps.a.output }}")])
    assert h(removed, "b") == before_b


def test_renaming_the_target_or_an_influencer_changes_the_hash() -> None:
    before = h(chain(), "b")
    renamed = base([gen("a"), gen("b2", needs=["a"], input="{{ steps.a.output }}")])
    assert h(renamed, "b2") != before
    upstream = base([gen("a2"), gen("b", needs=["a2"], input="{{ steps.a2.output }}")])
    assert h(upstream, "b") != before


@pytest.mark.parametrize(
    "extra",
    [
        {"output": {"mode": "text"}},
        {"onFailure": {"repair": {"mode": "self", "maxAttempts": 2}}},
        {"onFailure": {"fixer": {"model": "m", "maxAttempts": 1, "system": "you fix things"}}},
        {"sensitive": True},
        {"input": "{{ steps.a.output.summary }}"},
        {"with": {"model": "m", "prompt": "a rewritten prompt"}},
    ],
)
def test_every_field_of_the_target_is_hashed(extra: dict[str, Any]) -> None:
    step = {**gen("b", needs=["a"], input="{{ steps.a.output }}"), **extra}
    assert h(edited(1, step), "b") != h(chain(), "b")


def test_workflow_level_fields_are_hashed_except_metadata() -> None:
    steps = chain()["steps"]
    before = h(base(steps), "b")
    meta = {"name": "renamed", "version": "9.9.9", "description": "now with prose"}
    assert h(base(steps, metadata=meta), "b") == before
    assert h(base(steps, output={"schema": {"type": "object", "required": ["r"]}}), "b") != before
    perms = {"models": ["m", "n"], "tools": ["search"], "secrets": [], "network": []}
    assert h(base(steps, permissions=perms), "b") != before
    assert h(base(steps, futureKey={"retries": 1}), "b") != h(
        base(steps, futureKey={"retries": 2}), "b"
    )
    assert h(base(steps, input={"schema": OBJ, "example": {"t": "x"}}), "b") != before
    assert h(base(steps, apiVersion="littleworkflow.dev/v0.2"), "b") != before


def test_reading_the_workflow_root_hashes_the_whole_document() -> None:
    def reads(description: str) -> dict[str, Any]:
        return base(
            [
                gen(
                    "a", **{"with": {"model": "m", "prompt": "{{ workflow.metadata.description }}"}}
                ),
                gen("b", needs=["a"], input="{{ steps.a.output }}"),
                gen("side"),
            ],
            metadata={"name": "t", "version": "1", "description": description},
        )

    cone = input_cone_hash(reads("first"), "b")
    assert cone.scope == "whole-document" and cone.step_ids == ()
    assert h(reads("second"), "b") != h(reads("first"), "b")
    assert h(reads("first"), "b") != h(reads("first"), "a")
    prose = edited(0, gen("a", **{"with": {"model": "m", "prompt": "describe the workflow"}}))
    assert input_cone_hash(prose, "b").scope == "steps"
    assert input_cone_hash(prose, "b").step_ids == ("a", "b")


def test_reading_the_step_root_or_a_stray_delimiter_hashes_the_whole_document() -> None:
    flag = gen("b", needs=["a"], input="redaction={{ step.sensitive }}")
    off, on = {**flag, "sensitive": False}, {**flag, "sensitive": True}
    assert input_cone_hash(base([gen("a"), off]), "b").scope == "whole-document"
    assert h(base([gen("a"), off]), "b") != h(base([gen("a"), on]), "b")
    influencer = base(
        [
            gen("a", input="own id is {{ step.id }}"),
            gen("b", needs=["a"], input="{{ steps.a.output }}"),
        ]
    )
    assert input_cone_hash(influencer, "b").scope == "whole-document"
    assert input_cone_hash(chain(), "b").scope == "steps"  # (steps.X is not the step root)
    hidden = "{{ steps.a.output }} }} {{ steps.side.output }}"
    stray = base([gen("a"), gen("b", needs=["a"], input=hidden), gen("side")])
    assert input_cone_hash(stray, "b").scope == "whole-document"
    stray_edit = base(
        [
            gen("a"),
            gen("b", needs=["a"], input=hidden),
            gen("side", **{"with": {"model": "m", "prompt": "different"}}),
        ]
    )
    assert h(stray_edit, "b") != h(stray, "b")
    fixer = gen(
        "b",
        needs=["a"],
        input="{{ steps.a.output }}",
        onFailure={"fixer": {"model": "m", "maxAttempts": 1, "system": "fix }} {{"}},
    )
    assert input_cone_hash(base([gen("a"), fixer]), "b").scope == "whole-document"
    plain = base(
        [gen("a", input="plain prose"), gen("b", needs=["a"], input="{{ steps.a.output }}")]
    )
    assert input_cone_hash(plain, "b").scope == "steps"


def decision(when: str, seed_prompt: str = "prompt for seed") -> dict[str, Any]:
    return base(
        [
            gen("seed", **{"with": {"model": "m", "prompt": seed_prompt}}),
            {
                "id": "route",
                "uses": "decision",
                "needs": ["seed"],
                "with": {"cases": [{"when": when, "to": "left"}], "default": "right"},
            },
            gen("left"),
            gen("right"),
            gen("join", needs=["left"], input="{{ steps.left.output }}"),
        ]
    )


def test_a_decision_routing_to_a_step_is_in_its_cone() -> None:
    ok = "{{ steps.seed.output.ok }}"
    assert input_cone_hash(decision(ok), "left").step_ids == ("left", "route", "seed")
    assert input_cone_hash(decision(ok), "join").step_ids == ("join", "left", "route", "seed")
    assert h(decision("{{ steps.seed.output.ready }}"), "left") != h(decision(ok), "left")
    assert h(decision(ok, "a different seed prompt"), "left") != h(decision(ok), "left")


def loop(prompt: str) -> dict[str, Any]:
    return base(
        [
            gen("draft", maxVisits=3),
            gen(
                "critique",
                needs=["draft"],
                maxVisits=3,
                input="{{ steps.draft.lastOutput }}",
                **{"with": {"model": "m", "prompt": prompt}},
            ),
            {
                "id": "gate",
                "uses": "decision",
                "needs": ["critique"],
                "maxVisits": 3,
                "with": {
                    "cases": [{"when": "{{ steps.critique.lastOutput.done }}", "to": "end"}],
                    "default": "draft",
                },
            },
        ]
    )


def test_back_edges_and_cycles() -> None:
    late = base([gen("early", maxVisits=2), gen("late", input="{{ steps.early.lastOutput }}")])
    assert input_cone_hash(late, "late").step_ids == ("early", "late")
    cone = input_cone_hash(loop("critique it"), "draft")
    assert cone.cyclic and cone.step_ids == ("critique", "draft", "gate")
    shuffled = base(list(reversed(loop("critique it")["steps"])))
    assert h(shuffled, "draft") == h(loop("critique it"), "draft")
    solo = input_cone_hash(base([gen("solo", needs=["solo"], maxVisits=2)]), "solo")
    assert solo.cyclic and solo.step_ids == ("solo",)


def fan(branch: list[Any], needs: list[str], shared: bool = False) -> dict[str, Any]:
    return base(
        [
            *([gen("shared")] if shared else []),
            gen("seed"),
            {
                "id": "fan",
                "uses": "parallel",
                "needs": needs,
                "with": {"items": "{{ steps.seed.output.items }}", "itemKey": "{{ item.id }}"},
                "steps": branch,
                "output": {"mode": "array", "schema": {"type": "array"}},
            },
            gen("report", needs=["fan"], input="{{ steps.fan.output }}"),
        ]
    )


def test_parallel_branch_bodies() -> None:
    one = fan([gen("branch", input="{{ item }}")], ["seed"])
    other = fan(
        [gen("branch", input="{{ item }}", **{"with": {"model": "m", "prompt": "x"}})], ["seed"]
    )
    assert h(one, "report") != h(other, "report")
    local = fan(
        [
            gen("first", input="{{ item }}"),
            gen("second", needs=["first"], input="{{ steps.first.output }}"),
        ],
        ["seed"],
    )
    assert input_cone_hash(local, "report").step_ids == ("fan", "report", "seed")
    outer = fan([gen("branch", input="{{ steps.shared.output }}")], ["seed"], shared=True)
    assert input_cone_hash(outer, "report").step_ids == ("fan", "report", "seed", "shared")


@pytest.mark.parametrize(
    ("lwir", "step", "code"),
    [
        (base([gen("a")]), "nope", "step_not_found"),
        (base([gen("a"), gen("a")]), "a", "duplicate_step_id"),
        (base([gen("a", needs=["ghost"])]), "a", "missing_reference"),
        (base([gen("a", input="{{ steps.ghost.output }}")]), "a", "missing_reference"),
        (
            base([{"id": "d", "uses": "decision", "with": {"default": "ghost"}}]),
            "d",
            "missing_reference",
        ),
        (fan([gen("branch")], ["seed"]), "branch", "nested_step_unsupported"),
        (base([gen("a", needs="b")]), "a", "invalid_lwir"),
        ({"steps": "no"}, "a", "invalid_lwir"),
        (["not", "a", "document"], "a", "invalid_lwir"),
        (base([{"uses": "ai.generate"}]), "a", "invalid_lwir"),
        (base([gen("a")]), "", "step_not_found"),
    ],
)
def test_what_has_no_cone_is_an_error_with_upstreams_code(lwir: Any, step: str, code: str) -> None:
    with pytest.raises(LwirInputConeError) as raised:
        input_cone_hash(lwir, step)
    assert raised.value.code == code
