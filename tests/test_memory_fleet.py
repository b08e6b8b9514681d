"""Memory on the fleet: two runs of one workflow, on two real worker processes, write the same
memory file at the same time, and neither write is lost (one is the file, the other its
conflict copy, and the loser's run log says so); an operator sees both with ``little memory``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from little_dist.memory import memory_store_for
from tests.fleet_processes import (
    ROOT,
    FleetEnv,
    fleet_env,
    little_argv,
    start_scheduler,
    start_worker,
)
from tests.memory_fleet_app import RUNS, build_script, line_of, writer

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

STORE = "workflow:fleet-memory-writer"


def test_two_workers_writing_one_memory_file_at_once_lose_nothing(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = build_script().save(tmp_path / "script.json")
    fleet_env.env.update(
        {"LITTLE_APP": "tests.memory_fleet_app", "LITTLE_SCRIPTED_MODEL": str(script)}
    )
    start_scheduler(fleet_env)
    # One slot each: while one worker holds a run's attempt open, the other run needs the
    # other worker.
    workers = [
        start_worker(fleet_env, app="tests.memory_fleet_app", concurrency=1) for _ in range(2)
    ]
    client = fleet_env.client()
    for run_id in RUNS:
        client.submit(writer, {}, run_id=run_id)
    for run_id in RUNS:
        state = client.wait(run_id, timeout=90)
        assert state.status == "completed", state
    ran = {
        run_id: [w.name for w in workers if f" {run_id} shell#1" in w.output()] for run_id in RUNS
    }
    assert sorted(name for names in ran.values() for name in names) == sorted(
        w.name for w in workers
    ), ran
    world = fleet_env.world()
    # Both saw an empty store: their attempts overlapped.
    for run_id in RUNS:
        (call,) = [e for e in world.list_events(run_id) if e.type == "harness.tool_call.succeeded"]
        assert call.payload["result"]["stdout"] == "", run_id
    store = memory_store_for(world)
    entries = {p: e for p, e in store.entries(STORE).items() if e.exists}
    contents = {path: store.read(STORE, entry).decode() for path, entry in entries.items()}
    assert sorted(contents.values()) == sorted(line_of(run_id) + "\n" for run_id in RUNS)
    (copy,) = [path for path in contents if path != "shared.txt"]
    loser = next(run_id for run_id in RUNS if run_id in copy)
    assert copy == f"shared.conflict-{loser}-shell-a1.txt"
    (conflict,) = [e for e in world.list_events(loser) if e.type == "little.memory.conflict"]
    assert conflict.payload["path"] == "/mnt/memory/workflow/shared.txt"
    assert conflict.payload["conflictPath"] == f"/mnt/memory/workflow/{copy}"
    assert conflict.payload["outcome"] == "kept-as-copy"
    winner = next(run_id for run_id in RUNS if run_id != loser)
    assert [e.type for e in world.list_events(winner) if e.type.startswith("little.memory")] == []

    # The operator's view, through the real command, on the same Redis and S3.
    listed = subprocess.run(
        little_argv("memory", "ls", "--workflow", writer.id, "--json"),
        cwd=ROOT,
        env=fleet_env.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(line)["path"] for line in listed.stdout.splitlines()) == sorted(
        contents
    )
