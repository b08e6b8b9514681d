"""SIGKILL a process whose parent run waits on a sub-run, run it again: the child runs once.

The process (:mod:`tests.subrun_kill_app`) runs a parent whose model calls a workflow tool;
the child's first step is recorded as completed and its second step is running when the
process is killed. Run again with the same parent run id, the parent's step is retried, its
model turn replayed from the memo, the same call derives the same child id and resumes that
child: one child run, one ``RunStarted`` in it, its first step's side effect once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from little_dist.events import Event
from little_dist.subruns import SUB_RUN_STARTED
from little_dist.world.local import LocalWorld
from tests.kill_helpers import sigkill_when

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "run_subrun_kill"


def _logs(data_dir: Path) -> dict[str, list[Event]]:
    if not (data_dir / "events" / "events.db").exists():
        return {}
    world = LocalWorld(data_dir)
    try:
        return {run: world.list_events(run) for run in world.list_run_ids()}
    finally:
        world.close()


def _types(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def test_sigkill_while_a_child_runs_then_resume_runs_the_child_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "world"
    side_effects = tmp_path / "side-effects.txt"
    command = [
        sys.executable,
        "-m",
        "tests.subrun_kill_app",
        str(data_dir),
        str(side_effects),
        RUN_ID,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def second_step_running() -> bool:
        for run, events in _logs(data_dir).items():
            if run.startswith("run_sub_") and any(
                e.type == "StepAttemptStarted" and e.payload.get("stepPath") == "second"
                for e in events
            ):
                return True
        return False

    sigkill_when(process, second_step_running, "the child's second step started", timeout=150)
    at_kill = _logs(data_dir)
    assert _types(at_kill[RUN_ID], "RunCompleted") == []
    (child,) = [run for run in at_kill if run.startswith("run_sub_")]
    assert [e.payload["stepPath"] for e in _types(at_kill[child], "StepCompleted")] == ["first"]

    resumed = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "child done"

    logs = _logs(data_dir)
    assert [run for run in logs if run.startswith("run_sub_")] == [child]
    assert len(_types(logs[child], "RunStarted")) == 1
    assert len(_types(logs[child], "RunCompleted")) == 1
    assert [e.payload["childRunId"] for e in _types(logs[RUN_ID], SUB_RUN_STARTED)] == [child]
    # The parent's step was retried; its retry took up the same child.
    attempts = [e.payload["attempt"] for e in _types(logs[RUN_ID], "StepAttemptStarted")]
    assert attempts == [1, 2]
    calls = Counter(side_effects.read_text(encoding="utf-8").splitlines())
    assert calls["first 21"] == 1  # recorded before the kill: never again
    assert 1 <= calls["second 21"] <= 2  # in flight at the kill: may run again
