"""``little eval run --fleet``: the example eval set's cases submitted to a real fleet (a
worker serving the example's workflow folder, a scheduler, Redis and S3), scored as in
process; the set, its bodies and its results are kept in the fleet's world (S3 objects and a
Redis index), and a second run reads the set from there by id, with no files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import zygote
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "evals"


def test_the_example_set_runs_on_the_fleet(fleet_env: FleetEnv, tmp_path: Path) -> None:
    folder = EXAMPLE / "ticket-severity"
    start_worker(fleet_env, app=str(folder))
    start_scheduler(fleet_env)
    done = zygote.run(
        [
            "eval",
            "run",
            str(EXAMPLE / "ticket-severity.evalset.json"),
            "--items",
            str(EXAMPLE / "ticket-severity.items.json"),
            "--workflow",
            str(folder),
            "--fleet",
            "--fleet-timeout",
            "150",
            "--concurrency",
            "2",
            "--json",
        ],
        env=fleet_env.env,
        cwd=tmp_path,
        timeout=200,
    )
    assert "Traceback" not in done.stderr
    assert done.returncode == 0, done.stderr + done.stdout
    result = json.loads(done.stdout)
    assert result["summary"]["passed"] == 4 and result["summary"]["costUsd"] > 0
    client = fleet_env.client()
    for case in result["cases"]:
        assert case["coneAsIndexed"] is True
        (sample,) = case["samples"]
        state = client.state(sample["runId"])  # (the run is the fleet's)
        assert state.status == "completed" and state.output == case["expected"]
    assert not (tmp_path / ".little-workflow").exists()  # (nothing local: no data directory)
    from little_dist.evals import eval_store_for

    store = eval_store_for(fleet_env.world())
    assert store.eval_set_ids() == [result["evalSetId"]]
    assert store.last_run(result["evalSetId"]) == result
    # A second run names the stored set by id: its bodies come from the fleet's world.
    again = zygote.run(
        [
            "eval",
            "run",
            result["evalSetId"],
            "--workflow",
            str(folder),
            "--role",
            "gate",
            "--fleet",
            "--fleet-timeout",
            "150",
            "--json",
        ],
        env=fleet_env.env,
        cwd=tmp_path,
        timeout=200,
    )
    assert again.returncode == 0, again.stderr + again.stdout
    second = json.loads(again.stdout)
    assert second["summary"]["passed"] == 1 and second["previous"]["ranAt"] == result["ranAt"]
    assert store.last_run(result["evalSetId"]) == second
    refused = zygote.run(
        [
            "eval",
            "run",
            result["evalSetId"],
            "--workflow",
            str(folder),
            "--fleet",
            "--data-dir",
            str(tmp_path / "d"),
        ],
        env=fleet_env.env,
        cwd=tmp_path,
        timeout=60,
    )
    assert refused.returncode == 2 and "--fleet keeps eval sets in the fleet's world" in (
        refused.stderr
    )
