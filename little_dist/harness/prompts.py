"""Prompt layout: everything stable first, the run-specific step input last.

Providers cache a prompt by its prefix (OpenAI and DeepSeek automatically, Anthropic and
Gemini on marked prefixes), so the order of the parts decides what a second call can reuse.
The system message is built from the most stable part to the least:

1. the role's system text (the workflow's or the worker's default),
2. the skills offered (sorted by name: a text skill's instructions; a folder skill's name,
   description and the ``cat /mnt/skills/<name>/SKILL.md`` that reads it when the model has
   the bash tool, else its ``SKILL.md``),
3. the memory stores, when the model is offered bash and the workflow has some (sorted by
   mount path: each store's path and mode, ``rw`` or ``ro``; see :mod:`little_dist.memory`),
4. the tools offered (sorted by name),
5. the step's output contract (mode and schema),

and the user message that follows holds the step input (the rendered prompt), which changes
from run to run. Two steps of one workflow therefore share the prefix up to their output
contracts, and two runs of one step share everything but the last message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.canonical import canonical_json
from little_dist.harness.log_values import json_safe
from little_dist.harness.output_modes import instructions

if TYPE_CHECKING:
    from little_dist.harness.types import SkillDescriptor
    from little_dist.memory.layout import MemoryMountSpec
    from little_dist.tools import Tool

__all__ = ["DEFAULT_WORKER_SYSTEM", "render_input", "step_messages", "system_prompt"]

DEFAULT_WORKER_SYSTEM = (
    "You are a worker executing one step of a little-workflow run. Do exactly what the step "
    "asks, using only the tools offered, and answer in the output format required below."
)


#: Said before the skills when some are folders the model reads with bash (upstream's text,
#: with our mount path).
_READ_SKILLS = (
    "A skill lives in its own folder under {root}/ — read its SKILL.md with bash before acting "
    "on it, and resolve any relative paths it mentions (e.g. references/, scripts/) against "
    "that folder."
)


def _skill_entry(skill: SkillDescriptor, readable: bool) -> list[str]:
    if not skill.files:  # a text skill
        lines = [
            f"<skill name={canonical_json(skill.name)}>",
            f"<description>{skill.description}</description>",
        ]
        if skill.body:
            lines.append(f"<instructions>\n{skill.body}\n</instructions>")
        return [*lines, "</skill>"]
    from little_dist.skills.mounts import skill_path

    lines = [
        f"<skill name={canonical_json(skill.name)}>",
        f"<description>{_escape(skill.description)}</description>",
    ]
    if readable:
        folder = skill_path(skill.name)
        lines.append(f"<read>cat {folder}/SKILL.md</read>")
        more = sum(1 for path, _data in skill.files if path != "SKILL.md")
        if more:
            lines.append(
                f"<bundled_files>{more} more file(s) — list with: ls -R {folder}/</bundled_files>"
            )
    else:  # no bash to read it with: the instructions are given here
        text = dict(skill.files).get("SKILL.md", b"").decode("utf-8", "replace")
        lines.append(f"<instructions>\n{text}\n</instructions>")
    return [*lines, "</skill>"]


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _skills_section(skills: Sequence[SkillDescriptor], readable: bool = False) -> str | None:
    if not skills:
        return None
    header = (
        "Skills are specialized instructions for specific tasks. When the task matches a "
        "skill's description, follow that skill."
    )
    if readable and any(skill.files for skill in skills):
        from little_dist.skills.mounts import SKILLS_ROOT

        header += " " + _READ_SKILLS.format(root=SKILLS_ROOT)
    lines = [header, "<available_skills>"]
    for skill in sorted(skills, key=lambda item: item.name):
        lines.extend(_skill_entry(skill, readable))
    lines.append("</available_skills>")
    return "\n".join(lines)


#: Said before the memory stores (only to a model offered bash, which reaches them).
_MEMORY_STORES = (
    "Memory stores are folders of files kept across runs; reach them with bash. Read what a "
    "store holds before acting; write what a later run should know only to a store mounted "
    "rw (ro stores refuse writes)."
)


def _memory_section(mounts: Sequence[MemoryMountSpec]) -> str | None:
    if not mounts:
        return None
    lines = [_MEMORY_STORES, "<memory_stores>"]
    for mount in sorted(mounts, key=lambda item: (item.mount_path, item.mode)):
        lines.append(
            f"<store path={canonical_json(mount.mount_path)} mode={canonical_json(mount.mode)}/>"
        )
    lines.append("</memory_stores>")
    return "\n".join(lines)


def _tools_section(tools: Mapping[str, Tool]) -> str | None:
    if not tools:
        return None
    lines = ["Tools you may call:"]
    for name in sorted(tools):
        description = tools[name].description or "(no description)"
        lines.append(f"- {name}: {description}")
    return "\n".join(lines)


def system_prompt(
    *,
    system: str | None,
    skills: Sequence[SkillDescriptor] = (),
    tools: Mapping[str, Tool] | None = None,
    output: Mapping[str, Any] | None = None,
    extra: str | None = None,
    memory: Sequence[MemoryMountSpec] = (),
) -> str:
    """The system message, stable parts first (see the module docstring). ``memory``: the
    memory stores mounted beside the bash tool, listed only when ``tools`` has ``bash``."""
    bash = "bash" in (tools or {})
    parts = [system if system else DEFAULT_WORKER_SYSTEM]
    for section in (
        _skills_section(skills, readable=bash),
        _memory_section(memory) if bash else None,
        _tools_section(tools or {}),
        None if output is None else "Output contract:\n" + instructions(output),
        extra,
    ):
        if section:
            parts.append(section)
    return "\n\n".join(parts)


def render_input(step_input: Any) -> str:
    """The step input as message text: strings as they are, anything else as JSON."""
    if isinstance(step_input, str):
        return step_input
    return canonical_json(json_safe(step_input))


def step_messages(
    system_text: str, step_input: Any, *, repair_note: str | None = None
) -> list[dict[str, Any]]:
    """``[system, user(step input)]`` plus the self-repair note as a trailing user turn."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_text},
        {"role": "user", "content": render_input(step_input)},
    ]
    if repair_note:
        messages.append({"role": "user", "content": repair_note})
    return messages
