"""An outer loop's budget on the fleet: the driver (this process) submits each cycle's run
with what the loop has left as its budget; the fleet's planner worker holds the cycle's
planner call against it before sending it, and the loop stops before its budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from little_dist import run_outer_loop
from little_dist.authoring.errors import RunFailedError
from little_dist.outer_loop.report import outer_loop_report
from little_dist.run_state import materialize_run_state
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.outer_loop_fleet_app import loop_workflow
from tests.test_budget_outer_loop import CHEAP, _script

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

APP = "tests.outer_loop_fleet_app"


def test_an_outer_loop_on_the_fleet_stops_before_its_budget(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = _script(CHEAP)
    fleet_env.env["LITTLE_SCRIPTED_MODEL"] = str(script.save(tmp_path / "script.json"))
    fleet_env.env["LITTLE_APP"] = APP
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2)
    budget = 0.0012  # two cycles, then a planner call whose worst case does not fit
    with fleet_env.client() as client, script.installed():
        with pytest.raises(RunFailedError) as failed:
            run_outer_loop(
                loop_workflow,
                {"value": "fleet"},
                max_outer_cycles=10,
                client=client,
                outer_loop_id="ol_fleet_budget",
                budget_usd=budget,
                cycle_timeout=120,
            )
        assert failed.value.cause_code == "budget_exceeded"
        world = client.world
        report = outer_loop_report(world, "ol_fleet_budget")
        assert [cycle.status for cycle in report.cycles] == ["completed", "completed", "failed"]
        last = report.cycles[-1].run_id
        events = world.list_events(last)
        assert not [e for e in events if e.type == "harness.model.called"]  # never sent
        state = materialize_run_state(events, run_id=last)
        assert state.budget_usd is not None and state.budget_usd < budget
        assert report.total.cost_usd is not None and report.total.cost_usd <= budget
