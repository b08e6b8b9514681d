"""Memory on the fleet: two runs of one workflow, on two real worker processes, write the same
memory file at the same time, and neither write is lost (one is the file, the other its
conflict copy, and the loser's run log says so); an operator sees both with ``little memory``.
A worker killed after its command wrote memory leaves the write to the retry on another
worker, which replays the command and publishes the recorded bytes once."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from little_dist.memory import memory_store_for
from little_dist.testing import ScriptedModel
from tests import zygote
from tests.fleet_processes import (
    ROOT,
    FleetEnv,
    FleetProcess,
    fleet_env,
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
    listed = zygote.run(
        ["memory", "ls", "--workflow", writer.id, "--json"], cwd=ROOT, env=fleet_env.env, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(line)["path"] for line in listed.stdout.splitlines()) == sorted(
        contents
    )


def test_a_memory_write_replayed_on_another_worker_is_published_once_as_recorded(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    """A worker process is SIGKILLed after its bash command wrote /mnt/memory/workflow/ (the
    command's result recorded, with the folder's snapshot) and before its commit (it waits
    for the model's next turn). The retry runs on another worker: it replays the command
    from the log (never runs it again), takes up the recorded files, and its commit
    publishes the write once, with the bytes the killed attempt's command wrote."""
    # The command writes a value no second run could repeat: the store must hold this one.
    write = 't=$(date +%s%N); echo "lesson $t" > /mnt/memory/workflow/notes.md; echo token=$t'
    script = ScriptedModel()
    script.on(step="shell").call_tool("bash", {"cmd": write}).then_reply_text(
        "never answered", latency=60
    )
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.memory_fleet_app",
            "LITTLE_SCRIPTED_MODEL": str(script.save(tmp_path / "script.json")),
        }
    )
    start_scheduler(fleet_env)
    one = start_worker(fleet_env, app="tests.memory_fleet_app")
    client = fleet_env.client()
    world = fleet_env.world()
    run_id = client.submit(writer, {}, run_id="run_memory_kill")
    # The command's result is recorded and the model's second turn is under way: kill there.
    _wait_for(lambda: len(_of(world.list_events(run_id), "harness.model.called")) == 2)
    one.kill()
    (recorded,) = _of(world.list_events(run_id), "harness.tool_call.succeeded")
    token = recorded.payload["result"]["stdout"].strip().removeprefix("token=")
    store = memory_store_for(world)
    assert store.entries(STORE) == {}  # nothing published by the killed attempt
    after = ScriptedModel()
    after.on(step="shell").reply_text("wrote")
    two = start_worker(
        fleet_env,
        app="tests.memory_fleet_app",
        env={"LITTLE_SCRIPTED_MODEL": str(after.save(tmp_path / "after.json"))},
    )
    state = client.wait(run_id, timeout=120)
    assert state.status == "completed", state
    events = world.list_events(run_id)
    first, second = [e.payload["workerId"] for e in events if e.type == "StepAttemptStarted"]
    assert first.startswith(_names(one)) and second.startswith(_names(two))
    (lost,) = _of(events, "StepFailed")
    assert lost.payload["error"]["causeCode"] == "lease_expired"
    started = _of(events, "harness.runtime.command.started")
    assert [e.payload["attempt"] for e in started] == [1]  # replayed, never run again
    # Published once, by the retry's commit, with the recorded bytes.
    entries = store.entries(STORE)
    assert sorted(entries) == ["notes.md"] and entries["notes.md"].version == 1
    assert store.read(STORE, entries["notes.md"]) == f"lesson {token}\n".encode()
    (created,) = _of(events, "harness.file.created")
    assert created.payload["path"] == "/mnt/memory/workflow/notes.md"
    assert created.occurrence_id is not None and ":2:" in created.occurrence_id
    assert _of(events, "little.memory.conflict") == []
    assert two.alive()


def _of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def _names(worker: FleetProcess) -> str:
    """The prefix of the ``workerId`` of every attempt ``worker`` runs (it names its pid)."""
    return f"worker:{socket.gethostname()}:{worker.pid}:"


def _wait_for(check: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"waited {timeout:g}s in vain")
