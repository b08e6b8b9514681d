"""``little eval run --fleet``: the example eval set's cases submitted to a real fleet (a
worker serving the example's workflow folder, a scheduler, Redis and S3), scored as in
process; the set and its results stay in the local data directory."""

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
    data = tmp_path / "evals"
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
            "--data-dir",
            str(data),
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
    assert not (data / "events").exists()  # (no local run: only the eval set and its result)
    assert len(list((data / "eval-runs").rglob("*.json"))) == 1
