"""What a sub-run inherits, in process: the orchestration's pipeline memory store read-only
(upstream mounts ``/mnt/memory/pipeline/`` ``ro`` in the orchestrated sub-runs' sessions) and
its parent's denies, both recorded in the child's ``RunStarted`` (``inherited``) and part of
the child's session manifest. The fleet's side is ``tests/test_subruns_inherit_fleet.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow
from little_dist.canonical import sha256_digest
from little_dist.memory import MemoryMountSpec, memory_store_for
from little_dist.memory.layout import pipeline_store_id
from little_dist.permissions import PermissionRule, ToolPermissions
from little_dist.runtime.capabilities import Capabilities, RuntimeConfigError
from little_dist.runtime.inherited import Inherited, inherited_from, with_inherited
from little_dist.subruns import SUB_RUN_STARTED, run_orchestration
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.bash_fleet_app import shell_plan
from tests.test_subruns_permissions import _script, child_workflow, parent_workflow

BOSS = model("scripted/boss", id="boss")
DENY = PermissionRule("look*", "deny")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[LocalWorld]:
    opened = LocalWorld(tmp_path / "data")
    try:
        yield opened
    finally:
        opened.close()


def reader_workflow() -> Any:
    """An orchestrated workflow whose model has bash."""
    return define_workflow(
        id="notes.reader",
        description="Reads the pipeline's notes.",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/reader", id="default"),
        plan=shell_plan("notes.reader"),
        bash={"python": False},
    )


# -- the record and how an attempt applies it (pure) ----------------------------------------


def test_the_record_round_trips_and_carries_denies_only() -> None:
    rules = ToolPermissions((PermissionRule("x", "allow"), DENY, PermissionRule("y", "ask")))
    mounts = [MemoryMountSpec("pipeline:sha256:ab", "/mnt/memory/pipeline/", "rw")]
    made = inherited_from(rules, mounts)
    assert made == Inherited((DENY,), "pipeline:sha256:ab")
    assert made.to_payload() == {
        "permissionDenies": [{"tool": "look*", "action": "deny"}],
        "pipelineMemoryStore": "pipeline:sha256:ab",
    }
    assert Inherited.from_payload(made.to_payload()) == made
    # The caller's store wins over the session's own mount; nothing to pass is nothing.
    assert inherited_from(None, mounts, pipeline_store="pipeline:x").pipeline_store == "pipeline:x"
    assert not inherited_from(ToolPermissions((PermissionRule("x", "allow"),)), [])


def test_applying_it_puts_the_denies_first_and_mounts_the_store_read_only() -> None:
    own = Capabilities(
        permissions=ToolPermissions((PermissionRule("*", "allow"),)),
        memory_mounts=(MemoryMountSpec("org", "/mnt/memory/org/", "ro"),),
    )
    assert with_inherited(own, None) is own
    made = with_inherited(
        own,
        {"permissionDenies": [DENY.to_json()], "pipelineMemoryStore": "pipeline:sha256:ab"},
    )
    assert made.permissions is not None
    assert made.permissions.ruleset == (DENY, PermissionRule("*", "allow"))
    assert made.memory_mounts[-1] == MemoryMountSpec(
        "pipeline:sha256:ab", "/mnt/memory/pipeline/", "ro"
    )
    # Applied twice (in process the child's workflow has the denies already): the same.
    assert with_inherited(made, {"permissionDenies": [DENY.to_json()]}) is made
    # A child that orchestrates keeps its own pipeline store.
    orchestrating = Capabilities(
        memory_mounts=(MemoryMountSpec("pipeline:own", "/mnt/memory/pipeline/", "rw"),)
    )
    kept = with_inherited(orchestrating, {"pipelineMemoryStore": "pipeline:parent"})
    assert kept is orchestrating


@pytest.mark.parametrize(
    "recorded",
    [
        "deny all",
        {"permissionDenies": "look*"},
        {"permissionDenies": [{"tool": "look*", "action": "allow"}]},
        {"permissionDenies": [{"tool": "", "action": "deny"}]},
        {"pipelineMemoryStore": "workflow:other"},
        {"somethingElse": 1},
    ],
)
def test_a_malformed_record_is_refused(recorded: Any) -> None:
    with pytest.raises(RuntimeConfigError, match=r"RunStarted\.inherited"):
        with_inherited(Capabilities(), recorded)


def test_a_malformed_record_fails_the_childs_attempt_never_runs_it_with_less(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    from little_dist.compiler import compile_lwir
    from little_dist.local_runner import run_version

    scripted_model.on(model="reader").reply_text("ran anyway")
    reader = reader_workflow()
    version = compile_lwir(shell_plan("notes.reader"), input={})
    state = run_version(
        world,
        version,
        {},
        run_id="run_bad_child",
        capabilities=reader.capabilities(),
        parent={"parentRunId": "run_p", "inherited": {"permissionDenies": "look*"}},
    )
    assert state.status == "failed"
    assert state.error["causeCode"] == "runtime_config_error"
    assert scripted_model.calls_for(model="reader") == []


# -- the pipeline store in an orchestrated sub-run ------------------------------------------


def _child_of(world: LocalWorld, parent: str) -> str:
    (start,) = [
        e
        for e in world.list_events(parent)
        if e.type == SUB_RUN_STARTED and e.payload["disposition"] == "await"
    ]
    return str(start.payload["childRunId"])


ESCAPES = [
    "echo out > /mnt/memory/pipeline/../escaped.txt",
    "cd /mnt/memory/pipeline && echo out > ../escaped.txt",
    "ln -s /etc/hostname /mnt/memory/pipeline/link.txt",
    "mkdir /mnt/memory/pipeline/new",
    "rm /mnt/memory/pipeline/plan.md",
]


def test_an_orchestrated_child_reads_the_pipeline_store_and_cannot_write_it(
    world: LocalWorld, scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    reader = reader_workflow()
    pipeline = pipeline_store_id([reader.definition_hash()])
    # An earlier orchestration of the same workflow wrote the pipeline's notes.
    scripted_model.on(model="boss", run="run_orch_write").call_tool(
        "bash", {"cmd": "echo 'plan: read me' > /mnt/memory/pipeline/plan.md"}
    ).then_reply_text("noted")
    first = run_orchestration(
        [reader], {}, model=BOSS, world=world, run_id="run_orch_write", bash={"python": False}
    )
    assert first.status == "completed"
    # The next one (its orchestrator without bash) starts the reader as a sub-run.
    scripted_model.on(model="boss", run="run_orch_read").call_tool(
        "start_workflow", {"workflowId": "notes.reader", "input": {}}
    ).then_reply_text("read")
    scripted_model.on(model="reader").call_tool(
        "bash", {"cmd": "cat /mnt/memory/pipeline/plan.md"}
    ).then_call_tool("bash", {"cmd": "echo mine > /mnt/memory/pipeline/plan.md"}).then_call_tools(
        [("bash", {"cmd": command}) for command in ESCAPES]
    ).then_reply_text("child done")
    second = run_orchestration([reader], {}, model=BOSS, world=world, run_id="run_orch_read")
    assert second.status == "completed"
    child = _child_of(world, "run_orch_read")
    turns = scripted_model.calls_for(model="reader")
    read = json.loads(turns[1].tool_results[-1]["content"])
    write = json.loads(turns[2].tool_results[-1]["content"])
    assert read["exitCode"] == 0 and read["stdout"] == "plan: read me\n"
    assert write["exitCode"] != 0 and "Read-only file system" in write["stderr"]
    escapes = [json.loads(item["content"]) for item in turns[3].tool_results[-len(ESCAPES) :]]
    for command, result in zip(ESCAPES, escapes, strict=True):
        assert result["exitCode"] != 0, (command, result)
    # The store is as the orchestrator left it; nothing landed outside it.
    store = memory_store_for(world)
    entries = store.entries(pipeline)
    assert sorted(entries) == ["plan.md"] and entries["plan.md"].version == 1
    assert store.read(pipeline, entries["plan.md"]) == b"plan: read me\n"
    assert not list((tmp_path / "data" / "memory").rglob("escaped.txt"))
    # Listed in its prompt, part of its manifest, recorded in the child's own log.
    system = str(turns[0].messages[0]["content"])
    assert '<store path="/mnt/memory/pipeline/" mode="ro"/>' in system
    (session,) = [e for e in world.list_events(child) if e.type == "harness.session.started"]
    manifest = session.payload["manifest"]
    assert pipeline in manifest["memoryStoreIds"]
    mounts = [("org", "/mnt/memory/org/", "ro"), (pipeline, "/mnt/memory/pipeline/", "ro")]
    mounts += [("workflow:notes-reader", "/mnt/memory/workflow/", "rw")]
    assert manifest["memoryMountsHash"] == _mounts_hash(mounts)
    (started,) = [e for e in world.list_events(child) if e.type == "RunStarted"]
    assert started.payload["inherited"] == {"pipelineMemoryStore": pipeline}


def _mounts_hash(mounts: list[tuple[str, str, str]]) -> str:
    return sha256_digest(sorted(list(mount) for mount in mounts))


# -- the parent's denies --------------------------------------------------------------------


def test_the_parents_denies_are_recorded_in_the_childs_log_and_manifest(
    world: LocalWorld, scripted_model: ScriptedModel
) -> None:
    _script(scripted_model)
    seen: list[str] = []
    child = child_workflow(seen, permissions=[{"tool": "*", "action": "allow"}])
    deny = [{"tool": "look*", "action": "deny"}, {"tool": "other", "action": "allow"}]
    result = run_workflow(parent_workflow(child), {}, world=world, run_id="run_p", permissions=deny)
    assert result.output == "parent done" and seen == []
    kid = _child_of(world, "run_p")
    (session,) = [e for e in world.list_events(kid) if e.type == "harness.session.started"]
    assert session.payload["manifest"]["permissionsHash"] == sha256_digest(
        [{"tool": "look*", "action": "deny"}, {"tool": "*", "action": "allow"}]
    )
    (started,) = [e for e in world.list_events(kid) if e.type == "RunStarted"]
    assert started.payload["inherited"] == {
        "permissionDenies": [{"tool": "look*", "action": "deny"}]
    }
