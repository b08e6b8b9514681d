"""SIGKILL ``little run`` while a model's second bash command runs, run it again: the first
command, recorded before the kill, is replayed from the log, not run again, and the resumed
shell stands where it left it (cwd and exports restored from the recorded state)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from little_dist.events import Event
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.kill_helpers import sigkill_when

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "run_bash_kill"
FIRST = "mkdir -p w && cd w && export COLOR=blue && echo first"
SECOND = "pwd; echo $COLOR; sleep 2"


def _command(data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "little_dist.cli",
        "run",
        "tests.bash_fleet_app:shell",
        "--input",
        "{}",
        "--run-id",
        RUN_ID,
        "--data-dir",
        str(data_dir),
        # Not the kill test's 1.5 s: with the machine loaded (load average 10 on 2 cores) the
        # resumed runner once missed its renewals of so short a lease and lost its own run.
        "--lease-ttl",
        "4",
        "--quiet",
    ]


def _events(data_dir: Path) -> list[Event]:
    if not (data_dir / "events" / "events.db").exists():
        return []
    world = LocalWorld(data_dir)
    try:
        return world.list_events(RUN_ID)
    finally:
        world.close()


def _script(path: Path, script: ScriptedModel) -> dict[str, str]:
    script.save(path)
    return {
        **os.environ,
        "LITTLE_SCRIPTED_MODEL": str(path),
        "PYTHONPATH": str(REPO),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def test_sigkill_mid_command_then_resume_replays_the_recorded_command(tmp_path: Path) -> None:
    data_dir = tmp_path / "world"
    before = ScriptedModel()
    before.on(step="shell").call_tool("bash", {"cmd": FIRST}).then_call_tool(
        "bash", {"cmd": SECOND}
    )
    child = subprocess.Popen(
        _command(data_dir),
        cwd=REPO,
        env=_script(tmp_path / "before.json", before),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def second_command_running() -> bool:
        # tool_call.started is written ahead: with two, the second command is running now.
        return len([e for e in _events(data_dir) if e.type == "harness.tool_call.started"]) == 2

    sigkill_when(child, second_command_running, "the second command's start")
    at_kill = _events(data_dir)
    assert [e.payload["command"] for e in at_kill if e.type.endswith("command.succeeded")] == [
        FIRST
    ]

    # The resumed process's model is only asked what is left: the answer after the commands.
    after = ScriptedModel()
    after.on(step="shell").reply_text("done")
    resumed = subprocess.run(
        _command(data_dir),
        cwd=REPO,
        env=_script(tmp_path / "after.json", after),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == "done"

    events = _events(data_dir)
    started = [
        (e.payload["command"], e.payload["attempt"])
        for e in events
        if e.type == "harness.runtime.command.started"
    ]
    assert started.count((FIRST, 1)) == 1 and all(cmd != FIRST for cmd, n in started if n > 1)
    reused = [e for e in events if e.type == "little.harness.tool_call.memoized"]
    assert [e.payload["toolName"] for e in reused] == ["bash"]
    final = [e for e in events if e.type == "harness.tool_call.succeeded"][-1]
    # Run again (it was in flight at the kill), in the shell the first command left.
    assert final.payload["args"] == {"cmd": SECOND}
    assert final.payload["result"]["stdout"] == "/mnt/scratch/own/w\nblue\n"
    failed = [e for e in events if e.type == "StepFailed"]
    assert [e.payload["error"]["causeCode"] for e in failed] == ["lease_expired"]
