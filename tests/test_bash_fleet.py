"""The bash tool on the fleet: a real ``little worker`` process runs a workflow whose model
uses bash, each command in the kernel sandbox, recorded in the run's log (Redis + S3); and
run scratch across worker processes, the files' bytes carried by S3."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from little_dist.sandbox.bash import BashState
from little_dist.testing import ScriptedModel
from tests.bash_fleet_app import (
    FIRST,
    NOTE,
    SECOND,
    build_pair_script,
    build_script,
    pair,
    shell,
)
from tests.fleet_processes import FleetEnv, FleetProcess, fleet_env, start_scheduler, start_worker

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


def _started_on(events: list[Any], step: str) -> list[str]:
    """The ``workerId`` of each ``StepAttemptStarted`` of ``step``, in attempt order."""
    return [
        e.payload["workerId"]
        for e in events
        if e.type == "StepAttemptStarted" and e.payload["stepPath"] == step
    ]


def _names(worker: FleetProcess) -> str:
    """The prefix of the ``workerId`` of every attempt ``worker`` runs (it names its pid)."""
    return f"worker:{socket.gethostname()}:{worker.pid}:"


def test_scratch_written_on_one_worker_is_read_by_a_peer_step_on_another(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = ScriptedModel()
    script.on(step="write").call_tool(
        "bash", {"cmd": f"mkdir -p notes && echo '{NOTE}' > notes/n.txt && sleep 4"}
    ).then_reply_text("wrote")
    script.on(step="read").call_tool(
        "bash", {"cmd": "cat /mnt/scratch/peer-steps/write/notes/n.txt"}
    ).then_reply_text("read")
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.bash_fleet_app",
            "LITTLE_SCRIPTED_MODEL": str(script.save(tmp_path / "script.json")),
        }
    )
    start_scheduler(fleet_env)
    # The writer's worker takes no next step inline, and finishes its step when told to stop.
    one = start_worker(
        fleet_env,
        app="tests.bash_fleet_app",
        extra_args=["--no-fast-path"],
        env={"TMPDIR": _folder(tmp_path / "tmp-one"), "LITTLE_SOFT_SHUTDOWN_TIMEOUT": "60"},
    )
    client = fleet_env.client()
    world = fleet_env.world()
    run_id = client.submit(pair, {})
    # (The call's start is written ahead of the command: the command runs now, for 4 s.)
    _wait_for(lambda: _of(world.list_events(run_id), "harness.tool_call.started"))
    # Stopped while its step runs: it stops taking tasks, finishes the writer and exits ...
    assert one.stop(timeout=60) == 0, one.output()[-3000:]
    # ... so the reader can only run on a second worker process, with its own disk.
    two = start_worker(
        fleet_env, app="tests.bash_fleet_app", env={"TMPDIR": _folder(tmp_path / "tmp-two")}
    )
    state = client.wait(run_id, timeout=90)
    assert state.status == "completed", state
    events = world.list_events(run_id)
    (writer,) = _started_on(events, "write")
    (reader,) = _started_on(events, "read")
    assert writer.startswith(_names(one)), writer
    assert reader.startswith(_names(two)), (reader, one.output()[-6000:])
    calls = [
        e for e in _of(events, "harness.tool_call.succeeded") if e.payload["stepPath"] == "read"
    ]
    assert calls[-1].payload["result"] == {"stdout": NOTE + "\n", "stderr": "", "exitCode": 0}
    assert two.alive()


KEPT = "echo one > a.txt"
DOOMED = "ls -A; t=$(date +%s%N); echo $t > doomed.txt; echo token=$t; sleep 30"
READ_ALL = "cd /mnt/scratch/peer-steps/write && find . -type f | sort; cat doomed.txt"


def test_a_killed_attempts_unrecorded_writes_are_never_seen_and_its_recorded_ones_are_kept(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    script = ScriptedModel()
    script.on(step="write").call_tool("bash", {"cmd": KEPT}).then_call_tool(
        "bash", {"cmd": DOOMED, "timeoutMs": 6000}
    ).then_reply_text("wrote")
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.bash_fleet_app",
            "LITTLE_SCRIPTED_MODEL": str(script.save(tmp_path / "script.json")),
        }
    )
    start_scheduler(fleet_env)
    temp_one = Path(_folder(tmp_path / "tmp-one"))
    one = start_worker(fleet_env, app="tests.bash_fleet_app", env={"TMPDIR": str(temp_one)})
    client = fleet_env.client()
    world = fleet_env.world()
    run_id = client.submit(pair, {})
    # The second command has written its file (in the attempt's private folder) and sleeps:
    # kill the worker there, the command's result unrecorded.
    _wait_for(lambda: list(temp_one.glob("little-scratch-*/own/doomed.txt")), timeout=60)
    (doomed,) = temp_one.glob("little-scratch-*/own/doomed.txt")
    killed_token = doomed.read_text().strip()
    one.kill()
    assert [
        e.payload["command"]
        for e in _of(world.list_events(run_id), "harness.runtime.command.succeeded")
    ] == [KEPT]
    # The second worker's model is asked only what is left (a scripted model's answers are
    # per process): the writer's turns up to the killed call are replayed from the log.
    after = ScriptedModel()
    after.on(step="write").reply_text("wrote")
    after.on(step="read").call_tool("bash", {"cmd": READ_ALL}).then_reply_text("read")
    two = start_worker(
        fleet_env,
        app="tests.bash_fleet_app",
        env={
            "TMPDIR": _folder(tmp_path / "tmp-two"),
            "LITTLE_SCRIPTED_MODEL": str(after.save(tmp_path / "after.json")),
        },
    )
    state = client.wait(run_id, timeout=120)
    assert state.status == "completed", state
    events = world.list_events(run_id)
    first, second = _started_on(events, "write")
    assert first.startswith(_names(one)) and second.startswith(_names(two))
    (lost,) = [e for e in _of(events, "StepFailed") if e.payload["stepPath"] == "write"]
    assert lost.payload["error"]["causeCode"] == "lease_expired"
    # The retry replayed the first command (not run again) and found its file in own/,
    # restored from S3; the killed command's file was not there: it ran again, live.
    # (The killed command's call was written ahead; its command events died with it.)
    calls = [
        e for e in _of(events, "harness.tool_call.started") if e.payload["stepPath"] == "write"
    ]
    assert [(e.payload["args"]["cmd"], e.payload["attempt"]) for e in calls] == [
        (KEPT, 1),
        (DOOMED, 1),
        (DOOMED, 2),
    ]
    rerun = [
        e
        for e in _of(events, "harness.tool_call.succeeded")
        if e.payload["stepPath"] == "write" and e.payload["attempt"] == 2
    ]
    stdout = rerun[-1].payload["result"]["stdout"]
    assert stdout.startswith("a.txt\ntoken=") and "doomed" not in stdout
    retry_token = stdout.split("token=")[1].split()[0]
    assert retry_token != killed_token
    # Nothing of attempt 1 was published; the peer reads what attempt 2 committed.
    files = [e for e in events if e.type.startswith("harness.file.")]
    assert {(e.occurrence_id or "").split(":")[2] for e in files} == {"2"}
    reads = [
        e for e in _of(events, "harness.tool_call.succeeded") if e.payload["stepPath"] == "read"
    ]
    assert reads[-1].payload["result"]["stdout"] == f"./a.txt\n./doomed.txt\n{retry_token}\n"
    assert two.alive()


def _of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def _folder(path: Path) -> str:
    path.mkdir()
    return str(path)


def _wait_for(check: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"waited {timeout:g}s in vain")
