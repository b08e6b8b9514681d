"""Run scratch wired into step attempts (in process): what a step's model writes with bash is
published with its commit and read by a later step under ``/mnt/scratch/peer-steps``; a
failed attempt's writes are seen by no one, its retry included."""

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


def test_a_retried_attempt_and_the_peers_never_see_the_failed_attempts_writes(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="write").call_tool(
        "bash", {"cmd": "echo secret > lost.txt"}
    ).then_raise_error("server").then_call_tool(
        "bash", {"cmd": "ls -A; echo kept > kept.txt"}
    ).then_reply_text("wrote")
    scripted_model.on(step="read").call_tool(
        "bash", {"cmd": "ls -A /mnt/scratch/peer-steps/write"}
    ).then_reply_text("read")
    world = LocalWorld(tmp_path / "data")
    write = bash_step("write", retry={"maxAttempts": 2})
    result = two_steps(write).run({}, world=world)
    assert result.status == "completed", result
    # Attempt 2 replayed attempt 1's recorded command without running it, on a fresh folder.
    shown = seen_by(scripted_model, "write")
    assert shown[-1] == {"stdout": "", "stderr": "", "exitCode": 0}
    assert seen_by(scripted_model, "read") == [
        {"stdout": "kept.txt\n", "stderr": "", "exitCode": 0}
    ]
    events = world.list_events(result.run_id)
    assert [e.payload["attempt"] for e in of(events, "StepFailed")] == [1]
    published = [e.payload["path"] for e in events if e.type.startswith("harness.file.")]
    assert published == ["/mnt/scratch/own/kept.txt"]


def test_a_step_that_fails_publishes_nothing(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="write").call_tool(
        "bash", {"cmd": "echo half > half.txt"}
    ).then_raise_error("server")
    world = LocalWorld(tmp_path / "data")
    with pytest.raises(RunFailedError) as caught:
        two_steps(bash_step("write")).run({}, world=world)
    events = world.list_events(caught.value.run_id)
    assert of(events, "StepFailed") and not [e for e in events if "harness.file" in e.type]
