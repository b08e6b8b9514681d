"""step_context: expression roots, step input resolution, branch items, fan-in."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.expressions import UNDEFINED, evaluate
from little_dist.step_context import (
    BranchResult,
    StepPathError,
    expression_context,
    fan_in_output,
    resolve_step_config,
    resolve_step_input,
)
from tests.test_scheduling_sim import Sim, lwir_doc, parallel, tool


def loop_sim(visits: int) -> Sim:
    doc = lwir_doc(
        [
            tool("draft", maxVisits=3),
            {
                "id": "route",
                "uses": "decision",
                "needs": ["draft"],
                "maxVisits": 3,
                "with": {
                    "cases": [{"when": "{{ steps.draft.lastOutput.done }}", "to": "end"}],
                    "default": "draft",
                },
            },
        ]
    )
    sim = Sim(doc, {"topic": "owls"})
    sim.run(
        lambda s, d, i: (
            "ok",
            {"n": int(d.step_path[-2]), "done": d.step_path.endswith(f"[{visits - 1}]")},
        )
    )
    return sim


def test_roots_input_step_workflow_and_steps() -> None:
    sim = Sim(lwir_doc([tool("a"), tool("b", needs=["a"])]), {"q": 1})
    sim.run()
    context = expression_context(sim.ctx, sim.state, "b")
    assert context["input"] == {"q": 1}
    assert context["step"]["id"] == "b"
    assert context["workflow"] is sim.version.lwir
    assert "item" not in context
    assert context["steps"]["a"] == {"output": {"path": "a", "input": {"q": 1}}}


def test_loop_steps_aggregate_visits_for_last_output_and_all_visits() -> None:
    sim = loop_sim(3)
    context = expression_context(sim.ctx, sim.state, "route.visit[2]")
    draft = context["steps"]["draft"]
    assert [v["n"] for v in draft["visits"]] == [0, 1, 2]
    assert draft["output"] == draft["visits"][-1]
    assert evaluate("{{ steps.draft.lastOutput.n }}", context) == 2
    assert [v["n"] for v in evaluate("{{ steps.draft.allVisits }}", context)] == [0, 1, 2]


def test_incomplete_steps_are_absent() -> None:
    sim = Sim(lwir_doc([tool("a"), tool("b", needs=["a"])]))
    sim.decide()
    assert expression_context(sim.ctx, sim.state, "b")["steps"] == {}


def branch_sim() -> Sim:
    children = [
        tool(
            "one",
            input={"id": "{{ item.id }}", "top": "{{ steps.prep.output.path }}"},
            needs=["prep"],
        ),
        tool("two", needs=["one"]),
        tool("three", needs=["two", "one"]),
    ]
    children[2]["with"]["args"] = {"from": "{{ steps.one.output.input.id }}"}
    doc = lwir_doc(
        [tool("prep"), parallel("p", children, needs=["prep"])], output_schema={"type": "array"}
    )
    return Sim(doc, {"items": [{"id": "a", "n": 1}, {"id": "b", "n": 2}]})


def test_branch_context_has_item_and_branch_local_steps() -> None:
    sim = branch_sim()
    sim.run()
    context = expression_context(sim.ctx, sim.state, "p[b].two")
    assert context["item"] == {"id": "b", "n": 2}
    assert set(context["steps"]) == {"prep", "one", "two", "three"}
    assert context["steps"]["one"]["output"]["input"] == {"id": "b", "top": "prep"}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("p[a].one", {"id": "a", "top": "prep"}),  # step.input
        ("p[a].three", {"from": "a"}),  # with.args
        ("p[b].two", {"id": "b", "n": 2}),  # the branch item
        ("prep", {"items": [{"id": "a", "n": 1}, {"id": "b", "n": 2}]}),  # the run input
    ],
    ids=["input", "with-args", "item", "run-input"],
)
def test_resolve_step_input(path: str, expected: Any) -> None:
    sim = branch_sim()
    sim.run()
    assert resolve_step_input(sim.ctx, sim.state, path) == expected


def test_resolve_step_input_of_a_retried_parallel_attempt_path() -> None:
    sim = branch_sim()
    sim.run()
    value = resolve_step_input(sim.ctx, sim.state, "p@attempt_2[b].two")
    assert value == {"id": "b", "n": 2}


def test_unrecorded_branches_are_resolved_once_per_run_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fan-out's refill may run before its ParallelBranchScheduled is in the log: its item
    # comes from the branch list resolved for the context, not a fresh one per branch
    # (that was O(branches) per branch on a wide fan-out).
    from little_dist.scheduling import context as context_module

    sim = branch_sim()
    sim.run()
    calls: list[str] = []
    resolve = context_module.resolve_branches

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2])
        return resolve(*args, **kwargs)

    monkeypatch.setattr(context_module, "resolve_branches", counting)
    assert resolve_step_input(sim.ctx, sim.state, "p@attempt_2[a].two") == {"id": "a", "n": 1}
    assert resolve_step_input(sim.ctx, sim.state, "p@attempt_2[b].two") == {"id": "b", "n": 2}
    assert calls == ["p"]


def test_resolve_step_config_renders_with() -> None:
    sim = Sim(lwir_doc([tool("a", input={"x": "{{ input.q }}"})]), {"q": "hi"})
    sim.decide()
    assert resolve_step_config(sim.ctx, sim.state, "a") == {"tool": "t"}


def test_output_by_ref_is_loaded_with_the_loader() -> None:
    from little_dist.events import EventInput

    sim = Sim(lwir_doc([tool("a"), tool("b", needs=["a"])]))
    (dispatch,) = sim.decide().dispatch
    sim.start(dispatch)
    sim.append(
        [
            EventInput(
                type="StepCompleted",
                payload={
                    "stepPath": "a",
                    "attempt": 1,
                    "outputRef": "artifact://art_0123456789abcdef",
                },
                occurrence_id="end:a:1",
            )
        ]
    )
    assert expression_context(sim.ctx, sim.state, "b")["steps"]["a"] == {}
    loaded = expression_context(sim.ctx, sim.state, "b", load_output=lambda ref: {"ref": ref})
    assert loaded["steps"]["a"] == {"output": {"ref": "artifact://art_0123456789abcdef"}}


@pytest.mark.parametrize("path", ["nope", "a.visit[0]", "p[x]", "p[x].nope", "a[x].b"])
def test_unknown_paths_raise(path: str) -> None:
    sim = Sim(lwir_doc([tool("a")]))
    with pytest.raises(StepPathError):
        expression_context(sim.ctx, sim.state, path)


def test_fan_in_orders_and_envelopes() -> None:
    results = [
        BranchResult(
            0, "b", True, output={"v": 1}, output_ref="artifact://art_1", artifacts=("x",)
        ),
        BranchResult(1, "a", False, error={"name": "E", "message": "m", "retriable": False}),
        BranchResult(2, "c", True, output=None),
    ]
    assert fan_in_output("input", results) == [
        {
            "itemKey": "b",
            "status": "completed",
            "output": {"v": 1},
            "outputRef": "artifact://art_1",
            "artifacts": ["x"],
        },
        {
            "itemKey": "a",
            "status": "failed",
            "error": {"name": "E", "message": "m", "retriable": False},
            "artifacts": [],
        },
        {"itemKey": "c", "status": "completed", "output": None, "artifacts": []},
    ]
    assert [e["itemKey"] for e in fan_in_output("itemKey", results)] == ["a", "b", "c"]
    ref_only = BranchResult(0, "r", True, output=UNDEFINED, output_ref="artifact://art_2")
    assert fan_in_output("input", [ref_only]) == [
        {"itemKey": "r", "status": "completed", "outputRef": "artifact://art_2", "artifacts": []}
    ]
