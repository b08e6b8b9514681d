"""The outer-loop supervisor's call, held before it is made: against the loop's budget (in the
cycle's run log, ``little.budget.supervisor_reserved``) and against the operator's daily key
ceilings; and the planner's calls held against those ceilings too. In process."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from little_dist import model, run_outer_loop, run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.harness.quota_limiters import process_limiter
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.outer_loop import SupervisorError
from little_dist.outer_loop.budget import cycle_spent
from little_dist.outer_loop.errors import OuterLoopError
from little_dist.outer_loop.manifest import CycleSummary
from little_dist.outer_loop.store import manifest_store_for
from little_dist.outer_loop.supervisor import ModelSupervisor
from little_dist.pricing import ModelIdentity, ModelUsage, price_model_call
from little_dist.run_state import materialize_run_state
from little_dist.testing import ScriptedModel, Usage
from little_dist.world.local import LocalWorld
from tests.outer_loop_helpers import simple_lwir, simple_workflow

PLANNER = Usage(input=100, output=50)  # $0.000045 (gpt-4o-mini's rates)
DECISION = Usage(input=1000, output=200)  # $0.0045 (gpt-4o's: $2.50 in, $10 out a million)
HOLD = "little.budget.supervisor_reserved"


def _supervisor() -> ModelSupervisor:
    # A dearer model than the planner's: its worst case (1024 output tokens: over $0.01)
    # is far above the cycle's spend.
    slot = model("scripted/supervisor", id="judge", pricing="openai/gpt-4o")
    return ModelSupervisor(slot.resolved("judge"))


def _script(done: bool = True, flaky: bool = False) -> ScriptedModel:
    script = ScriptedModel()
    if flaky:  # (the supervisor's first call fails)
        script.fail(step="supervisor", times=1, error="rate_limit")
    script.on(step="planner").reply_json(simple_lwir(), usage=PLANNER, times=None)
    decision = {"kind": "done", "finalOutput": {"result": "ok"}} if done else {"kind": "continue"}
    script.on(step="supervisor").reply_json(decision, usage=DECISION, times=None)
    return script


def _price(model_id: str, usage: Usage) -> float:
    priced = price_model_call(
        ModelIdentity.from_payload({"provider": "openai", "modelId": model_id}),
        ModelUsage.from_payload({"inputTokens": usage.input, "outputTokens": usage.output}),
        fallback=litellm_price_fallback,
    )
    assert priced.cost_usd is not None
    return priced.cost_usd


def _holds(world: LocalWorld, run_id: str) -> list[float]:
    return [e.payload["reservedUsd"] for e in world.list_events(run_id) if e.type == HOLD]


def test_a_supervisor_call_the_loops_budget_cannot_hold_is_not_made(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    budget = 0.005  # the cycle's planner call fits; the supervisor's worst case does not
    with _script().installed() as script, pytest.raises(OuterLoopError) as failed:
        run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=3,
            world=world,
            outer_loop_id="ol_sup_poor",
            supervise=_supervisor(),
            budget_usd=budget,
        )
    assert failed.value.cause_code == "budget_exceeded"
    assert "the supervisor's call about cycle 1" in str(failed.value)
    assert [call.step_path for call in script.calls] == ["planner"]  # the decision: never
    stored = manifest_store_for(world).read("ol_sup_poor")
    assert stored is not None
    run_id = stored.manifest.pending_cycle_run_id
    assert run_id is not None and failed.value.run_id == run_id
    assert _holds(world, run_id) == []
    assert cycle_spent(world, run_id, 1, litellm_price_fallback) == pytest.approx(
        _price("gpt-4o-mini", PLANNER)
    )

    # Resumed with a budget that holds it: the call is held, made, and then counted at
    # its price, not its worst case.
    with _script().installed() as script:
        result = run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=3,
            world=world,
            outer_loop_id="ol_sup_poor",
            supervise=_supervisor(),
            budget_usd=0.05,
        )
    assert result.output == {"result": "ok"}
    assert [call.step_path for call in script.calls] == ["supervisor"]
    (held,) = _holds(world, run_id)
    assert held > 0.01 > _price("gpt-4o", DECISION)
    types = [e.type for e in world.list_events(run_id)]
    assert types.index(HOLD) < types.index("OuterLoopCycleCompleted")
    assert cycle_spent(world, run_id, 1, litellm_price_fallback) == pytest.approx(
        _price("gpt-4o-mini", PLANNER) + _price("gpt-4o", DECISION)
    )


def test_the_hold_is_what_the_supervisor_may_cost_and_a_resume_keeps_it(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    script = _script(flaky=True)
    supervisor = _supervisor()
    with script.installed(), pytest.raises(SupervisorError):
        run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=3,
            world=world,
            outer_loop_id="ol_sup_flaky",
            supervise=supervisor,
            budget_usd=0.05,
        )
    stored = manifest_store_for(world).read("ol_sup_flaky")
    assert stored is not None and stored.manifest.pending_cycle_run_id is not None
    run_id = stored.manifest.pending_cycle_run_id
    (held,) = _holds(world, run_id)
    # The hold is the supervisor's worst case about this cycle, counted until a decision.
    state = {
        "goal": stored.manifest.goal.to_json(),
        "cycles": [
            {
                "cycleNumber": 1,
                "workflowVersionId": materialize_run_state(
                    world.list_events(run_id), run_id=run_id
                ).workflow_version_id,
                "runId": run_id,
                "status": "completed",
                "output": {"result": "processed:v"},
            }
        ],
    }
    assert held == pytest.approx(supervisor.worst_case_usd(state, litellm_price_fallback))
    planner = _price("gpt-4o-mini", PLANNER)
    assert cycle_spent(world, run_id, 1, litellm_price_fallback) == pytest.approx(planner + held)

    # The resumed loop asks again under the same hold: none added, none forgotten; even a
    # budget that could not hold it again lets the held call go.
    with script.installed():
        result = run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=3,
            world=world,
            outer_loop_id="ol_sup_flaky",
            supervise=supervisor,
            budget_usd=planner + held,
        )
    assert result.output == {"result": "ok"}
    assert _holds(world, run_id) == [held]
    assert cycle_spent(world, run_id, 1, litellm_price_fallback) == pytest.approx(
        planner + _price("gpt-4o", DECISION)
    )


def test_the_next_cycle_gets_what_the_supervisor_left(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    budget = 0.03
    with _script(done=False).installed(), pytest.raises(OuterLoopError) as failed:
        run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=10,
            world=world,
            outer_loop_id="ol_sup_many",
            supervise=_supervisor(),
            budget_usd=budget,
        )
    # Each cycle costs a planner call and a decision; the loop stops before a supervisor's
    # worst case passes the budget, and what was spent never does.
    assert failed.value.cause_code == "budget_exceeded"
    stored = manifest_store_for(world).read("ol_sup_many")
    assert stored is not None
    cycles = list(stored.manifest.cycles)
    pending = stored.manifest.pending_cycle_run_id
    assert pending is not None and len(cycles) >= 2
    runs = [*(c.run_id for c in cycles), pending]
    spent = sum(
        cycle_spent(world, run_id, n, litellm_price_fallback)
        for n, run_id in enumerate(runs, start=1)
    )
    assert spent <= budget
    per_cycle = _price("gpt-4o-mini", PLANNER) + _price("gpt-4o", DECISION)
    assert spent == pytest.approx(len(cycles) * per_cycle + _price("gpt-4o-mini", PLANNER))
    budgets = [materialize_run_state(world.list_events(r), run_id=r).budget_usd for r in runs]
    assert budgets == pytest.approx([budget - n * per_cycle for n in range(len(runs))])


def _daily(monkeypatch: pytest.MonkeyPatch, name: str, model_name: str, usd: float) -> None:
    ceiling = {"name": name, "provider": "scripted", "model": model_name, "usd": usd}
    monkeypatch.setenv("LITTLE_QUOTAS", json.dumps({"daily": [ceiling]}))


def _day_spent(name: str) -> float:
    limiter = process_limiter()
    assert limiter is not None
    (ceiling,) = [c for c in limiter.rules.daily if c.name == name]
    return limiter.daily.spent(ceiling, datetime.now(UTC).strftime("%Y-%m-%d"))


def test_the_supervisors_call_is_held_against_the_keys_daily_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = LocalWorld(tmp_path / "data")
    _daily(monkeypatch, "sup-day-tiny", "supervisor", 0.005)  # under its worst case
    with _script().installed() as script, pytest.raises(OuterLoopError) as failed:
        run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=3,
            world=world,
            outer_loop_id="ol_sup_day",
            supervise=_supervisor(),
        )
    assert failed.value.cause_code == "daily_budget_exceeded"
    assert "'sup-day-tiny'" in str(failed.value)
    assert [call.step_path for call in script.calls] == ["planner"]
    assert _day_spent("sup-day-tiny") == 0

    _daily(monkeypatch, "sup-day-ample", "supervisor", 1.0)
    with _script().installed():
        result = run_outer_loop(
            simple_workflow(),
            {"value": "v"},
            max_outer_cycles=3,
            world=world,
            outer_loop_id="ol_sup_day",
            supervise=_supervisor(),
        )
    assert result.output == {"result": "ok"}
    # Settled at its price (held at its worst case, over $0.01, while it ran).
    assert _day_spent("sup-day-ample") == pytest.approx(_price("gpt-4o", DECISION))


def test_planner_calls_are_held_against_the_keys_daily_ceiling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = LocalWorld(tmp_path / "data")
    _daily(monkeypatch, "plan-day-tiny", "planner", 1e-4)  # under a planner call's worst case
    with _script().installed() as script, pytest.raises(RunFailedError) as failed:
        run_workflow(simple_workflow(), {"value": "v"}, world=world, run_id="run_plan_day")
    assert failed.value.cause_code == "daily_budget_exceeded"
    assert "'plan-day-tiny'" in str(failed.value)
    assert script.calls == []
    assert _day_spent("plan-day-tiny") == 0

    _daily(monkeypatch, "plan-day-ample", "planner", 1.0)
    with _script().installed() as script:
        run_workflow(simple_workflow(), {"value": "v"}, world=world, run_id="run_plan_day_ok")
    assert [call.step_path for call in script.calls] == ["planner"]
    assert _day_spent("plan-day-ample") == pytest.approx(_price("gpt-4o-mini", PLANNER))


def test_a_cycle_counts_its_supervisor_hold_until_its_decision() -> None:
    from little_dist.events import EventInput
    from little_dist.outer_loop.budget import loop_spent, supervisor_hold
    from little_dist.outer_loop.decisions import (
        CYCLE_COMPLETED,
        Done,
        SupervisorCall,
        cycle_completed_payload,
        cycle_occurrence_id,
    )
    from little_dist.world.in_process import MemoryWorld

    world = MemoryWorld()
    world.append("run_olc_a", supervisor_hold("ol_x", 1, 0.25))
    cycle = CycleSummary(1, "run_olc_a", "wfver_x", "completed")
    assert loop_spent(world, [cycle], None) == pytest.approx(0.25)
    call = SupervisorCall(
        {"provider": "openai", "modelId": "gpt-4o"}, {"inputTokens": 1000, "outputTokens": 200}
    )
    world.append(
        "run_olc_a",
        EventInput(
            type=CYCLE_COMPLETED,
            occurrence_id=cycle_occurrence_id(1),
            payload=cycle_completed_payload("ol_x", 1, Done(None), call),
        ),
    )
    assert loop_spent(world, [cycle], litellm_price_fallback) == pytest.approx(
        _price("gpt-4o", DECISION)
    )
