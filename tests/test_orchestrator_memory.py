"""An orchestrating session's memory, as upstream mounts it: ``/mnt/memory/pipeline/`` read-write
(the store of this set of workflows, read back by the next orchestration of the same set),
``/mnt/memory/org/`` and ``/mnt/memory/available-workflows/<key>/`` read-only; writes to the
read-only mounts and every way out of a mount are refused, and nothing outside a store
lands in it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model
from little_dist.memory import MemoryChange, memory_store_for
from little_dist.memory.layout import orchestrator_memory_mounts, pipeline_key
from little_dist.subruns import run_orchestration
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.test_subruns import double_workflow

BOSS = model("scripted/boss", id="boss")
DOUBLE_STORE = "workflow:math-double"


def _notes_workflow() -> Any:
    return define_workflow(
        id="Notes.Keeper",
        description="Keeps notes.",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/kid", id="kid"),
    )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()


def _orchestrate(world: LocalWorld, workflows: list[Any], run_id: str) -> Any:
    return run_orchestration(
        workflows, {}, model=BOSS, world=world, run_id=run_id, bash={"python": False}
    )


def _results(script: ScriptedModel, run_id: str) -> list[dict[str, Any]]:
    """Each command's result, as the model read it (the last tool result of each turn)."""
    return [
        json.loads(call.tool_results[-1]["content"])
        for call in script.calls
        if call.run_id == run_id and call.tool_results
    ]


def _pipeline_store(workflows: list[Any]) -> str:
    return f"pipeline:{pipeline_key(wf.definition_hash() for wf in workflows)}"


def test_the_mounts_are_upstreams() -> None:
    double, notes = double_workflow(), _notes_workflow()
    mounts = orchestrator_memory_mounts((wf.id, wf.definition_hash()) for wf in (notes, double))
    assert [(m.store_id, m.mount_path, m.mode) for m in mounts] == [
        (_pipeline_store([double, notes]), "/mnt/memory/pipeline/", "rw"),
        ("org", "/mnt/memory/org/", "ro"),
        (DOUBLE_STORE, "/mnt/memory/available-workflows/math-double/", "ro"),
        ("workflow:notes-keeper", "/mnt/memory/available-workflows/notes-keeper/", "ro"),
    ]


def test_the_orchestrator_writes_pipeline_memory_and_reads_the_available_workflows(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    double, notes = double_workflow(), _notes_workflow()
    store = memory_store_for(world)
    store.commit(DOUBLE_STORE, [MemoryChange("lessons.md", 0, b"double: use ints\n")], writer="w")
    store.commit("org", [MemoryChange("policy.md", 0, b"be brief\n")], writer="w")
    scripted_model.on(model="boss", run="run_orch_first").call_tool(
        "bash",
        {
            "cmd": "cat /mnt/memory/available-workflows/math-double/lessons.md "
            "/mnt/memory/org/policy.md; ls /mnt/memory/available-workflows; "
            "echo 'plan: double first' > /mnt/memory/pipeline/plan.md"
        },
    ).then_call_tool(
        "bash", {"cmd": "echo mine > /mnt/memory/available-workflows/math-double/lessons.md"}
    ).then_call_tool("bash", {"cmd": "echo mine > /mnt/memory/org/policy.md"}).then_reply_text(
        "planned"
    )
    first = _orchestrate(world, [double, notes], "run_orch_first")
    assert first.status == "completed" and first.output == "planned"
    read, available_write, org_write = _results(scripted_model, "run_orch_first")
    assert read["stdout"] == "double: use ints\nbe brief\nmath-double\nnotes-keeper\n"
    for refused in (available_write, org_write):
        assert refused["exitCode"] != 0 and "Read-only file system" in refused["stderr"]
    # The pipeline store holds the write; the read-only stores are as they were.
    pipeline = _pipeline_store([double, notes])
    entries = store.entries(pipeline)
    assert store.read(pipeline, entries["plan.md"]) == b"plan: double first\n"
    assert store.read(DOUBLE_STORE, store.entries(DOUBLE_STORE)["lessons.md"]) == (
        b"double: use ints\n"
    )
    assert store.read("org", store.entries("org")["policy.md"]) == b"be brief\n"
    # The orchestrator's own workflow store is not mounted (upstream mounts none).
    assert store.entries("workflow:orchestrator") == {}
    created = [e for e in world.list_events(first.run_id) if e.type == "harness.file.created"]
    assert [(e.payload["path"], e.payload["store"]) for e in created] == [
        ("/mnt/memory/pipeline/plan.md", pipeline)
    ]

    # The next orchestration of the same workflows (given in another order) reads it ...
    scripted_model.on(model="boss", run="run_orch_again").call_tool(
        "bash", {"cmd": "cat /mnt/memory/pipeline/plan.md"}
    ).then_reply_text("read")
    assert _orchestrate(world, [notes, double], "run_orch_again").status == "completed"
    assert _results(scripted_model, "run_orch_again")[0]["stdout"] == "plan: double first\n"
    # ... and one of another set has a pipeline store of its own.
    scripted_model.on(model="boss", run="run_orch_other").call_tool(
        "bash", {"cmd": "ls -A /mnt/memory/pipeline/; ls /mnt/memory/available-workflows"}
    ).then_reply_text("other")
    assert _orchestrate(world, [double], "run_orch_other").status == "completed"
    assert _results(scripted_model, "run_orch_other")[0]["stdout"] == "math-double\n"


ESCAPES = [
    "ln -s /etc/hostname /mnt/memory/pipeline/link.txt",
    "ln -s .. /mnt/memory/pipeline/up",
    "cd /mnt/memory/pipeline && echo out > ../escaped.txt",
    "echo out > /mnt/memory/pipeline/../../escaped.txt",
    "echo out > /mnt/memory/available-workflows/escaped.txt",
    "echo out > /mnt/memory/available-workflows/math-double/../x.txt",
    "mkdir -p /mnt/memory/available-workflows/new",
    "echo out > /mnt/memory/escaped.txt",
    "echo out > /escaped.txt",
]


def test_nothing_outside_the_pipeline_store_lands_in_any_store(
    world: LocalWorld, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    double = double_workflow()
    scripted_model.on(model="boss", run="run_orch_escape").call_tools(
        [("bash", {"cmd": command}) for command in ESCAPES]
    ).then_call_tool("bash", {"cmd": "echo kept > /mnt/memory/pipeline/kept.txt"}).then_reply_text(
        "done"
    )
    assert _orchestrate(world, [double], "run_orch_escape").status == "completed"
    turns = [c for c in scripted_model.calls if c.run_id == "run_orch_escape"]
    results = [json.loads(item["content"]) for item in turns[1].tool_results[-len(ESCAPES) :]]
    # Every write outside the pipeline folder fails (read-only or no such mount) ...
    for command, result in zip(ESCAPES[2:], results[2:], strict=True):
        assert result["exitCode"] != 0, (command, result)
    # ... the links made inside it are not published as files, nothing else left any store.
    store = memory_store_for(world)
    pipeline = _pipeline_store([double])
    assert {p: e.exists for p, e in store.entries(pipeline).items()} == {"kept.txt": True}
    assert store.entries(DOUBLE_STORE) == {} and store.entries("org") == {}
    assert not list((tmp_path / "data" / "memory").rglob("escaped.txt"))
    assert not list((tmp_path / "data" / "memory").rglob("x.txt"))
