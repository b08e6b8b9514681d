"""The bash tool on the fleet: a real ``little worker`` process runs a workflow whose model
uses bash, each command in the kernel sandbox, recorded in the run's log (Redis + S3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from little_dist.sandbox.bash import BashState
from tests.bash_fleet_app import FIRST, SECOND, build_script, shell
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def test_a_fleet_worker_runs_the_models_bash_commands_in_the_sandbox(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = build_script().save(tmp_path / "script.json")
    fleet_env.env.update(
        {"LITTLE_APP": "tests.bash_fleet_app", "LITTLE_SCRIPTED_MODEL": str(script)}
    )
    start_scheduler(fleet_env)
    start_worker(fleet_env, app="tests.bash_fleet_app")
    client = fleet_env.client()
    run_id = client.submit(shell, {})
    state = client.wait(run_id, timeout=90)
    assert state.status == "completed", state
    events = fleet_env.world().list_events(run_id)
    started = [e for e in events if e.type == "harness.runtime.command.started"]
    assert [e.payload["command"] for e in started] == [FIRST, SECOND]
    ended = [e for e in events if e.type == "harness.runtime.command.succeeded"]
    assert [e.payload["isolation"] for e in ended] == ["namespaces", "namespaces"]
    calls = [e for e in events if e.type == "harness.tool_call.succeeded"]
    assert calls[1].payload["result"] == {
        "stdout": "hello\none\n/mnt/scratch/own/work\n",
        "stderr": "",
        "exitCode": 0,
    }
    state_after = BashState.from_json(calls[1].payload["sandbox"]["state"])
    assert state_after.cwd == "/mnt/scratch/own/work"
    (done,) = [e for e in events if e.type == "StepCompleted"]
    assert done.payload["stepPath"] == "shell"
