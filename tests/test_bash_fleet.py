"""The bash tool on the fleet: a real ``little worker`` process runs a workflow whose model
uses bash, each command in the kernel sandbox, recorded in the run's log (Redis + S3); and
run scratch across worker processes, the files' bytes carried by S3."""

from __future__ import annotations

from pathlib import Path

import pytest

from little_dist.sandbox.bash import BashState
from tests.bash_fleet_app import (
    FIRST,
    NOTE,
    SECOND,
    build_pair_script,
    build_script,
    pair,
    shell,
)
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


def test_a_step_reads_the_scratch_file_its_peer_wrote_on_a_worker_process(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = build_pair_script().save(tmp_path / "script.json")
    fleet_env.env.update(
        {"LITTLE_APP": "tests.bash_fleet_app", "LITTLE_SCRIPTED_MODEL": str(script)}
    )
    start_scheduler(fleet_env)
    # Two worker processes, each with its own temporary folder (where attempts make their
    # scratch): nothing is shared on disk between them.
    temps = [tmp_path / "tmp-one", tmp_path / "tmp-two"]
    workers = []
    for temp in temps:
        temp.mkdir()
        workers.append(
            start_worker(fleet_env, app="tests.bash_fleet_app", env={"TMPDIR": str(temp)})
        )
    client = fleet_env.client()
    run_id = client.submit(pair, {})
    state = client.wait(run_id, timeout=90)
    assert state.status == "completed", state
    assert state.output == "read"
    events = fleet_env.world().list_events(run_id)
    calls = [e for e in events if e.type == "harness.tool_call.succeeded"]
    assert calls[-1].payload["stepPath"] == "read"
    assert calls[-1].payload["result"] == {"stdout": NOTE + "\n", "stderr": "", "exitCode": 0}
    (created,) = [e for e in events if e.type == "harness.file.created"]
    assert created.payload["path"] == "/mnt/scratch/own/notes/n.txt"
    # The bytes are in S3 under the ref the event names (read here by a fresh client) ...
    stored = fleet_env.world().get_artifact(created.payload["artifactRef"]).payload
    assert stored == (NOTE + "\n").encode()
    # ... and no attempt's folder outlived it on either worker's disk.
    assert [list(temp.glob("little-scratch-*")) for temp in temps] == [[], []]
    ran = {
        step: [w.name for w in workers if f" {run_id} {step}#1" in w.output()]
        for step in ("write", "read")
    }
    assert all(len(names) == 1 for names in ran.values()), ran
