"""Memory through the bash tool, in process: a run's writes to ``/mnt/memory/workflow/`` are
read by the next run; ``/mnt/memory/org/`` refuses writes; whatever a command does to escape
a memory mount (``..``, absolute paths, symlinks out, FIFOs, devices, over-long paths) never
reaches a store or the host."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model
from little_dist.authoring.errors import RunFailedError
from little_dist.errors import StorageUnavailableError
from little_dist.event_types import parse_event
from little_dist.memory import (
    AttemptMemory,
    MemoryChange,
    MemoryLimitError,
    memory_store_for,
    workflow_memory_mounts,
)
from little_dist.memory.layout import MemoryConfig
from little_dist.memory.local import LocalMemoryStore
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.bash_fleet_app import shell_plan

STORE = "workflow:memory-demo"


def memory_workflow(**options: Any) -> Any:
    return define_workflow(
        id="memory.demo",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/memory", id="default"),
        plan=shell_plan("memory.demo"),
        bash={},
        **options,
    )


def _results(script: ScriptedModel) -> list[dict[str, Any]]:
    return [json.loads(c.tool_results[-1]["content"]) for c in script.calls if c.tool_results]


def test_the_second_run_reads_what_the_first_wrote(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    world = LocalWorld(tmp_path / "data")
    scripted_model.on(step="shell", run="run_first").call_tool(
        "bash", {"cmd": "echo 'lesson one' >> /mnt/memory/workflow/lessons.txt"}
    ).then_reply_text("wrote")
    scripted_model.on(step="shell", run="run_second").call_tool(
        "bash", {"cmd": "cat /mnt/memory/workflow/lessons.txt"}
    ).then_reply_text("read")
    first = memory_workflow().run({}, world=world, run_id="run_first")
    assert first.status == "completed"
    second = memory_workflow().run({}, world=world, run_id="run_second")
    assert second.status == "completed"
    assert _results(scripted_model)[-1]["stdout"] == "lesson one\n"
    # The write is recorded with the commit, in upstream's file-event shape.
    events = world.list_events(first.run_id)
    (created,) = [e for e in events if e.type == "harness.file.created"]
    parse_event(created.model_dump(by_alias=True))
    assert created.payload["path"] == "/mnt/memory/workflow/lessons.txt"
    assert created.payload["root"] == "memory" and created.payload["store"] == STORE
    types = [e.type for e in events]
    assert types.index("harness.file.created") < types.index("StepCompleted")
    # Kept where upstream keeps it: the data directory's memory/workflows/<key>/.
    kept = tmp_path / "data" / "memory" / "workflows" / "memory-demo" / "lessons.txt"
    assert kept.read_text() == "lesson one\n"


def test_a_write_to_the_read_only_org_store_fails_and_changes_nothing(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    world = LocalWorld(tmp_path / "data")
    store = memory_store_for(world)
    store.commit("org", [MemoryChange("policy.md", 0, b"be kind\n")], writer="operator")
    scripted_model.on(step="shell").call_tool(
        "bash",
        {
            "cmd": "cat /mnt/memory/org/policy.md; echo changed > /mnt/memory/org/policy.md; "
            "echo new > /mnt/memory/org/new.md"
        },
    ).then_reply_text("tried")
    result = memory_workflow().run({}, world=world)
    assert result.status == "completed"
    (seen,) = _results(scripted_model)
    assert seen["stdout"] == "be kind\n"
    assert seen["stderr"].count("Read-only file system") == 2
    assert seen["exitCode"] != 0
    assert sorted(store.entries("org")) == ["policy.md"]
    assert store.read("org", store.entries("org")["policy.md"]) == b"be kind\n"


def test_a_workflow_whose_memory_is_read_only_or_none_gets_that(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    world = LocalWorld(tmp_path / "data")
    scripted_model.on(step="shell").call_tool(
        "bash", {"cmd": "touch /mnt/memory/workflow/x; ls /mnt/memory"}
    ).then_reply_text("done")
    memory_workflow(memory={"workflow": "ro", "org": "none"}).run({}, world=world)
    (seen,) = _results(scripted_model)
    assert "Read-only file system" in seen["stderr"]
    assert seen["stdout"].split() == ["workflow"]
    assert memory_store_for(world).entries(STORE) == {}


def test_an_attached_workflows_memory_is_mounted_read_only(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    world = LocalWorld(tmp_path / "data")
    memory_store_for(world).commit(
        "workflow:other-flow", [MemoryChange("facts.txt", 0, b"peer fact\n")], writer="op"
    )
    scripted_model.on(step="shell").call_tool(
        "bash",
        {
            "cmd": "cat /mnt/memory/peer-workflows/other-flow/facts.txt; "
            "echo x > /mnt/memory/peer-workflows/other-flow/facts.txt"
        },
    ).then_reply_text("done")
    memory_workflow(memory={"attach": [{"id": "Other_Flow", "mode": "ro"}]}).run({}, world=world)
    (seen,) = _results(scripted_model)
    assert seen["stdout"] == "peer fact\n"
    assert "Read-only file system" in seen["stderr"]


ESCAPES = [
    # '..' out of the mount, and absolute paths elsewhere: nothing there is writable or kept.
    "echo x > /mnt/memory/workflow/../escape.txt",
    "echo x > /mnt/memory/escape.txt",
    "echo x > /tmp/escape.txt; ls /tmp",
    # A symlink out of the store (to a host file) is not published, so nothing follows it.
    "ln -s /etc/passwd /mnt/memory/workflow/passwd",
    "ln -s .. /mnt/memory/workflow/up",
    # A FIFO is not a file a store keeps.
    "mkfifo /mnt/memory/workflow/pipe",
    # The read-only mounts: '..', links and new files are all refused there.
    "echo x > /mnt/memory/org/../escape.txt",
    "ln -s /etc/hosts /mnt/memory/org/hosts",
    "mkfifo /mnt/memory/org/pipe",
    "echo x > /mnt/memory/org/escape.txt",
]


@pytest.mark.parametrize("command", ESCAPES)
def test_a_command_cannot_put_anything_outside_the_store_into_it(
    tmp_path: Path, scripted_model: ScriptedModel, command: str
) -> None:
    world = LocalWorld(tmp_path / "data")
    scripted_model.on(step="shell").call_tool("bash", {"cmd": command}).then_reply_text("done")
    result = memory_workflow().run({}, world=world)
    assert result.status == "completed"
    store = memory_store_for(world)
    assert store.entries(STORE) == {} and store.entries("org") == {}
    assert not (tmp_path / "escape.txt").exists()
    assert not list((tmp_path / "data").rglob("escape.txt"))


def test_an_over_long_path_fails_the_attempt_and_publishes_nothing(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    world = LocalWorld(tmp_path / "data")
    deep = "/".join(["d" * 200] * 6)
    scripted_model.on(step="shell").call_tool(
        "bash",
        {
            "cmd": f"echo ok > /mnt/memory/workflow/ok.txt; mkdir -p /mnt/memory/workflow/{deep} "
            f"&& echo x > /mnt/memory/workflow/{deep}/f"
        },
    ).then_reply_text("done")
    with pytest.raises(RunFailedError, match="over 1024 bytes"):
        memory_workflow().run({}, world=world)
    assert memory_store_for(world).entries(STORE) == {}


def _attempt(store: LocalMemoryStore) -> AttemptMemory:
    specs = workflow_memory_mounts("memory.demo", MemoryConfig())
    return AttemptMemory(store, specs, step_path="s", attempt=1, writer="run-s-a1")


def test_devices_symlinks_and_fifos_in_a_writable_store_are_skipped_not_read(
    tmp_path: Path,
) -> None:
    store = LocalMemoryStore(tmp_path / "data")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    with _attempt(store) as memory:
        own = memory.mounts[0].source
        (own / "kept.txt").write_text("kept")
        (own / "link.txt").symlink_to(secret)
        (own / "dir-link").symlink_to(tmp_path)
        os.mkfifo(own / "pipe")
        os.mknod(own / "null", 0o600 | 0o020000, os.makedev(1, 3))  # a character device
        published = memory.publish()
    assert sorted(store.entries(STORE)) == ["kept.txt"]
    assert sorted(s.split(" (")[0].rsplit("/", 1)[-1] for s in published.skipped) == [
        "dir-link",
        "link.txt",
        "null",
        "pipe",
    ]
    assert any("a device" in s for s in published.skipped)


def test_a_path_in_a_stores_index_that_leaves_the_store_is_never_materialized(
    tmp_path: Path,
) -> None:
    store = LocalMemoryStore(tmp_path / "data")
    store.commit(STORE, [MemoryChange("fine.txt", 0, b"fine")], writer="w")
    import sqlite3

    db = sqlite3.connect(store.root / "index.db")
    with db:
        db.execute("INSERT INTO memory VALUES (?, '../../outside.txt', 'sha256:x', 1, 1)", (STORE,))
    db.close()
    with _attempt(store) as memory:
        root = memory.mounts[0].source
        assert sorted(p.name for p in root.iterdir()) == ["fine.txt"]
        assert not (root.parent.parent / "outside.txt").exists()
        assert memory.publish().events == []  # nothing changed, nothing deleted


def test_a_killed_attempts_writes_are_never_visible(tmp_path: Path) -> None:
    store = LocalMemoryStore(tmp_path / "data")
    memory = _attempt(store)
    (memory.mounts[0].source / "half.txt").write_text("unpublished")
    memory.close()  # the attempt ended without publishing (killed, failed, superseded)
    assert store.entries(STORE) == {}


def test_an_attempt_over_its_memory_limit_fails(tmp_path: Path) -> None:
    store = LocalMemoryStore(tmp_path / "data")
    specs = workflow_memory_mounts("memory.demo", MemoryConfig())
    with AttemptMemory(store, specs, step_path="s", attempt=1, writer="w", max_files=2) as memory:
        for name in "abc":
            (memory.mounts[0].source / name).write_text(name)
        with pytest.raises(MemoryLimitError, match="over its limit"):
            memory.publish()
    assert store.entries(STORE) == {}


def test_a_symlink_planted_in_a_stores_folder_is_not_followed_when_read(tmp_path: Path) -> None:
    store = LocalMemoryStore(tmp_path / "data")
    store.commit(STORE, [MemoryChange("notes.txt", 0, b"mine")], writer="w")
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    planted = store.folder(STORE) / "notes.txt"
    planted.unlink()
    planted.symlink_to(secret)
    with pytest.raises(StorageUnavailableError):
        store.read(STORE, store.entries(STORE)["notes.txt"])
    # A planted folder link is not walked through either.
    store.commit(STORE, [MemoryChange("sub/inner.txt", 0, b"inner")], writer="w")
    (store.folder(STORE) / "sub" / "inner.txt").unlink()
    (store.folder(STORE) / "sub").rmdir()
    (store.folder(STORE) / "sub").symlink_to(tmp_path)
    (tmp_path / "inner.txt").write_text("outside")
    with pytest.raises(StorageUnavailableError):
        store.read(STORE, store.entries(STORE)["sub/inner.txt"])
    with pytest.raises(StorageUnavailableError):
        store.commit(STORE, [MemoryChange("sub/new.txt", 0, b"x")], writer="w")
    assert not (tmp_path / "new.txt").exists()


def test_a_failed_attempts_memory_writes_are_never_published(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    world = LocalWorld(tmp_path / "data")
    scripted_model.on(step="shell").call_tool(
        "bash", {"cmd": "echo half > /mnt/memory/workflow/half.txt"}
    ).then_raise_error("auth")
    with pytest.raises(RunFailedError):
        memory_workflow().run({}, world=world)
    # The command ran and wrote, but the attempt ended in StepFailed: nothing landed.
    types = [e.type for e in world.list_events(world.list_run_ids()[0])]
    assert "harness.runtime.command.succeeded" in types and "StepFailed" in types
    assert "harness.file.created" not in types
    assert memory_store_for(world).entries(STORE) == {}


@pytest.fixture(params=["local", pytest.param("redis_s3", marks=pytest.mark.integration)])
def replay_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A World for the replay tests: LocalWorld, and RedisS3World (real Redis, SeaweedFS)."""
    if request.param == "local":
        yield LocalWorld(tmp_path / "data")
        return
    from tests.test_memory_stores import _redis_s3_world

    prefix: str = request.getfixturevalue("redis_key_prefix") + f"{tmp_path.name}:"
    world: Any = _redis_s3_world(
        request.getfixturevalue("redis_url"), prefix, request.getfixturevalue("s3_service")
    )
    yield world
    world.close()


def test_a_retry_that_replays_a_memory_write_still_commits_it(
    replay_world: Any, scripted_model: ScriptedModel
) -> None:
    """Command 1 writes memory and is recorded; the attempt dies; the retry replays command 1
    (it does not run again) and its commit publishes the write the replay stands for."""
    from tests.bash_fleet_app import SHELL_STEP

    world = replay_world
    write = "echo 'replayed lesson' > /mnt/memory/workflow/notes.md"
    scripted_model.on(step="shell", run="run_replay").call_tool(
        "bash", {"cmd": write}
    ).then_raise_error("server").then_reply_text("done")
    step = {**SHELL_STEP, "retry": {"maxAttempts": 2}}
    flow = define_workflow(
        id="memory.demo",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/memory", id="default"),
        plan=shell_plan("memory.demo", step),
        bash={},
    )
    result = flow.run({}, world=world, run_id="run_replay")
    assert result.status == "completed", result
    events = world.list_events(result.run_id)
    started = [e for e in events if e.type == "harness.runtime.command.started"]
    assert [e.payload["attempt"] for e in started] == [1]  # replayed, never run again
    store = memory_store_for(world)
    entries = store.entries(STORE)
    assert store.read(STORE, entries["notes.md"]) == b"replayed lesson\n"
    (created,) = [e for e in events if e.type == "harness.file.created"]
    assert created.payload["path"] == "/mnt/memory/workflow/notes.md"
    assert created.occurrence_id is not None and ":2:" in created.occurrence_id


def test_a_replayed_write_is_published_from_the_version_its_recorded_session_saw(
    replay_world: Any,
) -> None:
    """A retry takes up a recorded memory snapshot: its commit is the one the dead attempt
    would have made, compare-and-set against the versions that attempt started from. A
    writer that committed in between keeps its file (the replayed change becomes a conflict
    copy), and a file it created is neither shown nor deleted."""
    from little_dist.memory.attempt import CONFLICT_EVENT

    world = replay_world
    store = memory_store_for(world)
    store.commit(
        STORE,
        [MemoryChange("shared.md", 0, b"base\n"), MemoryChange("old.md", 0, b"old\n")],
        writer="seed",
    )
    specs = workflow_memory_mounts("memory.demo", MemoryConfig())

    def attempt(number: int) -> AttemptMemory:
        return AttemptMemory(
            store,
            specs,
            step_path="s",
            attempt=number,
            writer=f"r-s-a{number}",
            world=world,
            run_id="run_r",
        )

    with attempt(1) as first:  # its commands run, are recorded, then it dies unpublished
        folder = first.mounts[0].source
        (folder / "notes.md").write_text("replayed lesson\n")
        (folder / "shared.md").write_text("mine\n")
        (folder / "old.md").unlink()
        recorded = json.loads(json.dumps(first.snapshot()))  # as the log keeps it
    store.commit(STORE, [MemoryChange("shared.md", 1, b"theirs\n")], writer="peer")
    store.commit(STORE, [MemoryChange("late.md", 0, b"late\n")], writer="peer")
    with attempt(2) as retry:
        retry.restore(recorded)
        folder = retry.mounts[0].source
        assert sorted(p.name for p in folder.iterdir()) == ["notes.md", "shared.md"]
        published = retry.publish()
    entries = store.entries(STORE)
    read = {path: store.read(STORE, e) for path, e in entries.items() if e.exists}
    copy = "shared.conflict-r-s-a2.md"
    assert read == {
        "notes.md": b"replayed lesson\n",
        "shared.md": b"theirs\n",  # the peer's write is never overwritten ...
        copy: b"mine\n",  # ... the replayed one is kept beside it
        "late.md": b"late\n",
    }
    (conflict,) = [e for e in published.events if e.type == CONFLICT_EVENT]
    assert conflict.payload["baseVersion"] == 1 and conflict.payload["currentVersion"] == 2
