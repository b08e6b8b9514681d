"""Run scratch wired into step attempts (in process): what a step's model writes with bash is
published with its commit and read by a later step under ``/mnt/scratch/peer-steps``; a
failed attempt publishes nothing, and its retry, which replays the recorded commands, finds
the files they wrote."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model
from little_dist.authoring.errors import RunFailedError
from little_dist.events import Event
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld

WRITE = "mkdir -p notes && printf 'cats purr\\n' > notes/a.txt && ln -s /etc/passwd link"
READ = "cat /mnt/scratch/peer-steps/write/notes/a.txt; ls -A /mnt/scratch/own"


def bash_step(step_id: str, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": step_id,
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": "Use bash.", "tools": ["bash"]},
        "output": {"mode": "text"},
    }
    step.update(extra)
    return step


def two_steps(write: dict[str, Any]) -> Any:
    plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "scratch.pair", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}, "from": "${{ steps.read.output }}"},
        "permissions": {"models": ["default"], "tools": [], "secrets": [], "network": []},
        "steps": [write, bash_step("read", needs=["write"])],
    }
    return define_workflow(
        id="scratch.pair",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/scratch", id="default"),
        plan=plan,
        bash={},
    )


def seen_by(script: ScriptedModel, step: str) -> list[dict[str, Any]]:
    """What ``step``'s model was shown as the results of its bash calls."""
    return [
        json.loads(call.tool_results[-1]["content"])
        for call in script.calls
        if call.step_path == step and call.tool_results
    ]


def of(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def attempt_of(event: Event) -> str:
    """The attempt a file event was published by (its occurrence id: kind:step:attempt:...)."""
    return (event.occurrence_id or "").split(":")[2]


def test_a_later_step_reads_the_file_a_peer_wrote_with_bash(
    tmp_path: Path, scripted_model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    scripted_model.on(step="write").call_tool("bash", {"cmd": WRITE}).then_reply_text("wrote")
    scripted_model.on(step="read").call_tool("bash", {"cmd": READ}).then_reply_text("read")
    world = LocalWorld(tmp_path / "data")
    with caplog.at_level(logging.WARNING, logger="little_dist.scratch"):
        result = two_steps(bash_step("write")).run({}, world=world)
    assert result.status == "completed", result
    # The reader sees the writer's file, and starts on its own (empty) folder.
    assert seen_by(scripted_model, "read") == [
        {"stdout": "cats purr\n", "stderr": "", "exitCode": 0}
    ]
    events = world.list_events(result.run_id)
    (created,) = of(events, "harness.file.created")
    assert created.payload["path"] == "/mnt/scratch/own/notes/a.txt"
    assert created.payload["stepPath"] == "write" and created.payload["bytes"] == 10
    # Published in the commit that completed the writer, just ahead of its StepCompleted.
    completed = next(e for e in of(events, "StepCompleted") if e.payload["stepPath"] == "write")
    between = [e.type for e in events if created.sequence < e.sequence < completed.sequence]
    assert between == ["StepOutputValidated"]
    stored = world.get_artifact(created.payload["artifactRef"]).payload
    assert stored == b"cats purr\n"
    # The symlink was not published, and the operator's log says so.
    assert "step 'write' attempt 1: scratch entry link (a symlink, not published)" in caplog.text


REPLAYED_1 = "mkdir -p d && echo one > d/a.txt && echo two > b.txt"
REPLAYED_2 = "rm b.txt && echo 'echo hi' > r.sh && chmod +x r.sh"
LIVE = "find . -type f | sort; cat d/a.txt; test -x r.sh && echo executable"


def test_a_retried_attempt_finds_the_files_its_replayed_commands_wrote(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="write").call_tool("bash", {"cmd": REPLAYED_1}).then_call_tool(
        "bash", {"cmd": REPLAYED_2}
    ).then_raise_error("server").then_call_tool("bash", {"cmd": LIVE}).then_reply_text("wrote")
    scripted_model.on(step="read").call_tool(
        "bash", {"cmd": "cd /mnt/scratch/peer-steps/write && find . -type f | sort"}
    ).then_reply_text("read")
    world = LocalWorld(tmp_path / "data")
    write = bash_step("write", retry={"maxAttempts": 2})
    result = two_steps(write).run({}, world=world)
    assert result.status == "completed", result
    events = world.list_events(result.run_id)
    # Attempt 2 replayed both recorded commands (nothing ran again) ...
    started = of(events, "harness.runtime.command.started")
    assert [(e.payload["command"], e.payload["attempt"]) for e in started][:3] == [
        (REPLAYED_1, 1),
        (REPLAYED_2, 1),
        (LIVE, 2),
    ]
    assert len(of(events, "little.harness.tool_call.memoized")) == 2
    # ... and its live command found own/ as the second one left it: a.txt, no b.txt, r.sh
    # still executable.
    assert seen_by(scripted_model, "write")[-1] == {
        "stdout": "./d/a.txt\n./r.sh\none\nexecutable\n",
        "stderr": "",
        "exitCode": 0,
    }
    # Each recorded command carries the manifest of own/ after it.
    calls = [e for e in of(events, "harness.tool_call.succeeded") if e.payload["attempt"] == 1]
    assert sorted(calls[0].payload["sandbox"]["own"]["files"]) == ["b.txt", "d/a.txt"]
    assert sorted(calls[1].payload["sandbox"]["own"]["files"]) == ["d/a.txt", "r.sh"]
    # Published only with attempt 2's commit; the failed attempt 1 published nothing.
    (failed,) = of(events, "StepFailed")
    files = [e for e in events if e.type.startswith("harness.file.")]
    assert all(e.sequence > failed.sequence and attempt_of(e) == "2" for e in files)
    assert sorted(e.payload["path"] for e in files) == [
        "/mnt/scratch/own/d/a.txt",
        "/mnt/scratch/own/r.sh",
    ]
    assert seen_by(scripted_model, "read") == [
        {"stdout": "./d/a.txt\n./r.sh\n", "stderr": "", "exitCode": 0}
    ]


def test_a_retry_that_only_replays_commands_still_publishes_their_files(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="write").call_tool("bash", {"cmd": REPLAYED_1}).then_raise_error(
        "server"
    ).then_reply_text("wrote")
    scripted_model.on(step="read").call_tool(
        "bash", {"cmd": "cat /mnt/scratch/peer-steps/write/b.txt"}
    ).then_reply_text("read")
    world = LocalWorld(tmp_path / "data")
    result = two_steps(bash_step("write", retry={"maxAttempts": 2})).run({}, world=world)
    assert result.status == "completed", result
    events = world.list_events(result.run_id)
    started = of(events, "harness.runtime.command.started")
    assert [(e.payload["stepPath"], e.payload["attempt"]) for e in started] == [
        ("write", 1),
        ("read", 1),
    ]
    files = [e for e in events if e.type.startswith("harness.file.")]
    assert sorted(e.payload["path"] for e in files) == [
        "/mnt/scratch/own/b.txt",
        "/mnt/scratch/own/d/a.txt",
    ]
    assert {attempt_of(e) for e in files} == {"2"}
    assert seen_by(scripted_model, "read") == [{"stdout": "two\n", "stderr": "", "exitCode": 0}]


def test_a_step_that_fails_publishes_nothing(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="write").call_tool(
        "bash", {"cmd": "echo half > half.txt"}
    ).then_raise_error("server")
    world = LocalWorld(tmp_path / "data")
    with pytest.raises(RunFailedError) as caught:
        two_steps(bash_step("write")).run({}, world=world)
    events = world.list_events(caught.value.run_id)
    assert of(events, "StepFailed") and not [e for e in events if "harness.file" in e.type]
