"""The ``steps`` root of an expression scope is read on demand (issue 38).

A step's input costs the steps its expressions name, not every completed step before it: a
chain of N steps resolved its inputs in O(N) each (O(N^2) in all), and loaded every earlier
output stored as an artifact, used or not.
"""

from __future__ import annotations

from typing import Any

from little_dist.events import EventInput
from little_dist.expressions import resolve_value
from little_dist.scheduling.context import StepOutputs, StepView, scope_steps_root
from little_dist.scheduling.step_graph import plan_for
from little_dist.step_context import expression_context, resolve_step_input
from tests.test_scheduling_sim import Sim, lwir_doc, parallel, tool


def _chain(length: int, *, reads: str, last_input: str) -> Sim:
    """A chain s0 -> ... -> s{length-1}, whose last step's input is ``last_input`` (which
    reads step ``reads``, declared in its needs)."""
    steps = [tool("s0")]
    steps += [tool(f"s{i}", needs=[f"s{i - 1}"]) for i in range(1, length)]
    steps[-1]["input"] = {"x": last_input}
    steps[-1]["needs"] = sorted({*steps[-1]["needs"], reads})
    return Sim(lwir_doc(steps), {"q": 1})


def _run_until(sim: Sim, path: str, *, by_ref: bool = False) -> None:
    """Play the chain until ``path`` is dispatched (its input is then resolvable); each
    output inline, or (``by_ref``) stored only as an artifact reference."""
    for _ in range(10_000):
        dispatches = sim.decide().dispatch
        if any(d.step_path == path for d in dispatches):
            return
        (dispatch,) = dispatches
        sim.start(dispatch)
        if not by_ref:
            sim.finish(dispatch, ("ok", {"n": dispatch.step_path}))
            continue
        payload = {
            "stepPath": dispatch.step_path,
            "stepId": dispatch.step_id,
            "attempt": dispatch.attempt,
            "outputRef": f"artifact://ref-{dispatch.step_path}",
        }
        sim.append(
            [
                EventInput(
                    type="StepCompleted",
                    payload=payload,
                    occurrence_id=f"end:{dispatch.step_path}:1",
                )
            ]
        )
    raise AssertionError(f"{path} was never dispatched")


def test_a_step_reads_only_the_steps_its_input_names() -> None:
    sim = _chain(60, reads="s3", last_input="{{ steps.s3.output.n }}")
    _run_until(sim, "s59")
    plan = plan_for(sim.ctx.version)
    looked: list[str] = []

    def lookup(path: str) -> StepView | None:
        looked.append(path)
        return sim.state.steps.get(path)

    steps = scope_steps_root(plan.top, "", lookup)
    assert resolve_value("{{ steps.s3.output.n }}", {"steps": steps}) == "s3"
    assert looked == ["s3"]  # one of the 59 completed steps, not all of them
    # Read twice, built once.
    assert resolve_value("{{ steps.s3.output }}", {"steps": steps}) == {"n": "s3"}
    assert looked == ["s3"]
    assert resolve_step_input(sim.ctx, sim.state, "s59") == {"x": "s3"}


def test_outputs_stored_as_artifacts_are_loaded_only_when_named() -> None:
    sim = _chain(5, reads="s1", last_input="{{ steps.s1.output }}")
    _run_until(sim, "s4", by_ref=True)
    loaded: list[str] = []

    def load(ref: str) -> Any:
        loaded.append(ref)
        return {"loaded": ref}

    assert resolve_step_input(sim.ctx, sim.state, "s4", load_output=load) == {
        "x": {"loaded": "artifact://ref-s1"}
    }
    assert loaded == ["artifact://ref-s1"]


def test_as_a_mapping_it_is_every_completed_step_in_order() -> None:
    sim = _chain(4, reads="s0", last_input="{{ steps.s0.output }}")
    _run_until(sim, "s3")
    plan = plan_for(sim.ctx.version)
    steps = scope_steps_root(plan.top, "", sim.state.steps.get)
    assert isinstance(steps, StepOutputs)
    assert list(steps) == ["s0", "s1", "s2"]
    assert len(steps) == 3
    assert "s3" not in steps and "nope" not in steps and 7 not in steps
    assert dict(steps) == {f"s{i}": {"output": {"n": f"s{i}"}} for i in range(3)}
    # The public context stays a plain dict of them all.
    context = expression_context(sim.ctx, sim.state, "s3")
    assert type(context["steps"]) is dict and context["steps"] == dict(steps)


def test_inside_a_branch_its_own_step_wins_over_a_top_step_of_the_same_id() -> None:
    doc = lwir_doc(
        [
            tool("a"),
            parallel(
                "p",
                [tool("a"), tool("b", needs=["a"])],
                items="{{ input.items }}",
                needs=["a"],
            ),
        ]
    )
    sim = Sim(doc, {"items": [{"id": "x"}]})
    for _ in range(50):
        decision = sim.decide()
        paths = [d.step_path for d in decision.dispatch]
        if any(path.endswith(".b") for path in paths):
            break
        for dispatch in decision.dispatch:
            sim.start(dispatch)
            sim.finish(dispatch, ("ok", {"from": dispatch.step_path}))
    branch_b = next(p for p in paths if p.endswith(".b"))
    context = expression_context(sim.ctx, sim.state, branch_b)
    assert context["steps"]["a"] == {"output": {"from": branch_b[: -len("b")] + "a"}}
    assert resolve_value("{{ steps.a.output.from }}", context) == branch_b[: -len("b")] + "a"
