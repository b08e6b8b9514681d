"""What a skill is to the harness: :class:`SkillDescriptor` (pure, no IO)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SkillDescriptor"]


@dataclass(frozen=True)
class SkillDescriptor:
    """A skill the harness offers the model.

    An inline skill (:func:`~little_dist.skill` with a description) is text: ``body`` is its
    instructions, given in the prompt. A folder skill (``skill("./skills/name/")``, see
    :mod:`little_dist.skills`) carries its files as read when the workflow was defined:
    ``files`` (relative path -> bytes, ``SKILL.md`` among them), their ``content_hash``, the
    ``frontmatter_hash`` (upstream's), where it came from (``origin``: ``workflow``, ``org``
    or ``discovered``; ``source``: the path) and its ``allowed_tools`` (front matter
    ``allowed-tools``).
    """

    name: str
    description: str
    body: str = ""
    allowed_tools: tuple[str, ...] = ()
    files: tuple[tuple[str, bytes], ...] = ()
    content_hash: str = ""
    frontmatter_hash: str = ""
    origin: str = "workflow"
    source: str = ""
