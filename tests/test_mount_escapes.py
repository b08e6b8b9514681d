"""Path escapes at the mounts the issue's tests did not reach yet: an attached workflow's
memory (``/mnt/memory/peer-workflows/<key>/``) and the skill folders (``/mnt/skills/<name>/``).
Both are read-only: a write, a new file, a link, a FIFO, ``..`` out of the mount and
absolute paths beside it all fail in the command and change nothing; a skill file path that
would leave its folder is refused before anything is written, and a symlink in an author's
skill folder is never followed to a host file. (The workflow and org stores are covered in
``test_memory_bash.py``, the pipeline and available-workflows mounts in
``test_orchestrator_memory.py``, the stores' own path checks in ``test_memory_stores.py``.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model, skill
from little_dist.harness.types import SkillDescriptor
from little_dist.memory import MemoryChange, memory_store_for
from little_dist.skills import SkillError
from little_dist.skills.mounts import materialize_skill
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.bash_fleet_app import shell_plan
from tests.test_memory_bash import memory_workflow

PEER = "workflow:other-flow"

PEER_ESCAPES = [
    "echo x > /mnt/memory/peer-workflows/other-flow/facts.txt",
    "echo x > /mnt/memory/peer-workflows/other-flow/new.txt",
    "echo x > /mnt/memory/peer-workflows/other-flow/../escape.txt",
    "echo x > /mnt/memory/peer-workflows/escape.txt",
    "mkdir /mnt/memory/peer-workflows/another-flow",
    "ln -s /etc/passwd /mnt/memory/peer-workflows/other-flow/passwd",
    "ln -s .. /mnt/memory/peer-workflows/other-flow/up",
    "mkfifo /mnt/memory/peer-workflows/other-flow/pipe",
    "rm /mnt/memory/peer-workflows/other-flow/facts.txt",
    "cd /mnt/memory/peer-workflows/other-flow && echo x > ../../escape.txt",
]


@pytest.mark.parametrize("command", PEER_ESCAPES)
def test_an_attached_workflows_memory_refuses_every_write_and_every_way_out(
    tmp_path: Path, scripted_model: ScriptedModel, command: str
) -> None:
    world = LocalWorld(tmp_path / "data")
    store = memory_store_for(world)
    store.commit(PEER, [MemoryChange("facts.txt", 0, b"peer fact\n")], writer="op")
    scripted_model.on(step="shell").call_tool("bash", {"cmd": command}).then_reply_text("done")
    flow = memory_workflow(memory={"attach": [{"id": "other-flow", "mode": "ro"}]})
    assert flow.run({}, world=world).status == "completed"
    (result,) = [
        json.loads(c.tool_results[-1]["content"]) for c in scripted_model.calls if c.tool_results
    ]
    assert result["exitCode"] != 0, result
    entries = store.entries(PEER)
    assert sorted(entries) == ["facts.txt"] and entries["facts.txt"].version == 1
    assert store.read(PEER, entries["facts.txt"]) == b"peer fact\n"
    assert {p for p, e in store.entries("workflow:memory-demo").items() if e.exists} == set()
    assert not list((tmp_path / "data").rglob("escape.txt"))


SKILL_ESCAPES = [
    "echo x > /mnt/skills/notes/SKILL.md",
    "echo x > /mnt/skills/notes/new.md",
    "echo x > /mnt/skills/notes/../escape.txt",
    "echo x > /mnt/skills/escape.txt",
    "mkdir /mnt/skills/another",
    "ln -s /etc/passwd /mnt/skills/notes/passwd",
    "ln -s .. /mnt/skills/notes/up",
    "mkfifo /mnt/skills/notes/pipe",
    "rm /mnt/skills/notes/SKILL.md",
    "cd /mnt/skills/notes && echo x > ../../escape.txt",
    # What the author's folder linked to is not there to read.
    "cat /mnt/skills/notes/secret.txt",
    "ls /mnt/skills/notes/linked/",
]

NOTES = "---\nname: notes\ndescription: How to keep notes.\n---\n\nKeep them short.\n"


def _skill_workflow(folder: Path) -> Any:
    step = {
        "id": "shell",
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": "Use bash.", "tools": ["bash"]},
        "output": {"mode": "text"},
    }
    return define_workflow(
        id="skills.escape",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/skills", id="default"),
        skills=[skill(str(folder))],
        plan=shell_plan("skills.escape", step),
        bash={"python": False},
    )


@pytest.mark.parametrize("command", SKILL_ESCAPES)
def test_a_skill_mount_refuses_every_write_and_every_way_out(
    tmp_path: Path, scripted_model: ScriptedModel, command: str
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret\n")
    (tmp_path / "host-folder").mkdir()
    (tmp_path / "host-folder" / "inside.txt").write_text("host secret\n")
    folder = tmp_path / "skills" / "notes"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(NOTES)
    (folder / "secret.txt").symlink_to(secret)
    (folder / "linked").symlink_to(tmp_path / "host-folder")
    flow = _skill_workflow(folder)
    (descriptor,) = flow.skills
    assert [path for path, _ in descriptor.files] == ["SKILL.md"]  # the links were not read
    mounted = materialize_skill(descriptor)
    before = sorted(p.relative_to(mounted).as_posix() for p in mounted.rglob("*"))
    scripted_model.on(step="shell").call_tool("bash", {"cmd": command}).then_reply_text("done")
    world = LocalWorld(tmp_path / "data")
    assert flow.run({}, world=world).status == "completed"
    (result,) = [
        json.loads(c.tool_results[-1]["content"]) for c in scripted_model.calls if c.tool_results
    ]
    assert result["exitCode"] != 0, result
    assert "host secret" not in result["stdout"]
    assert sorted(p.relative_to(mounted).as_posix() for p in mounted.rglob("*")) == before
    assert (mounted / "SKILL.md").read_text() == NOTES
    assert secret.read_text() == "host secret\n"
    assert not list(tmp_path.rglob("escape.txt"))
    # Nothing of the skill is published as the step's scratch.
    assert not [e for e in world.list_events(world.list_run_ids()[0]) if "file" in e.type]


@pytest.mark.parametrize("path", ["../outside.md", "/etc/outside.md", "a/../../outside.md", ""])
def test_a_skill_file_path_that_would_leave_its_folder_is_refused(
    tmp_path: Path, path: str
) -> None:
    crafted = SkillDescriptor(
        name="crafted",
        description="A descriptor built by hand.",
        files=(("SKILL.md", b"x"), (path, b"escaped")),
        content_hash="sha256:" + "ab" * 32,
    )
    with pytest.raises(SkillError, match="is not a relative path"):
        materialize_skill(crafted)
    assert not list(Path("/etc").glob("outside.md"))
    assert not list(tmp_path.parent.rglob("outside.md"))
