"""Daily key ceilings on the real fleet: two worker processes (four slots each) hold each
call's worst case in Redis before it is sent, so two concurrent runs on one key never pass
the key's ceiling; and a worker SIGKILLed between a call's reservation and its settlement
leaves the call counted at its worst case, in the run's log and in the key's day."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from little_dist.quotas.daily import DailyCeiling, RedisDailyBackend
from tests.budget_app import build_script, fan, one, worst_case_floor
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

KEYS = [f"k{i}" for i in range(10)]
FAST_FAILOVER = {
    "LITTLE_LEASE_TTL": "2",
    "LITTLE_HEARTBEAT_INTERVAL": "0.5",
    "LITTLE_DISPATCH_RESEND_AFTER": "5",
    "LITTLE_SIGNAL_CLAIM_IDLE": "1",
    "LITTLE_SOFT_SHUTDOWN_TIMEOUT": "0",
}


def _ceiling(fleet: FleetEnv, usd: float) -> DailyCeiling:
    ceiling = DailyCeiling(name=f"day-{uuid.uuid4().hex[:8]}", usd=usd, provider="scripted")
    rule = {"name": ceiling.name, "provider": "scripted", "usd": usd}
    fleet.env["LITTLE_QUOTAS"] = json.dumps({"daily": [rule]})
    return ceiling


def _counted(fleet: FleetEnv, ceiling: DailyCeiling) -> float:
    client = redis.Redis.from_url(fleet.env["LITTLE_REDIS_URL"])
    try:
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        return RedisDailyBackend(client).spent(ceiling, day)
    finally:
        client.close()


def test_two_concurrent_runs_on_the_fleet_share_a_keys_daily_ceiling(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    ceiling = _ceiling(fleet_env, 9 * worst_case_floor)
    script = build_script(None, latency=0.05).save(tmp_path / "script.json")
    fleet_env.env.update({"LITTLE_APP": "tests.budget_app", "LITTLE_SCRIPTED_MODEL": str(script)})
    for _ in range(2):
        start_worker(fleet_env, app="tests.budget_app", concurrency=4)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    runs = [client.submit(fan, {"keys": KEYS, "pad": ""}) for _ in range(2)]
    sent = refused = 0
    spent = 0.0
    for run_id in runs:
        state = client.wait(run_id, timeout=120)
        assert state.status == "completed", state.error  # (all_settled)
        events = client.world.list_events(run_id)
        sent += sum(1 for e in events if e.type == "harness.model.called")
        refused += sum(
            1
            for e in events
            if e.type == "StepFailed" and e.payload["error"]["causeCode"] == "daily_budget_exceeded"
        )
        spent += state.spent_usd
    assert 0 < sent < 2 * len(KEYS) and sent + refused == 2 * len(KEYS)
    assert 0 < spent <= ceiling.usd
    assert _counted(fleet_env, ceiling) == pytest.approx(spent)


def test_a_worker_killed_mid_call_leaves_the_call_held_at_its_worst_case(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    ceiling = _ceiling(fleet_env, 1.0)
    script = build_script(None, latency=6.0).save(tmp_path / "script.json")
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.budget_app",
            "LITTLE_SCRIPTED_MODEL": str(script),
            **FAST_FAILOVER,
        }
    )
    victim = start_worker(fleet_env, app="tests.budget_app", concurrency=2)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    run_id = client.submit(one, {"item": "a"}, budget_usd=0.01)
    deadline = time.monotonic() + 60
    while not any(e.type == "harness.model.called" for e in client.world.list_events(run_id)):
        assert time.monotonic() < deadline, "the call was never sent"
        time.sleep(0.05)
    victim.kill()  # between the reservation and the settlement
    (hold,) = [e for e in client.world.list_events(run_id) if e.type == "little.budget.reserved"]
    worst = hold.payload["reservedUsd"]
    assert _counted(fleet_env, ceiling) == pytest.approx(worst)
    start_worker(fleet_env, app="tests.budget_app", concurrency=2)
    state = client.wait(run_id, timeout=120)
    assert state.status == "completed", state.error
    holds = [e for e in client.world.list_events(run_id) if e.type == "little.budget.reserved"]
    assert len(holds) == 2  # the retry reserved its own call
    # The dead call is never forgotten: the run and the key's day count it at its worst.
    assert state.reserved_usd == pytest.approx(worst)
    assert 0 < state.spent_usd < worst
    assert _counted(fleet_env, ceiling) == pytest.approx(worst + state.spent_usd)
