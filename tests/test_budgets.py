"""Dollar budgets in process: the option checked, each model call reserving its worst case
in the run's log, a call that would pass the ceiling never sent (``budget_exceeded``)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.errors import InvalidInputError
from little_dist.events import Event
from little_dist.model_registry import ModelPricing
from little_dist.observability import FleetMetrics
from little_dist.run_state import materialize_run_state
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests import budget_app, zygote
from tests.quota_fleet_app import build_script, fan, one
from tests.test_cli_run import assert_no_traceback, little_run
from tests.test_metrics import metrics, sample

__all__ = ["metrics"]  # the fixture, re-exported for pytest

# $1 per token in and out: a call of scripted/quota costs its tokens in dollars.
PER_TOKEN = ModelPricing(input=1_000_000, output=1_000_000)


def prices(key: str) -> ModelPricing | None:
    return PER_TOKEN if key.startswith("scripted/") else None


def _run(world: MemoryWorld, keys: list[str], budget: float, run_id: str) -> Any:
    try:
        return run_workflow(
            fan,
            {"keys": keys, "pad": ""},
            world=world,
            run_id=run_id,
            budget_usd=budget,
            max_workers=4,
            pricing_fallback=prices,
        ).state
    except RunFailedError as failed:
        return failed.result.state


@pytest.mark.parametrize("bad", [0, -1, math.inf, math.nan, "5", True])
def test_a_budget_must_be_a_positive_finite_number(bad: Any) -> None:
    with pytest.raises(InvalidInputError, match="budget_usd must be a positive number"):
        run_workflow(one, {"item": "a"}, world=MemoryWorld(), budget_usd=bad)
    with pytest.raises(InvalidInputError, match="budget_usd must be a positive number"):
        define_workflow(
            id="w", description="d", input={}, output={}, model="scripted/x", budget_usd=bad
        )


def test_a_run_stops_before_its_ceiling_and_never_after_it() -> None:
    world = MemoryWorld()
    keys = [f"k{i}" for i in range(12)]
    script = build_script(None)
    with script.installed():
        state = _run(world, keys, 400.0, "run_budget_stop")
    sent = len(script.calls)
    assert 0 < sent < len(keys)  # some calls went out, the budget stopped the rest
    assert state.budget_usd == 400.0
    assert state.spent_usd <= 400.0 and state.reserved_usd == 0
    events = world.list_events("run_budget_stop")
    called = [e for e in events if e.type == "harness.model.called"]
    holds = [e for e in events if e.type == "little.budget.reserved"]
    assert len(called) == len(holds) == sent
    # each hold is appended just before its call
    assert all(events[c.sequence - 2].payload["callId"] == c.payload["callId"] for c in called)
    worst = [e.payload["reservedUsd"] for e in holds]
    # Every call held its worst case (prompt + 64 output tokens) and the last refusal was
    # due: the next call's worst case would not fit beside what was spent.
    assert all(w >= 64 for w in worst)
    assert state.spent_usd + min(worst) > 400.0
    refused = [
        e
        for e in events
        if e.type == "StepFailed"
        and (e.payload.get("error") or {}).get("causeCode") == "budget_exceeded"
    ]
    assert len(refused) == len(keys) - sent
    assert all(not e.payload["error"]["retriable"] for e in refused)


def test_a_resumed_run_counts_what_it_spent_once() -> None:
    world = MemoryWorld()
    script = build_script(None)
    with script.installed():
        first = _run(world, ["a"], 1000.0, "run_budget_resume")
        again = _run(world, ["a"], 1000.0, "run_budget_resume")
    assert first.status == again.status == "completed"
    assert len(script.calls) == 1
    assert again.spent_usd == first.spent_usd > 0
    assert again.reserved_usd == 0
    budget_events = [
        e for e in world.list_events("run_budget_resume") if e.type == "little.run.budget"
    ]
    assert len(budget_events) == 1


def _event(seq: int, type_: str, payload: dict[str, Any]) -> Event:
    return Event.model_validate(
        {
            "eventId": f"e{seq}",
            "runId": "run_fold",
            "sequence": seq,
            "type": type_,
            "payload": payload,
            "recordedAt": "2026-01-01T00:00:00.000Z",
            "occurrenceId": f"o{seq}",
        }
    )


def test_the_fold_holds_a_call_until_it_ends_and_then_counts_its_price() -> None:
    model = {"provider": "scripted", "modelId": "quota"}
    hold = {"callId": "model:s:1:1", "stepPath": "s", "reservedUsd": 100.0}
    events = [
        _event(1, "little.run.budget", {"budgetUsd": 250}),
        _event(2, "little.budget.reserved", hold),
        _event(3, "little.budget.reserved", {**hold, "callId": "model:s:1:2"}),
    ]
    held = materialize_run_state(events, pricing_fallback=prices)
    assert (held.budget_usd, held.spent_usd, held.reserved_usd) == (250.0, 0.0, 200.0)
    ended = [
        *events,
        _event(
            4,
            "harness.model.responded",
            {
                "callId": "model:s:1:1",
                "stepPath": "s",
                "model": model,
                "response": {"usage": {"inputTokens": 10, "outputTokens": 5}},
            },
        ),
        _event(5, "harness.model.failed", {"callId": "model:s:1:2", "stepPath": "s"}),
    ]
    settled = materialize_run_state(ended, pricing_fallback=prices)
    assert (settled.spent_usd, settled.reserved_usd) == (15.0, 0.0)
    assert held.reserved_usd == 200.0  # an earlier snapshot never changes


def test_a_call_that_would_pass_the_ceiling_is_not_sent_and_the_run_fails_with_it(
    metrics: FleetMetrics,
) -> None:
    world = MemoryWorld()
    script = build_script(None)
    with script.installed(), pytest.raises(RunFailedError) as failed:
        run_workflow(
            one,
            {"item": "a"},
            world=world,
            run_id="run_budget_small",
            budget_usd=50,
            pricing_fallback=prices,
        )
    assert script.calls == []
    state = failed.value.result.state
    assert state.status == "failed"
    assert state.error["causeCode"] == "budget_exceeded"
    assert "budget $50" in state.error["message"]
    # One attempt only: the cause is terminal, not retried (the step allows 3).
    starts = [e for e in world.list_events("run_budget_small") if e.type == "StepAttemptStarted"]
    assert len(starts) == 1
    assert sample(metrics, "little_budget_refusals_total", scope="run") == 1


def test_the_workflows_budget_applies_and_a_runs_own_wins() -> None:
    capped = dataclasses.replace(one, budget_usd=50)
    script = build_script(None)
    with script.installed():
        with pytest.raises(RunFailedError):
            run_workflow(capped, {"item": "a"}, world=MemoryWorld(), pricing_fallback=prices)
        assert script.calls == []
        done = run_workflow(
            capped, {"item": "a"}, world=MemoryWorld(), budget_usd=500, pricing_fallback=prices
        )
    assert done.state.status == "completed" and len(script.calls) == 1
    assert done.state.budget_usd == 500


def test_little_run_takes_a_budget_and_stops_at_it(tmp_path: Path) -> None:
    script = budget_app.build_script(None).save(tmp_path / "script.json")
    keys = [f"k{i}" for i in range(10)]
    result = little_run(
        "tests.budget_app:fan",
        "--input",
        json.dumps({"keys": keys, "pad": ""}),
        "--data-dir",
        str(tmp_path / "world"),
        "--budget-usd",
        "0.0002",
        "--quiet",
        "--json",
        env={"LITTLE_SCRIPTED_MODEL": str(script)},
    )
    assert_no_traceback(result)
    run_id = json.loads(result.stdout)["runId"]
    world = LocalWorld(tmp_path / "world")
    events = world.list_events(run_id)
    world.close()
    state = materialize_run_state(events)
    sent = sum(e.type == "harness.model.called" for e in events)
    assert state.budget_usd == 0.0002
    assert 4 <= sent < len(keys)
    assert 0 < state.spent_usd <= 0.0002
    refused = [e for e in events if e.type == "StepFailed"]
    assert refused and all(e.payload["error"]["causeCode"] == "budget_exceeded" for e in refused)
    # `little report` shows the budget, what was spent and what is held.
    where = ["--data-dir", str(tmp_path / "world")]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    report = zygote.run(["report", run_id, *where, "--json"], env=env, timeout=60)
    assert report.returncode == 0, report.stderr
    spent = round(state.spent_usd, 10)
    assert json.loads(report.stdout)["budget"] == {
        "budgetUsd": 0.0002,
        "spentUsd": spent,
        "reservedUsd": 0,
    }
    html = tmp_path / "report.html"
    wrote = zygote.run(["report", run_id, *where, "--html", str(html)], env=env, timeout=60)
    assert wrote.returncode == 0, wrote.stderr
    page = html.read_text()
    assert "Budget $0.000200" in page and f"${spent:.6f} spent" in page
    table = zygote.run(["report", run_id, *where], env=env, timeout=60)
    assert f"Budget: $0.000200 · spent ${spent:.6f} · reserved $0.000000" in table.stdout


@pytest.mark.parametrize("bad", ["0", "-2", "nan", "inf", "ten"])
def test_little_run_refuses_a_bad_budget_in_one_line(bad: str) -> None:
    result = little_run("--budget-usd", bad, "x.json")
    assert result.returncode == 2
    assert_no_traceback(result)
    assert "--budget-usd" in result.stderr


def test_little_submit_refuses_a_bad_budget_in_one_line() -> None:
    result = zygote.run(
        ["submit", "x.json", "--budget-usd", "-1"],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        timeout=60,
    )
    assert result.returncode == 2
    assert_no_traceback(result)
    assert "--budget-usd" in result.stderr and "positive number" in result.stderr
