"""An outer loop's budget, in process: each cycle's run gets what the loop has left as its
own budget, the cycle's planner call holds its worst case against it before it is sent, and
a loop with nothing left starts no cycle (``budget_exceeded``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from little_dist import run_outer_loop, run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.outer_loop.loop import OuterLoopError
from little_dist.outer_loop.report import outer_loop_report
from little_dist.run_state import materialize_run_state
from little_dist.testing import ScriptedModel, Usage
from little_dist.world.local import LocalWorld
from tests.outer_loop_helpers import simple_lwir, simple_workflow

# The workflow's model is priced as openai/gpt-4o-mini: $0.15 in, $0.60 out per million.
PLANNER = Usage(input=100, output=50)  # $0.000045 a cycle (its worst case: about $0.0007)
CHEAP = Usage(input=1000, output=200)  # $0.00027 a decision
DEAR = Usage(input=10000, output=1000)  # $0.0021 a decision


def _script(decision: Usage) -> ScriptedModel:
    script = ScriptedModel()
    script.on(step="planner").reply_json(simple_lwir(), usage=PLANNER, times=None)
    script.on(step="supervisor").reply_json(
        {"kind": "continue", "promptNote": "again"}, usage=decision, times=None
    )
    return script


def _budgets(world: LocalWorld, run_ids: list[str]) -> list[float | None]:
    return [
        materialize_run_state(world.list_events(run_id), run_id=run_id).budget_usd
        for run_id in run_ids
    ]


def test_an_outer_loops_cycles_spend_from_its_budget_and_it_stops_before_it(
    tmp_path: Path,
) -> None:
    world = LocalWorld(tmp_path / "data")
    budget = 0.0012  # two cycles, then a planner call whose worst case does not fit
    with _script(CHEAP).installed() as script, pytest.raises(RunFailedError) as failed:
        run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=10,
            world=world,
            outer_loop_id="ol_budget",
            budget_usd=budget,
        )
    assert failed.value.cause_code == "budget_exceeded"
    report = outer_loop_report(world, "ol_budget")
    runs = [cycle.run_id for cycle in report.cycles]
    assert [cycle.status for cycle in report.cycles] == ["completed", "completed", "failed"]
    planner_calls = [call for call in script.calls if call.step_path == "planner"]
    assert len(planner_calls) == 2  # the third cycle's was never sent
    # Each cycle's budget is what the loop had left when it started.
    per_cycle = 0.000045 + 0.00027
    assert _budgets(world, runs) == pytest.approx(
        [budget, budget - per_cycle, budget - 2 * per_cycle]
    )
    assert report.total.cost_usd == pytest.approx(2 * per_cycle)
    assert report.total.cost_usd <= budget


def test_a_loop_with_nothing_left_starts_no_cycle(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    with _script(DEAR).installed(), pytest.raises(OuterLoopError) as failed:
        run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=10,
            world=world,
            outer_loop_id="ol_budget_dear",
            budget_usd=0.0012,
        )
    assert failed.value.cause_code == "budget_exceeded"
    assert "no cycle can start" in str(failed.value)
    report = outer_loop_report(world, "ol_budget_dear")
    assert len(report.cycles) == 1  # the supervisor's call spent the rest


def test_a_planner_call_the_budget_cannot_hold_is_not_sent(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    with _script(CHEAP).installed() as script, pytest.raises(RunFailedError) as failed:
        run_workflow(
            simple_workflow(), {"value": "v"}, world=world, run_id="run_plan_poor", budget_usd=1e-4
        )
    assert failed.value.cause_code == "budget_exceeded"
    assert "Planner of 'outer-loop-test.simple' stopped" in str(failed.value)
    assert script.calls == []
    state = materialize_run_state(world.list_events("run_plan_poor"), run_id="run_plan_poor")
    assert state.status == "failed" and state.reserved_usd == 0
