"""THE kill test: SIGKILL ``little run`` mid-parallel, run it again, nothing recorded runs twice.

A real child process runs ``python -m little_dist.cli run`` on a parallel step whose branches
call ``record_branch`` (one line per real call in a side-effect file, then a short sleep).
Once at least two branches completed while another runs, the child is killed with SIGKILL
and the same command is run again with the same run id. The run must complete, with exactly
one ``StepCompleted`` per step path, and the memo's promise kept: a tool call recorded as
succeeded before the kill never runs again; only a call that was in flight (started, not
recorded) may run a second time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from little_dist.events import Event
from little_dist.run_state import materialize_run_state
from little_dist.world.local import LocalWorld
from tests.kill_helpers import sigkill_when
from tests.workflows_for_tests import KILL_WORKFLOW, SIDE_EFFECTS_ENV

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "run_kill_test"
KEYS = [f"k{index}" for index in range(8)]
LEASE_TTL = "1.5"


def _command(workflow: Path, data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "little_dist.cli",
        "run",
        str(workflow),
        "--input",
        json.dumps({"keys": KEYS, "sleep": 0.5}),
        "--run-id",
        RUN_ID,
        "--data-dir",
        str(data_dir),
        "--app",
        "tests.workflows_for_tests",
        "--lease-ttl",
        LEASE_TTL,
        "--quiet",
    ]


def _key_of(event: Event) -> str | None:
    path = event.payload.get("stepPath")
    if isinstance(path, str) and path.startswith("fan[") and path.endswith("].work"):
        return path[len("fan[") : -len("].work")]
    return None


def _events(data_dir: Path) -> list[Event]:
    world = LocalWorld(data_dir)
    try:
        return world.list_events(RUN_ID)
    finally:
        world.close()


def test_sigkill_mid_parallel_then_resume(tmp_path: Path) -> None:
    workflow = tmp_path / "workflow.json"
    workflow.write_text(json.dumps(KILL_WORKFLOW), encoding="utf-8")
    data_dir = tmp_path / "world"
    side_effects = tmp_path / "side-effects.txt"
    env = {**os.environ, SIDE_EFFECTS_ENV: str(side_effects), "PYTHONPATH": str(REPO)}
    command = _command(workflow, data_dir)

    child = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )

    def two_done_and_one_running() -> bool:
        # Both halves matter: killed between one batch's ends and the next batch's starts
        # (a loaded machine makes that gap wide), nothing would be in flight to expire.
        events = _events(data_dir) if (data_dir / "events" / "events.db").exists() else []
        if len({_key_of(e) for e in events if e.type == "StepCompleted"} - {None}) < 2:
            return False
        steps = materialize_run_state(events).steps
        return any(s.status == "running" for path, s in steps.items() if path != "fan")

    sigkill_when(child, two_done_and_one_running, "two completed branches and one running")

    at_kill = _events(data_dir)
    succeeded_before = {_key_of(e) for e in at_kill if e.type == "harness.tool_call.succeeded"} - {
        None
    }
    state_at_kill = materialize_run_state(at_kill)
    assert state_at_kill.status == "running"  # killed mid-run, not after the end
    in_flight = {
        path: len(step.attempts)
        for path, step in state_at_kill.steps.items()
        if step.status == "running" and path != "fan"
    }
    calls_before = Counter(side_effects.read_text().split())

    resumed = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    assert [item["itemKey"] for item in json.loads(resumed.stdout)] == KEYS

    events = _events(data_dir)
    state = materialize_run_state(events)
    assert state.status == "completed"
    # Exactly one StepCompleted per step path.
    completed = Counter(e.payload["stepPath"] for e in events if e.type == "StepCompleted")
    assert set(completed) == {"fan", *(f"fan[{key}].work" for key in KEYS)}
    assert all(count == 1 for count in completed.values()), completed
    # Every branch ran its tool for real; a call recorded as succeeded never ran again.
    calls = Counter(side_effects.read_text().split())
    assert set(calls) == set(KEYS)
    for key in KEYS:
        if key in succeeded_before:
            assert calls[key] == 1, (key, calls)
        else:
            # In flight at the kill (line written, result not recorded): at most one re-run.
            assert calls[key] - calls_before.get(key, 0) == 1, (key, calls, calls_before)
    # One recorded success per branch: retries replayed it from the memo instead.
    succeeded = Counter(_key_of(e) for e in events if e.type == "harness.tool_call.succeeded")
    assert all(succeeded[key] == 1 for key in KEYS), succeeded
    # Attempts the kill left running were failed as lease_expired, then retried.
    for path, attempt in in_flight.items():
        ends = [
            e
            for e in events
            if e.type in ("StepCompleted", "StepFailed")
            and e.payload.get("stepPath") == path
            and e.occurrence_id == f"end:{path}:{attempt}"
        ]
        assert len(ends) == 1 and ends[0].type == "StepFailed", (path, ends)
        assert ends[0].payload["error"]["causeCode"] == "lease_expired"
    assert in_flight, "the kill should have caught branches in flight"
