"""An outer loop on the real fleet: its driver (this process) holds the supervisor's call
against the loop's budget in the cycle's run before making it, and against the key's daily
ceiling in the fleet's Redis; the planner worker holds the cycle's planner call against that
ceiling too. Both settle at their price."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from little_dist import run_outer_loop
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.outer_loop.budget import cycle_spent
from little_dist.outer_loop.errors import OuterLoopError
from little_dist.quotas.daily import DailyCeiling, RedisDailyBackend
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.outer_loop_fleet_app import loop_workflow
from tests.test_budget_supervisor import DECISION, HOLD, PLANNER, _price, _script, _supervisor

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

APP = "tests.outer_loop_fleet_app"


def _counted(fleet: FleetEnv, ceiling: DailyCeiling) -> float:
    client = redis.Redis.from_url(fleet.env["LITTLE_REDIS_URL"])
    try:
        day = datetime.now(UTC).strftime("%Y-%m-%d")
        return RedisDailyBackend(client).spent(ceiling, day)
    finally:
        client.close()


def test_a_fleet_loop_holds_its_supervisor_call_and_its_calls_count_in_the_keys_day(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    ceiling = DailyCeiling(name=f"loop-day-{uuid.uuid4().hex[:8]}", usd=1.0, provider="scripted")
    rule = {"name": ceiling.name, "provider": "scripted", "usd": ceiling.usd}
    script = _script()
    fleet_env.env.update(
        {
            "LITTLE_QUOTAS": json.dumps({"daily": [rule]}),
            "LITTLE_SCRIPTED_MODEL": str(script.save(tmp_path / "script.json")),
            "LITTLE_APP": APP,
        }
    )
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2)
    planner, decision = _price("gpt-4o-mini", PLANNER), _price("gpt-4o", DECISION)
    loop = {
        "max_outer_cycles": 3,
        "outer_loop_id": "ol_fleet_sup",
        "supervise": _supervisor(),
        "cycle_timeout": 120,
    }
    with fleet_env.client() as client, script.installed():
        with pytest.raises(OuterLoopError) as failed:
            # The cycle's planner call fits; the supervisor's worst case (over $0.01) does not.
            run_outer_loop(
                loop_workflow, {"value": "fleet"}, client=client, budget_usd=0.005, **loop
            )
        assert failed.value.cause_code == "budget_exceeded"
        assert script.calls == []  # the supervisor's call was never made
        run_id = failed.value.run_id
        assert not [e for e in client.world.list_events(run_id) if e.type == HOLD]
        # The planner worker held its call in the fleet's Redis and settled it at its price.
        assert _counted(fleet_env, ceiling) == pytest.approx(planner)

        result = run_outer_loop(
            loop_workflow, {"value": "fleet"}, client=client, budget_usd=0.05, **loop
        )
        assert result.output == {"result": "ok"} and result.run_id == run_id
        assert [call.step_path for call in script.calls] == ["supervisor"]
        events = client.world.list_events(run_id)
        (held,) = [e.payload["reservedUsd"] for e in events if e.type == HOLD]
        assert held > 0.01
        assert cycle_spent(client.world, run_id, 1, litellm_price_fallback) == pytest.approx(
            planner + decision
        )
        # The driver held the supervisor's call in the same Redis, settled at its price.
        assert _counted(fleet_env, ceiling) == pytest.approx(planner + decision)
