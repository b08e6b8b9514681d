"""Ctrl-C of ``little run`` mid model call, then the same command resumes the run; and
``little run --deadline``.

A real child process runs ``python -m little_dist.cli run tests.cancel_app:two``: ``first``
answers at once, ``second``'s call takes 30 s. Once ``second``'s call is in flight the child
gets SIGINT (what Ctrl-C sends): it exits at once (130), not when the call would have ended,
and leaves the run open. Run again with the same run id (and a provider that now answers at
once), the run completes: ``first`` is not run again, ``second`` is retried.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from little_dist.events import Event
from little_dist.run_state import materialize_run_state
from little_dist.testing import ScriptedModel, read_call_log
from little_dist.world.local import LocalWorld
from tests.cancel_app import REPLY

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
RUN_ID = "run_ctrl_c"


def _command(data_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "little_dist.cli",
        "run",
        "tests.cancel_app:two",
        "--input",
        json.dumps({"item": "a"}),
        "--run-id",
        RUN_ID,
        "--data-dir",
        str(data_dir),
        "--lease-ttl",
        "1.5",
        *extra,
    ]


def _events(data_dir: Path) -> list[Event]:
    if not (data_dir / "events" / "events.db").exists():
        return []
    world = LocalWorld(data_dir)
    try:
        return world.list_events(RUN_ID)
    finally:
        world.close()


def _seconds(first: Event, then: Event) -> float:
    """Seconds from ``first``'s recording to ``then``'s."""
    return (_at(then) - _at(first)).total_seconds()


def _at(event: Event) -> dt.datetime:
    return dt.datetime.fromisoformat(event.recorded_at.replace("Z", "+00:00"))


def _script(path: Path, log: Path, *, second_latency: float) -> Path:
    script = ScriptedModel(call_log=log)
    script.on(step="second").reply_text(REPLY, times=None, latency=second_latency)
    script.otherwise().reply_text(REPLY, times=None)
    return script.save(path)


def _env(script: Path) -> dict[str, Any]:
    return {**os.environ, "PYTHONPATH": str(REPO), "LITTLE_SCRIPTED_MODEL": str(script)}


def test_ctrl_c_mid_call_then_the_same_command_resumes_the_run(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "world", tmp_path / "calls.jsonl"
    slow = _script(tmp_path / "slow.json", log, second_latency=30.0)
    child = subprocess.Popen(
        _command(data_dir, "--quiet"),
        cwd=REPO,
        env=_env(slow),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not any(
            e.type == "harness.model.called" and e.payload.get("stepPath") == "second"
            for e in _events(data_dir)
        ):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "second's call did not start in time"
            time.sleep(0.05)
        interrupted_at = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=28)
        took = time.monotonic() - interrupted_at
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, err
    # The 30 s call was not waited for (the margin is the interpreter's exit on a busy machine).
    assert took < 20
    assert f"run {RUN_ID} stays open" in err and "Traceback" not in err
    at_stop = _events(data_dir)
    assert materialize_run_state(at_stop).status == "running"  # not ended: resumable
    assert not [e for e in at_stop if e.type == "StepFailed"]
    # The interrupted call is recorded, with what it is taken to have spent.
    (stopped,) = [e for e in at_stop if e.type == "harness.model.failed"]
    assert stopped.payload["error"]["interrupted"] is True
    assert stopped.payload["error"]["usage"]["inputTokens"] > 0

    fast = _script(tmp_path / "fast.json", log, second_latency=0.0)
    resumed = subprocess.run(
        _command(data_dir, "--quiet"),
        cwd=REPO,
        env=_env(fast),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == REPLY
    events = _events(data_dir)
    completed = [e.payload["stepPath"] for e in events if e.type == "StepCompleted"]
    assert sorted(completed) == ["first", "second"]  # each once: first was not run again
    steps = [call["stepPath"] for call in read_call_log(log)]
    assert steps.count("first") == 1 and steps.count("second") == 2


def test_little_run_deadline_ends_the_run_mid_call(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "world", tmp_path / "calls.jsonl"
    slow = _script(tmp_path / "slow.json", log, second_latency=30.0)
    result = subprocess.run(
        _command(data_dir, "--quiet", "--deadline", "6s"),
        cwd=REPO,
        env=_env(slow),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "Run passed its deadline" in result.stderr
    assert "(deadline_exceeded)" in result.stderr
    events = _events(data_dir)
    (end,) = [e for e in events if e.type == "RunFailed"]
    assert end.payload["error"]["causeCode"] == "deadline_exceeded"
    # The run ended at its deadline, not when the 30 s call would have returned (timed on
    # the log, not from the command's start: importing litellm alone takes seconds).
    (called,) = [
        e
        for e in events
        if e.type == "harness.model.called" and e.payload.get("stepPath") == "second"
    ]
    assert _seconds(called, end) < 15


def test_little_run_refuses_a_bad_deadline(tmp_path: Path) -> None:
    result = subprocess.run(
        _command(tmp_path / "world", "--deadline", "whenever"),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "little run: little run: deadline must be a duration from now" not in result.stderr
    assert "deadline must be a duration from now such as '10m'" in result.stderr
    assert "Traceback" not in result.stderr


def test_little_run_applies_the_workflows_own_timeout(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "world", tmp_path / "calls.jsonl"
    script = ScriptedModel(call_log=log, latency=30.0)
    script.otherwise().reply_text(REPLY, times=None)
    command = _command(data_dir, "--quiet")
    command[command.index("tests.cancel_app:two")] = "tests.cancel_app:timed"
    result = subprocess.run(
        command,
        cwd=REPO,
        env=_env(script.save(tmp_path / "slow.json")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "Run exceeded its timeout of 1000 ms. (timeout)" in result.stderr
    events = _events(data_dir)
    (started,) = [e for e in events if e.type == "RunStarted"]
    (end,) = [e for e in events if e.type == "RunFailed"]
    assert _seconds(started, end) < 15  # not the 30 s call's
