"""Dollar budgets on the real fleet: two worker processes (four slots each) run budgeted
runs' model calls, each reserving its worst case in the run's log (the same log both
workers append to) before it is sent; the run stops before its ceiling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_dist.fleet.refusals import SubmissionRefused, submit_arguments
from tests.budget_app import build_script, fan
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.test_cli_fleet import _ok, little

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

BUDGET = 0.0002  # about four calls' worst case at gpt-4o-mini's rates
KEYS = [f"k{i}" for i in range(12)]


def _check_stopped(events: list[Any], state: Any) -> None:
    holds = [e for e in events if e.type == "little.budget.reserved"]
    called = [e for e in events if e.type == "harness.model.called"]
    refused = [
        e
        for e in events
        if e.type == "StepFailed" and e.payload["error"]["causeCode"] == "budget_exceeded"
    ]
    assert state.budget_usd == BUDGET
    assert 0 < len(called) == len(holds) < len(KEYS)
    assert len(refused) == len(KEYS) - len(called)
    assert 0 < state.spent_usd <= BUDGET and state.reserved_usd == 0
    # It stopped only when it had to: four calls' worst cases always fit in the budget,
    # whichever order the workers reserved them in.
    assert all(h.payload["reservedUsd"] <= BUDGET / 4 for h in holds)
    assert len(called) >= 4


def test_budgeted_runs_on_the_fleet_stop_before_their_ceiling(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = build_script(None, latency=0.05).save(tmp_path / "script.json")
    fleet_env.env.update({"LITTLE_APP": "tests.budget_app", "LITTLE_SCRIPTED_MODEL": str(script)})
    for _ in range(2):
        start_worker(fleet_env, app="tests.budget_app", concurrency=4)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    one = client.submit(fan, {"keys": KEYS, "pad": ""}, budget_usd=BUDGET)
    many = client.submit_many(fan, [{"keys": KEYS, "pad": ""}], budget_usd=BUDGET)
    submitted = little(
        fleet_env,
        "submit",
        "tests.budget_app:fan",
        "--input",
        json.dumps({"keys": KEYS, "pad": ""}),
        "--budget-usd",
        str(BUDGET),
        "--json",
    )
    by_cli = json.loads(_ok(submitted))["runId"]
    for run_id in [one, *many, by_cli]:
        state = client.wait(run_id, timeout=120)
        assert state.status == "completed", state.error
        _check_stopped(client.world.list_events(run_id), state)
    # `little status` shows the budget, what was spent and what is held.
    shown = json.loads(_ok(little(fleet_env, "status", by_cli, "--json")))
    state = client.wait(by_cli, timeout=1)
    assert shown["budget"] == {
        "budgetUsd": BUDGET,
        "spentUsd": round(state.spent_usd, 10),
        "reservedUsd": 0,
    }
    text = _ok(little(fleet_env, "status", by_cli))
    assert f"budget    ${BUDGET:.6f} (spent ${state.spent_usd:.6f}, reserved $0.000000)" in text


def test_the_submit_task_checks_its_budget_argument() -> None:
    sent = submit_arguments((), {"workflow_id": "quota.fan", "budget_usd": 0.5})
    assert sent.budget_usd == 0.5
    with pytest.raises(SubmissionRefused, match=r"invalid_arguments.*budget_usd"):
        submit_arguments((), {"workflow_id": "quota.fan", "budget_usd": -1})
