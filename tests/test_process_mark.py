"""A lease whose holder's process died is free at once on one machine (the process mark,
little_dist.world.process_mark): a crashed ``little run`` resumes without waiting out its
lease, while a live holder, or one this process cannot judge, still holds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from little_dist.run_state import materialize_run_state
from little_dist.world.base import unique_holder
from little_dist.world.local import LocalWorld
from little_dist.world.process_mark import _start_time, holder_is_dead, marked, process_mark
from tests.kill_helpers import sigkill_when
from tests.workflows_for_tests import KILL_WORKFLOW, SIDE_EFFECTS_ENV

REPO = Path(__file__).resolve().parent.parent
MARK = re.compile(r"~(\d+)\.(\d+)\.(\d+)\.([0-9a-f]{12})$")


def _parts() -> tuple[str, str, str, str]:
    found = MARK.search(process_mark())
    assert found is not None, process_mark()
    return found[1], found[2], found[3], found[4]


def _mark_of(pid: int) -> str:
    _, _, pidns, boot = _parts()
    start = _start_time(pid)
    assert start is not None
    return f"~{pid}.{start}.{pidns}.{boot}"


def test_holders_carry_this_process_mark_and_this_process_is_alive() -> None:
    pid, _, _, _ = _parts()
    assert int(pid) == os.getpid()
    assert unique_holder("attempt").endswith(process_mark())
    assert not holder_is_dead(marked("runner:x"))
    assert not holder_is_dead(marked("runner:x") + ":sweep")


def test_a_killed_process_is_dead_and_a_reused_pid_is_not_the_same_process() -> None:
    child = subprocess.Popen(["sleep", "60"])
    holder = "runner:child" + _mark_of(child.pid)
    assert not holder_is_dead(holder)
    child.kill()
    child.wait()
    assert holder_is_dead(holder)
    pid, start, pidns, boot = _parts()
    # Our own pid with another start time: a process that had this pid before us.
    assert holder_is_dead(f"runner~{pid}.{int(start) - 1}.{pidns}.{boot}")


@pytest.mark.parametrize(
    "holder",
    [
        "runner:no-mark",
        "runner~999999.1.{pidns}.000000000000",  # another boot (or machine): cannot tell
        "runner~999999.1.1.{boot}",  # another pid namespace (a container): cannot tell
    ],
)
def test_a_holder_this_process_cannot_judge_is_not_dead(holder: str) -> None:
    _, _, pidns, boot = _parts()
    assert not holder_is_dead(holder.format(pidns=pidns, boot=boot))


def test_the_local_world_takes_a_dead_holders_lease_at_once_and_keeps_a_live_ones(
    tmp_path: Path,
) -> None:
    world = LocalWorld(tmp_path / "world")
    try:
        child = subprocess.Popen(["sleep", "60"])
        dead = "runner:child" + _mark_of(child.pid)
        first = world.acquire_lease("k", dead, 600)
        assert first is not None
        assert world.acquire_lease("k", marked("runner:me"), 600) is None  # alive: held
        assert world.acquire_lease("k", "runner:other", 600) is None
        child.kill()
        child.wait()
        taken = world.acquire_lease("k", marked("runner:me"), 600)
        assert taken is not None and taken.token == first.token + 1  # a new tenure
        # An unmarked holder is never judged: its lease runs to its expiry.
        assert world.acquire_lease("u", "runner:unmarked-and-gone", 600) is not None
        assert world.acquire_lease("u", marked("runner:me"), 600) is None
    finally:
        world.close()


@pytest.mark.slow
def test_little_run_killed_mid_run_resumes_without_waiting_for_its_lease(
    tmp_path: Path,
) -> None:
    workflow = tmp_path / "workflow.json"
    workflow.write_text(json.dumps(KILL_WORKFLOW), encoding="utf-8")
    data_dir = tmp_path / "world"
    env = {**os.environ, SIDE_EFFECTS_ENV: str(tmp_path / "fx.txt"), "PYTHONPATH": str(REPO)}
    keys = [f"k{index}" for index in range(6)]
    command = [
        sys.executable, "-m", "little_dist.cli", "run", str(workflow),
        "--input", json.dumps({"keys": keys, "sleep": 0.5}),
        "--run-id", "run_mark_resume", "--data-dir", str(data_dir),
        "--app", "tests.workflows_for_tests",
        "--lease-ttl", "60",  # a resume that waited for the dead runner's lease would take 60 s
    ]  # fmt: skip
    child = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)  # fmt: skip

    def one_running() -> bool:
        if not (data_dir / "events" / "events.db").exists():
            return False
        world = LocalWorld(data_dir)
        try:
            events = world.list_events("run_mark_resume")
            steps = materialize_run_state(events).steps if events else {}
        finally:
            world.close()
        return any(s.status == "running" for path, s in steps.items() if path != "fan")

    sigkill_when(child, one_running, "a branch running")
    started = time.monotonic()
    resumed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    took = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stderr
    assert "held by another runner" not in resumed.stderr
    assert [item["itemKey"] for item in json.loads(resumed.stdout)] == keys
    assert took < 30, f"the resume took {took:.1f} s: it waited for the dead runner's lease"
    world = LocalWorld(data_dir)
    try:
        events = world.list_events("run_mark_resume")
    finally:
        world.close()
    expired = [e for e in events if e.type == "StepFailed"
               and e.payload.get("error", {}).get("causeCode") == "lease_expired"]  # fmt: skip
    assert expired, "the attempt the kill left running was not failed and retried"
