"""Budget trees on the real fleet: a budgeted parent's sub-runs run on two worker processes
(four slots each) while the parent is suspended, each child borrowing from the parent's log
what its call needs; the tree stops before the parent's ceiling, and a child with its own
smaller budget stops at it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from little_dist.litellm_prices import litellm_price_fallback
from little_dist.run_state import RunState, materialize_run_state
from tests import budget_tree_app as app
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.test_cli_fleet import _ok, little

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest


def _state(world: Any, run_id: str) -> RunState:
    events = world.list_events(run_id)
    return materialize_run_state(events, run_id=run_id, pricing_fallback=litellm_price_fallback)


def _children(world: Any, run_id: str) -> list[str]:
    return [
        e.payload["childRunId"]
        for e in world.list_events(run_id)
        if e.type == "little.subrun.started"
    ]


def _cause(state: RunState) -> Any:
    return state.error.get("causeCode") if isinstance(state.error, dict) else None


def test_a_budget_tree_on_the_fleet_stops_before_the_parents_ceiling(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    fleet_env.env.update({"LITTLE_APP": "tests.budget_tree_app", app.SCRIPT_ENV: "1"})
    for _ in range(2):
        start_worker(fleet_env, app="tests.budget_tree_app", concurrency=4)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    budget = 0.00015  # the boss's first call and a few of its eight kids
    stopped = client.submit(app.boss, {"scenario": "kids"}, budget_usd=budget)
    small = client.submit(app.boss, {"scenario": "small"}, budget_usd=0.001)
    world = client.world

    state = client.wait(stopped, timeout=120)
    assert state.status == "failed" and _cause(state) == "budget_exceeded"
    kids = [_state(world, kid) for kid in _children(world, stopped)]
    assert len(kids) == 8 and all(kid.status in ("completed", "failed") for kid in kids)
    done = [kid for kid in kids if kid.status == "completed"]
    refused = [kid for kid in kids if _cause(kid) == "budget_exceeded"]
    assert done and refused and len(done) + len(refused) == 8
    for kid in kids:
        assert kid.budget_parent_run_id == stopped
        assert kid.committed_usd <= kid.drawn_usd + 1e-12
    final = _state(world, stopped)
    assert final.sub_runs_usd == pytest.approx(sum(kid.committed_usd for kid in kids))
    assert final.spent_usd + sum(kid.spent_usd for kid in kids) <= budget
    assert final.committed_usd <= budget
    # `little status` shows what the sub-runs count beside the run's own spend.
    shown = json.loads(_ok(little(fleet_env, "status", stopped, "--json"), 1))["budget"]
    assert shown["subRunsUsd"] == round(final.sub_runs_usd, 10) > 0
    assert ", sub-runs $" in _ok(little(fleet_env, "status", stopped), 1)  # (failed: 1)

    state = client.wait(small, timeout=120)
    assert state.status == "completed", state.error
    (child_id,) = _children(world, small)
    child = _state(world, child_id)
    sent = [e for e in world.list_events(child_id) if e.type == "harness.model.called"]
    assert child.budget_usd == app.SMALL_BUDGET and 0 < len(sent) < 5
    assert child.committed_usd <= app.SMALL_BUDGET
    final = _state(world, small)
    assert final.sub_runs_usd == pytest.approx(child.committed_usd)
    assert final.committed_usd <= 0.001


FAST_FAILOVER = {
    "LITTLE_LEASE_TTL": "2",
    "LITTLE_HEARTBEAT_INTERVAL": "0.5",
    "LITTLE_DISPATCH_RESEND_AFTER": "5",
    "LITTLE_SIGNAL_CLAIM_IDLE": "1",
    "LITTLE_SOFT_SHUTDOWN_TIMEOUT": "0",
}


def test_a_kid_whose_worker_died_mid_call_counts_against_the_parent_at_its_worst(
    fleet_env: FleetEnv,
) -> None:
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.budget_tree_app",
            app.SCRIPT_ENV: "1",
            app.LATENCY_ENV: "3",
            **FAST_FAILOVER,
        }
    )
    victim = start_worker(fleet_env, app="tests.budget_tree_app", concurrency=4)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    world = client.world
    budget = 0.001
    run_id = client.submit(app.boss, {"scenario": "two"}, budget_usd=budget)
    deadline = time.monotonic() + 90

    def kid_calling() -> bool:
        return any(
            e.type == "harness.model.called"
            for kid in _children(world, run_id)
            for e in world.list_events(kid)
        )

    while not kid_calling():
        assert time.monotonic() < deadline, "no kid's call was sent"
        time.sleep(0.05)
    victim.kill()  # between a kid call's reservation and its settlement
    start_worker(fleet_env, app="tests.budget_tree_app", concurrency=4)
    state = client.wait(run_id, timeout=120)
    assert state.status == "completed", state.error
    kids = [_state(world, kid) for kid in _children(world, run_id)]
    dead = [kid for kid in kids if kid.reserved_usd > 0]
    assert dead  # the killed call is held at its worst case, never forgotten
    for kid in kids:
        assert kid.status == "completed"
        assert kid.committed_usd == pytest.approx(kid.spent_usd + kid.reserved_usd)
    final = _state(world, run_id)
    assert final.sub_runs_usd == pytest.approx(sum(kid.committed_usd for kid in kids))
    assert final.committed_usd <= budget
