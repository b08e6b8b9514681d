"""Upstream's MCP guide skills (little_dist/mcp/guides.py): a generated skill per server,
in the capability manifest with its content hash, in ``mcp_list_tools``, and offered to the
session's model. Cases ported from little-harness ``mcp.test.ts`` (guide generation,
configured bodies, content hashes, file identities, refused paths and names), against a
real server (tests/mcp_server.py over stdio)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from little_dist import run_workflow
from little_dist.errors import InvalidInputError
from little_dist.mcp import McpGateway, mcp_servers
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.harness_helpers import of_type
from tests.test_mcp import mcp_workflow, script_sum
from tests.test_mcp_policy import server

BODY = "Always inspect design context before implementation."
GUIDE = {"description": "Use when a task needs sums.", "body": BODY}


def guided(count: Path, guide: Any = None, **extra: Any) -> dict[str, Any]:
    config = server(count, **extra)
    if guide is not None:
        config["guide"] = guide
    return config


def resolve(*configs: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    skills: list[Any] = []
    manifest = McpGateway(mcp_servers(list(configs), "mcp"), timeout=30).capability_manifest(skills)
    return manifest, skills


def skill_md(skill: Any) -> str:
    return dict(skill.files)["SKILL.md"].decode()


def test_every_server_has_a_default_guide(tmp_path: Path) -> None:
    manifest, (skill,) = resolve(guided(tmp_path / "calls"))
    guide = manifest["servers"][0]["guide"]
    assert guide["name"] == skill.name == "calc-mcp"
    assert guide["description"] == skill.description == "Use when the task needs A calculator."
    assert guide["path"] == "/mnt/skills/calc-mcp"
    assert re.fullmatch(r"[a-f0-9]{64}", guide["contentHash"])
    text = skill_md(skill)
    assert guide["files"] == [
        {"path": "SKILL.md", "hash": "sha256:" + hashlib.sha256(text.encode()).hexdigest()}
    ]
    assert text == (
        "---\nname: calc-mcp\ndescription: Use when the task needs A calculator.\n---\n\n"
        "# calc-mcp\n\nA calculator.\n\n"
        "Use `mcp_list_tools` to inspect available tools. Use `mcp_call_tool` with this server "
        "id and the selected tool name.\n\nServer id: `calc`\n\n## Visible Tools\n\n"
        "- add: Add two numbers.\n"
        "- delete_account: Delete an account (a side effect no test should let through).\n"
    )


def test_a_configured_guide_wraps_its_body(tmp_path: Path) -> None:
    guide = {**GUIDE, "name": "sums"}
    manifest, (skill,) = resolve(guided(tmp_path / "calls", guide, rename={"add": "plus"}))
    text = skill_md(skill)
    assert text.startswith("---\nname: sums\ndescription: Use when a task needs sums.\n---")
    assert f"## Configured Guidance\n\n{BODY}\n\n## Visible Tools" in text
    assert "- plus: Add two numbers." in text  # visible names
    assert "mcp_list_tools" in text and "mcp_call_tool" in text
    assert manifest["servers"][0]["guide"]["path"] == "/mnt/skills/sums"


def test_guide_false_has_none(tmp_path: Path) -> None:
    manifest, skills = resolve(guided(tmp_path / "calls", False))
    assert "guide" not in manifest["servers"][0] and skills == []


def test_the_content_hash_follows_the_body_and_the_files(tmp_path: Path) -> None:
    def content_hash(guide: dict[str, Any]) -> str:
        manifest, _ = resolve(guided(tmp_path / "calls", guide))
        return str(manifest["servers"][0]["guide"]["contentHash"])

    first = content_hash({**GUIDE, "body": "Inspect the selected node."})
    assert first != content_hash({**GUIDE, "body": "Inspect the selected file."})
    one = content_hash({**GUIDE, "files": {"README.md": "notes v1"}})
    assert one != content_hash({**GUIDE, "files": {"README.md": "notes v2"}})
    assert one == content_hash({**GUIDE, "files": {"./README.md": "notes v1"}})


def test_bundled_files_are_normalized_and_listed(tmp_path: Path) -> None:
    guide = {**GUIDE, "files": {"references/./notes.md": "Review tokens.", "img.bin": b"\x00"}}
    manifest, (skill,) = resolve(guided(tmp_path / "calls", guide))
    files = manifest["servers"][0]["guide"]["files"]
    assert [item["path"] for item in files] == ["SKILL.md", "img.bin", "references/notes.md"]
    notes = "sha256:" + hashlib.sha256(b"Review tokens.").hexdigest()
    assert files[2]["hash"] == notes
    assert dict(skill.files)["references/notes.md"] == b"Review tokens."


def test_the_listing_shows_each_servers_guide(tmp_path: Path) -> None:
    gateway = McpGateway(mcp_servers([guided(tmp_path / "calls")], "mcp"), timeout=30)
    (listed,) = gateway.list()["servers"]
    assert list(listed) == ["id", "description", "guide", "tools"]
    assert listed["guide"]["name"] == "calc-mcp"


def test_the_session_offers_the_guide_skill(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    script_sum(scripted_model, "calc")
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(mcp_workflow([guided(tmp_path / "calls", GUIDE)]), {}, world=world)
    assert result.output == "5"
    system = scripted_model.calls[0].messages[0]["content"]
    # No bash in this session: the guide's instructions are in the prompt.
    assert '<skill name="calc-mcp">' in system and BODY in system
    session = of_type(world.list_events(result.run_id), "harness.session.started")[0].payload
    assert session["manifest"]["mcp"]["servers"][0]["guide"]["name"] == "calc-mcp"


@pytest.mark.parametrize(
    ("guide", "message"),
    [
        ({**GUIDE, "files": {"SKILL.md": "bad"}}, "would replace the generated SKILL.md"),
        ({**GUIDE, "files": {"./SKILL.md": "bad"}}, "would replace the generated SKILL.md"),
        (
            {**GUIDE, "files": {"references/a.md": "1", "references/./a.md": "2"}},
            r"'references/\./a\.md' is 'references/a\.md' again",
        ),
        ({**GUIDE, "files": {"../up.md": "x"}}, "leaves the guide's folder"),
        ({**GUIDE, "files": {"/abs.md": "x"}}, "is not a valid guide file path"),
        ({**GUIDE, "files": {"a.md": 3}}, r"files\['a\.md'\] must be text or bytes"),
        ({**GUIDE, "name": "bad name"}, "is not a valid guide name"),
        ({"description": "x"}, r"mcp\[0\]\.guide\.body is required"),
        ({**GUIDE, "extra": 1}, r"mcp\[0\]\.guide: unsupported field\(s\) \['extra'\]"),
        (True, r"mcp\[0\]\.guide must be false or an object"),
    ],
)
def test_a_bad_guide_is_refused_naming_where(guide: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        mcp_servers([guided(Path("calls"), guide)], "mcp")


def test_guide_names_must_be_unique() -> None:
    first = guided(Path("a"), {**GUIDE, "name": "design"})
    second = {**guided(Path("b"), {**GUIDE, "name": "design"}), "id": "other"}
    with pytest.raises(InvalidInputError, match="MCP guide names must be unique \\('design'\\)"):
        mcp_servers([first, second], "mcp")
