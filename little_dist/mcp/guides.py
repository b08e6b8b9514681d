"""Upstream's MCP guide skills: one generated skill per server telling the model how to reach
it through the gateway (little-harness ``mcp.ts``: ``guideManifestFor``,
``generatedGuideBody``, ``guideFilesContentHash``).

Every server has one unless its config says ``"guide": false``: named ``<id>-mcp`` and
described "Use when the task needs <description>" by default, or as ``guide`` says
(``{"name"?, "description", "body", "files"?}``: ``body`` goes under "Configured Guidance",
``files`` are bundled beside ``SKILL.md``). ``SKILL.md`` lists the server's visible tools as
the session listed them, so a guide is made when a session starts, with the capability
manifest, and its ``contentHash`` (upstream's recipe) is in that manifest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from little_dist.mcp.config import CALL_TOOL_NAME, LIST_TOOL_NAME, McpGuide
from little_dist.skills.descriptor import SkillDescriptor

__all__ = ["guide_files", "guide_manifest", "guide_skill"]


def guide_files(
    guide: McpGuide, server_id: str, description: str, tools: Sequence[Mapping[str, Any]]
) -> dict[str, bytes]:
    """``SKILL.md`` (upstream's ``generatedGuideBody``) and the bundled files."""
    listed = (
        "\n".join(
            f"- {tool['name']}" + (f": {tool['description']}" if "description" in tool else "")
            for tool in tools
        )
        if tools
        else "- No visible tools were discovered."
    )
    configured = [] if guide.body is None else ["## Configured Guidance", "", guide.body, ""]
    skill_md = "\n".join(
        [
            "---",
            f"name: {guide.name}",
            f"description: {guide.description}",
            "---",
            "",
            f"# {guide.name}",
            "",
            description,
            "",
            f"Use `{LIST_TOOL_NAME}` to inspect available tools. Use `{CALL_TOOL_NAME}` with "
            "this server id and the selected tool name.",
            "",
            f"Server id: `{server_id}`",
            "",
            *configured,
            "## Visible Tools",
            "",
            listed,
            "",
        ]
    )
    return {"SKILL.md": skill_md.encode("utf-8"), **dict(guide.files)}


def _content_hash(files: Mapping[str, bytes]) -> str:
    """Upstream's ``guideFilesContentHash``: for each path in order, ``len:path:size:`` then
    the bytes and ``;``, hashed together (hex, no prefix)."""
    digest = hashlib.sha256()
    for path in sorted(files):
        data = files[path]
        digest.update(f"{len(path)}:{path}:{len(data)}:".encode())
        digest.update(data)
        digest.update(b";")
    return digest.hexdigest()


def guide_manifest(guide: McpGuide, files: Mapping[str, bytes]) -> dict[str, Any]:
    """Upstream's ``HarnessMcpGuideManifest``; ``path`` is where the skill is mounted here."""
    from little_dist.skills.mounts import skill_path

    return {
        "name": guide.name,
        "description": guide.description,
        "path": skill_path(guide.name),
        "contentHash": _content_hash(files),
        "files": [
            {"path": path, "hash": "sha256:" + hashlib.sha256(files[path]).hexdigest()}
            for path in sorted(files)
        ],
    }


def guide_skill(guide: McpGuide, files: Mapping[str, bytes]) -> SkillDescriptor:
    """The guide as a folder skill (read with bash at its mount, or given in the prompt)."""
    return SkillDescriptor(
        name=guide.name,
        description=guide.description,
        files=tuple(sorted(files.items())),
        content_hash="sha256:" + _content_hash(files),
        origin="mcp",
        source=f"mcp guide of server {guide.name}",
    )
