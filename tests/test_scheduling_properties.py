"""Property: any completion order of any DAG finishes with every step completed exactly once."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little_dist.scheduling import StepDispatch
from tests.test_scheduling_sim import Outcome, Sim, lwir_doc, parallel, tool


@st.composite
def dags(draw: st.DrawFn) -> list[dict[str, Any]]:
    size = draw(st.integers(min_value=1, max_value=9))
    steps: list[dict[str, Any]] = []
    for index in range(size):
        needs = sorted(draw(st.sets(st.sampled_from(range(index)), max_size=3)) if index else set())
        steps.append(tool(f"s{index}", needs=[f"s{n}" for n in needs] or None))
    needed = {need for step in steps for need in step.get("needs", [])}
    sinks = [step["id"] for step in steps if step["id"] not in needed]
    if len(sinks) > 1:
        steps.append(tool("final", needs=sinks))
    order = draw(st.permutations(range(len(steps))))
    return [steps[i] for i in order]  # LWIR order need not be topological


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=dags(), seed=st.integers(min_value=0, max_value=2**16), flaky=st.booleans())
def test_random_dag_random_order_completes_each_step_once(
    steps: list[dict[str, Any]], seed: int, flaky: bool
) -> None:
    if flaky:
        for step in steps:
            step["retry"] = {"maxAttempts": 2}
    rng = random.Random(seed)
    failed_once: set[str] = set()

    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        # Every step that needs `x` must only run after `x` completed.
        for need in next(s for s in steps if s["id"] == dispatch.step_id).get("needs", []):
            assert sim.state.steps[need].status == "completed"
        if flaky and dispatch.step_path not in failed_once and rng.random() < 0.3:
            failed_once.add(dispatch.step_path)
            return ("fail", {"name": "Flaky", "message": "again", "retriable": True})
        return ("ok", dispatch.step_path)

    sim = Sim(lwir_doc(steps))
    state = sim.run(worker, choose=lambda ready: rng.randrange(len(ready)))
    assert state.status == "completed"
    completed = [p["stepPath"] for p in sim.types("StepCompleted")]
    assert sorted(completed) == sorted(step["id"] for step in steps)
    assert len(sim.types("StepScheduled")) == len(steps)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    count=st.integers(min_value=0, max_value=12),
    concurrency=st.integers(min_value=1, max_value=4),
    seed=st.integers(min_value=0, max_value=2**16),
    order=st.sampled_from(["input", "itemKey"]),
)
def test_random_branch_completion_orders_give_the_same_fan_in(
    count: int, concurrency: int, seed: int, order: str
) -> None:
    keys = [f"k{(i * 7) % 13:02d}" for i in range(count)]
    children = [tool("one", input={"id": "{{ item.id }}"}), tool("two", needs=["one"])]
    doc = lwir_doc(
        [parallel("p", children, max_concurrency=concurrency, order=order)],
        output_schema={"type": "array"},
    )
    rng = random.Random(seed)
    sim = Sim(doc, {"items": [{"id": key} for key in keys]})
    state = sim.run(choose=lambda ready: rng.randrange(len(ready)))
    assert state.status == "completed"
    expected = keys if order == "input" else sorted(keys)
    assert [entry["itemKey"] for entry in state.output] == expected
    assert all(entry["output"]["path"].endswith(".two") for entry in state.output)
