"""Where a session's skills are in its sandbox: one read-only folder per skill.

Upstream stages skills under ``.agents/skills/<name>/`` of the session's working folder. Here
the working folder of the bash tool is the attempt's writable scratch (``/mnt/scratch/own``),
whose changes are published with the commit, and a mount inside it would put its mount
point into what is published (the sandbox refuses nested mounts for that reason); so each
skill is mounted read-only at :data:`SKILLS_ROOT` ``/<name>/`` (``/mnt/skills/<name>/SKILL.md``)
beside the scratch and memory mounts, and the prompt tells the model that path.

The files come from the :class:`~little_dist.harness.types.SkillDescriptor`, not from the
author's folder: they are written once per process into a content-addressed folder
(``<tmp>/little-skills-<uid>/<content hash>/``, made complete under a temporary name and
renamed into place, so a reader never sees half of one) and shared by every attempt that
mounts the same skill.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from little_dist.harness.types import SkillDescriptor
from little_dist.sandbox import Mount
from little_dist.skills.frontmatter import SkillError

__all__ = ["SKILLS_ROOT", "materialize_skill", "skill_mounts", "skill_path"]

#: Where the skills are mounted in the sandbox.
SKILLS_ROOT: Final = "/mnt/skills"

_lock = threading.Lock()


def skill_path(name: str) -> str:
    """The folder of skill ``name`` in the sandbox."""
    return f"{SKILLS_ROOT}/{name}"


def _cache_root() -> Path:
    root = Path(tempfile.gettempdir()) / f"little-skills-{os.getuid()}"
    root.mkdir(mode=0o755, exist_ok=True)
    return root


def _safe(relative: str, skill: str) -> PurePosixPath:
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or "\0" in relative or not path.parts:
        raise SkillError(f"skill {skill!r}: file path {relative!r} is not a relative path")
    return path


def materialize_skill(skill: SkillDescriptor) -> Path:
    """The host folder holding ``skill``'s files (written on first use)."""
    if not skill.files:
        raise SkillError(f"skill {skill.name!r} has no files to mount")
    digest = skill.content_hash.removeprefix("sha256:")
    if not digest:
        raise SkillError(f"skill {skill.name!r} has no content hash")
    target = _cache_root() / digest
    with _lock:
        if target.is_dir():
            return target
        staging = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=target.parent))
        try:
            for relative, data in skill.files:
                path = staging.joinpath(*_safe(relative, skill.name).parts)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o444)
            for folder, _dirs, _files in os.walk(staging):
                Path(folder).chmod(0o555)
            try:
                staging.rename(target)
            except OSError:
                if not target.is_dir():  # another process made it first: theirs is the same
                    raise
        finally:
            if staging.exists():
                for folder, _dirs, _files in os.walk(staging):
                    Path(folder).chmod(0o755)
                shutil.rmtree(staging, ignore_errors=True)
    return target


def skill_mounts(skills: Sequence[SkillDescriptor]) -> list[Mount]:
    """A read-only mount per folder skill (inline skills have no files), by name."""
    return [
        Mount(materialize_skill(skill), skill_path(skill.name), writable=False)
        for skill in sorted(skills, key=lambda item: item.name)
        if skill.files
    ]
