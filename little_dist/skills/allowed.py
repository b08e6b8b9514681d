"""``allowed-tools``: the tools a session's skills let its model call.

Upstream records a skill's ``allowed-tools`` and passes it on as a hint (its docs: "not
enforced"). Here it is enforced, with these semantics:

* the skills of a session (the ones its role was given, see :mod:`.folders`) are its
  *active* skills: there is no per-turn activation to track, as the skill list is fixed when
  the session starts (upstream's rule too);
* when no active skill declares ``allowed-tools``, nothing is restricted;
* otherwise a tool may be called when its name matches an entry of some active skill's
  ``allowed-tools`` (an exact name or a shell-style pattern: ``search_*``); a skill without
  the field does not widen that set;
* ``bash`` stays callable: it is how the model reads the skills themselves
  (``cat /mnt/skills/<name>/SKILL.md``), and its reach is the sandbox's.

A refused tool stays offered (so the session's manifest and prompt are what they would be
without the rule), and a call to it fails with :class:`ToolNotAllowedError`, causeCode
``tool_not_allowed``, which the model sees as the tool's error::

    tool 'email' is not allowed by the active skills' allowed-tools
    (refund-policy: lookup, search_*)

Applied to model sessions only: a ``tool.call`` step has no model, so no skills (upstream).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from little_dist.skills.descriptor import SkillDescriptor
from little_dist.tools import Tool

__all__ = ["ALWAYS_ALLOWED", "ToolNotAllowedError", "restrict_tools", "tool_allowed"]

#: Tools no skill's ``allowed-tools`` takes away.
ALWAYS_ALLOWED = frozenset({"bash"})


class ToolNotAllowedError(Exception):
    """A tool call the active skills' ``allowed-tools`` do not allow."""

    cause_code: ClassVar[str] = "tool_not_allowed"
    retriable: ClassVar[bool] = False


def _declared(skills: Sequence[SkillDescriptor]) -> list[SkillDescriptor]:
    return [skill for skill in skills if skill.allowed_tools]


def tool_allowed(name: str, skills: Sequence[SkillDescriptor]) -> bool:
    """Whether tool ``name`` may be called in a session with ``skills``."""
    declared = _declared(skills)
    if not declared or name in ALWAYS_ALLOWED:
        return True
    return any(
        fnmatch.fnmatchcase(name, pattern) for skill in declared for pattern in skill.allowed_tools
    )


class _Refused(Tool):
    """The offered face of a tool the skills do not allow: same name, description and
    schema; calling it raises :class:`ToolNotAllowedError`."""

    def __init__(self, tool: Tool, reason: str) -> None:
        self.__dict__.update(tool.__dict__)
        self._reason = reason

    def call(self, arguments: Mapping[str, Any]) -> Any:
        raise ToolNotAllowedError(self._reason)


def restrict_tools(tools: Mapping[str, Any], skills: Sequence[SkillDescriptor]) -> dict[str, Any]:
    """``tools`` with each one the skills do not allow replaced by a refusing stand-in."""
    declared = _declared(skills)
    if not declared:
        return dict(tools)
    lists = "; ".join(
        f"{skill.name}: {', '.join(skill.allowed_tools)}"
        for skill in sorted(declared, key=lambda item: item.name)
    )
    out: dict[str, Any] = {}
    for name, tool in tools.items():
        if tool_allowed(name, skills) or not isinstance(tool, Tool):
            out[name] = tool
        else:
            out[name] = _Refused(
                tool,
                f"tool {name!r} is not allowed by the active skills' allowed-tools ({lists})",
            )
    return out
