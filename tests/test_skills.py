"""Skills from SKILL.md folders: loading and its errors, upstream's precedence, the prompt,
the read-only mount, allowed-tools, and drift when a skill's files change."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow, skill
from little_dist.canonical import sha256_digest
from little_dist.harness.prompts import system_prompt
from little_dist.harness.types import SkillDescriptor
from little_dist.skills import (
    SkillError,
    SkillNameError,
    choose_skills,
    discover_skills,
    load_skill,
    org_skills,
    tool_allowed,
)
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.tools import tool
from little_dist.world.local import LocalWorld

REFUND = """---
name: refund-policy
description: How to decide a refund (read before answering about refunds).
allowed-tools:
  - lookup_order
  - "search_*"
---

# Refund policy

Refund orders under 50 EUR without asking. See references/limits.md.
"""


def write_skill(root: Path, name: str, text: str | None = None, **files: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    body = (
        text
        if text is not None
        else f"---\nname: {name}\ndescription: The {name} skill.\n---\n\nDo {name}.\n"
    )
    (folder / "SKILL.md").write_text(body, encoding="utf-8")
    for relative, content in files.items():
        path = folder / relative.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return folder


# -- loading ---------------------------------------------------------------------------------


def test_a_skill_folder_is_read_with_its_files_and_hashes(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "refund-policy", REFUND, references__limits_md="50 EUR")
    loaded = load_skill(folder)
    assert loaded.name == "refund-policy"
    assert loaded.description.startswith("How to decide a refund")
    assert loaded.allowed_tools == ("lookup_order", "search_*")
    assert [path for path, _ in loaded.files] == ["SKILL.md", "references/limits_md"]
    raw = REFUND.split("---\n")[1]
    assert loaded.frontmatter_hash == sha256_digest({"frontmatter": raw.removesuffix("\n")})
    assert loaded.content_hash.startswith("sha256:") and loaded.origin == "workflow"
    # The content hash follows the bytes of every file, not just SKILL.md.
    (folder / "references" / "limits_md").write_text("60 EUR", encoding="utf-8")
    assert load_skill(folder).content_hash != loaded.content_hash
    assert load_skill(folder).frontmatter_hash == loaded.frontmatter_hash


def test_a_single_md_file_is_a_skill_too(tmp_path: Path) -> None:
    path = tmp_path / "tone.md"
    path.write_text("---\nname: tone\ndescription: 'Be brief.'\nallowed-tools: a, b\n---\nx\n")
    loaded = load_skill(path)
    assert (loaded.name, loaded.description, loaded.allowed_tools) == (
        "tone",
        "Be brief.",
        ("a", "b"),
    )
    assert [name for name, _ in loaded.files] == ["SKILL.md"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "must contain SKILL.md"),
        ("# no front matter\n", "must start with front matter"),
        ("---\nname: broken\n---\n", "non-empty 'description'"),
        ("---\ndescription: d\n---\n", "non-empty 'name'"),
        (
            "---\nname: other\ndescription: d\n---\n",
            "names the skill 'other' but its folder is 'broken'",
        ),
        ("---\nname: broken\ndescription: d\n", "must start with front matter"),
    ],
)
def test_a_bad_skill_folder_is_a_clear_error_naming_the_file(
    tmp_path: Path, text: str | None, says: str
) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    if text is not None:
        (folder / "SKILL.md").write_text(text, encoding="utf-8")
    with pytest.raises(SkillError) as caught:
        load_skill(folder)
    message = str(caught.value)
    assert says in message
    assert str(folder) in message


def test_an_unsafe_name_and_a_missing_source_are_refused(tmp_path: Path) -> None:
    folder = write_skill(tmp_path, "CON", "---\nname: CON\ndescription: d\n---\n")
    with pytest.raises(SkillNameError, match="invalid skill name 'CON'"):
        load_skill(folder)
    with pytest.raises(SkillError, match="does not exist"):
        load_skill(tmp_path / "nowhere")


# -- precedence ------------------------------------------------------------------------------


def test_workflow_beats_org_beats_discovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    org = tmp_path / "org"
    write_skill(org, "shared")
    write_skill(org, "org-only")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_skill(repo / ".agents" / "skills", "shared")
    write_skill(repo / ".agents" / "skills", "found")
    write_skill(repo / ".agents" / "skills", "org-only")
    (repo / ".agents" / "skills" / "notes").mkdir()  # not a skill: skipped
    nested = repo / "app" / "flows"
    write_skill(
        nested / ".agents" / "skills", "found", "---\nname: found\ndescription: near\n---\n"
    )
    write_skill(tmp_path / ".agents" / "skills", "above-the-git-root")

    declared = [skill(str(write_skill(tmp_path / "mine", "shared"))), skill("inline", "Text.")]
    discovered = discover_skills(nested, [".agents/skills"])
    with caplog.at_level(logging.WARNING, logger="little_dist.skills"):
        chosen = choose_skills(declared, org_skills(org), discovered)

    assert [(s.name, s.origin) for s in chosen] == [
        ("shared", "workflow"),
        ("inline", "workflow"),
        ("org-only", "org"),
        ("found", "discovered"),
    ]
    assert next(s for s in chosen if s.name == "found").description == "near"  # nearest wins
    assert "Skill 'shared' from workflow overrides org-level skill of same name." in caplog.text


def test_a_name_declared_twice_is_an_error(tmp_path: Path) -> None:
    one = skill(str(write_skill(tmp_path / "a", "twice")))
    two = skill(str(write_skill(tmp_path / "b", "twice")))
    with pytest.raises(SkillError, match="'twice' declared twice in the workflow's skills"):
        choose_skills([one, two])


def test_skill_paths_are_relative_to_the_calling_file_and_inline_skills_still_work(
    tmp_path: Path,
) -> None:
    write_skill(tmp_path / "skills", "refund-policy", REFUND)
    app = tmp_path / "app.py"
    app.write_text(
        "from little_dist import define_workflow, skill\n"
        "wf = define_workflow(id='t.app', model='openai/gpt-4o-mini', org_skills='org',\n"
        "    skills=[skill('skills/refund-policy'), skill('style', 'House style', 'Be brief.')])\n",
        encoding="utf-8",
    )
    write_skill(tmp_path / "org", "escalation")
    namespace: dict[str, Any] = {"__file__": str(app)}
    exec(compile(app.read_text(), str(app), "exec"), namespace)  # as an import would run it
    wf = namespace["wf"]
    assert [s.name for s in wf.skills] == ["refund-policy", "style", "escalation"]
    assert wf.skills[1] == SkillDescriptor("style", "House style", body="Be brief.")
    identities = {item.name: item.frontmatter_hash for item in wf.skill_identities()}
    assert identities["refund-policy"] == wf.skills[0].frontmatter_hash  # upstream's identity


# -- prompt ----------------------------------------------------------------------------------


def test_the_prompt_lists_folder_skills_to_read_with_bash_in_name_order(tmp_path: Path) -> None:
    refund = load_skill(write_skill(tmp_path, "refund-policy", REFUND, notes_md="n"))
    alpha = load_skill(write_skill(tmp_path, "alpha"))
    inline = SkillDescriptor("style", "House style", body="Be brief.")
    bash = {"bash": tool(lambda cmd: cmd, name="bash")}
    text = system_prompt(system="S", skills=[refund, inline, alpha], tools=bash)
    assert text.index('<skill name="alpha">') < text.index('<skill name="refund-policy">')
    assert text.index('<skill name="refund-policy">') < text.index('<skill name="style">')
    assert "<read>cat /mnt/skills/refund-policy/SKILL.md</read>" in text
    assert "1 more file(s) — list with: ls -R /mnt/skills/refund-policy/" in text
    assert "Refund orders under 50 EUR" not in text  # progressive disclosure: read on demand
    assert "<instructions>\nBe brief.\n</instructions>" in text
    # Without bash the model cannot read the folder: SKILL.md is given in the prompt.
    plain = system_prompt(system="S", skills=[refund])
    assert "Refund orders under 50 EUR" in plain and "<read>" not in plain


# -- allowed-tools -------------------------------------------------------------------------


def test_allowed_tools_matching() -> None:
    strict = SkillDescriptor("s", "d", allowed_tools=("lookup_order", "search_*"))
    free = SkillDescriptor("f", "d")
    assert tool_allowed("lookup_order", [strict]) and tool_allowed("search_docs", [strict])
    assert not tool_allowed("email", [strict]) and not tool_allowed("email", [strict, free])
    assert tool_allowed("bash", [strict]) and tool_allowed("email", [free])


def skill_plan(tools: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "skills.demo"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["default"], "tools": tools, "secrets": [], "network": []},
        "steps": [
            {
                "id": "answer",
                "uses": "ai.generate",
                "with": {"model": "default", "prompt": "Refund order 7?"},
                "output": {"mode": "text"},
            }
        ],
    }


def test_a_tool_the_skills_do_not_allow_is_refused_with_an_error_the_model_sees(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    called: list[str] = []

    @tool
    def lookup_order(order: int) -> dict[str, Any]:
        """Look an order up."""
        called.append("lookup")
        return {"order": order, "total": 30}

    @tool
    def email(to: str) -> str:
        """Send an email."""
        called.append("email")
        return "sent"

    scripted_model.on(step="answer").call_tools(
        [ToolCall("email", {"to": "ada"}, id="e1"), ToolCall("lookup_order", {"order": 7}, id="l1")]
    ).then_reply_text("refunded")
    wf = define_workflow(
        id="skills.demo",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/skills", id="default"),
        tools=[lookup_order, email],
        skills=[skill(str(write_skill(tmp_path / "s", "refund-policy", REFUND)))],
        plan=skill_plan(["lookup_order", "email"]),
    )
    result = run_workflow(wf, {}, world=LocalWorld(tmp_path / "world"))

    assert result.status == "completed" and called == ["lookup"]
    seen = {
        r["tool_call_id"]: json.loads(r["content"]) for r in scripted_model.calls[1].tool_results
    }
    assert "is not allowed by the active skills' allowed-tools" in seen["e1"]["error"]
    assert "refund-policy: lookup_order, search_*" in seen["e1"]["error"]
    assert seen["l1"] == {"order": 7, "total": 30}
    # Still offered (the manifest and the prompt are what they would be without the rule).
    assert sorted(t["function"]["name"] for t in scripted_model.calls[0].tools) == [
        "email",
        "lookup_order",
    ]
    failed = [
        e
        for e in LocalWorld(tmp_path / "world").list_events(result.run_id)
        if e.type == "harness.tool_call.failed"
    ]
    assert [e.payload["error"]["causeCode"] for e in failed] == ["tool_not_allowed"]


# -- the mount, and drift ----------------------------------------------------------------------

READ = "cat /mnt/skills/refund-policy/SKILL.md; cat /mnt/skills/refund-policy/references/limits.md"
WRITE = (
    "echo changed > /mnt/skills/refund-policy/SKILL.md; echo $?; "
    "touch /mnt/skills/refund-policy/new 2>&1; ls /mnt/skills/refund-policy; ls /mnt/skills"
)


def bash_skill_workflow(folder: Path, tools: list[str] | None = None) -> Any:
    return define_workflow(
        id="skills.demo",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/skills", id="default"),
        skills=[skill(str(folder))],
        plan=skill_plan(tools or []),
        bash={"python": False},
    )


def test_the_skill_files_are_mounted_read_only_for_bash(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    folder = write_skill(tmp_path / "s", "refund-policy", REFUND, references__limits_md="50 EUR")
    (folder / "references" / "limits_md").rename(folder / "references" / "limits.md")
    scripted_model.on(step="answer").call_tool("bash", {"cmd": READ}, id="r").then_call_tool(
        "bash", {"cmd": WRITE}, id="w"
    ).then_reply_text("done")
    world = LocalWorld(tmp_path / "world")
    wf = bash_skill_workflow(folder)
    # Changing the author's folder after the definition changes nothing: its bytes were read.
    (folder / "SKILL.md").write_text("---\nname: refund-policy\ndescription: x\n---\nlater\n")

    result = run_workflow(wf, {}, world=world)

    assert result.status == "completed"
    read, wrote = (json.loads(c.tool_results[-1]["content"]) for c in scripted_model.calls[1:])
    assert read["stdout"] == REFUND + "50 EUR"
    assert (
        "<read>cat /mnt/skills/refund-policy/SKILL.md</read>"
        in (scripted_model.calls[0].messages[0]["content"])
    )
    assert wrote["stdout"] == (
        "1\ntouch: cannot touch '/mnt/skills/refund-policy/new': Read-only file system\n"
        "SKILL.md\nreferences\nrefund-policy\n"
    )
    assert "SKILL.md: Read-only file system" in wrote["stderr"]
    # Nothing of the skill is published as the step's scratch.
    events = world.list_events(result.run_id)
    assert not [e for e in events if e.type.startswith("harness.file.")]


def test_a_skill_that_changed_between_attempts_is_capability_drift(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    from little_dist.harness import ModelCallError
    from little_dist.harness.registry import HarnessRegistry
    from little_dist.harness.types import ExecuteStepTask, ResolvedModel, StepContext
    from tests.harness_helpers import ai_step, make_ctx

    world = LocalWorld(tmp_path / "world")
    folder = write_skill(tmp_path / "s", "refund-policy", REFUND)
    before = load_skill(folder)
    scripted_model.on(step="answer").raise_error("server").then_reply_text("ok")
    step = ai_step("answer")
    task = ExecuteStepTask(step, "go", StepContext("answer", 0, 1))
    registry = HarnessRegistry()

    def ctx(attempt: int, skills: list[SkillDescriptor]) -> Any:
        made = make_ctx(world, step_path="answer", attempt=attempt)
        return replace(made, skills=tuple(skills), model=ResolvedModel("model.fast", "scripted/x"))

    with pytest.raises(ModelCallError):
        registry.run_step(task, ctx(1, [before]))
    (folder / "SKILL.md").write_text(REFUND + "\nA new rule.\n", encoding="utf-8")
    after = load_skill(folder)

    from little_dist.harness.drift import CapabilityDriftError

    with pytest.raises(CapabilityDriftError) as caught:
        registry.run_step(task, ctx(2, [after]))
    assert [c["section"] for c in caught.value.changes] == ["skillsHash"]
    assert registry.run_step(task, ctx(3, [before])).output == "ok"  # the same skill resumes
