"""Where a session's skills are in its sandbox: one read-only folder per skill.

Upstream stages skills under ``.agents/skills/<name>/`` of the session's working folder. Here
the working folder of the bash tool is the attempt's writable scratch (``/mnt/scratch/own``),
whose changes are published with the commit, and a mount inside it would put its mount
point into what is published (the sandbox refuses nested mounts for that reason); so each
skill is mounted read-only at :data:`SKILLS_ROOT` ``/<name>/`` (``/mnt/skills/<name>/SKILL.md``)
beside the scratch and memory mounts, and the prompt tells the model that path.

The files come from the :class:`~little_dist.harness.types.SkillDescriptor`, not from the
author's folder: they are written once per process into a content-addressed folder
(``<cache>/<content hash>/``, made complete under a temporary name and renamed into place, so
a reader never sees half of one) and shared by every attempt that mounts the same skill.

The cache is the process's own: ``<cache>`` is a folder made with :func:`tempfile.mkdtemp`
the first time a skill is mounted (a new, unguessable name, so no other user can have made
it or planted a link there first), mode 0711 (a sandbox running as another uid reaches the
skill folders it is given, read-only, but nobody else can list, add or replace anything in
it), removed when the process exits normally (one killed outright, or a pool child that
ends with ``os._exit``, leaves its ``little-skills-*`` folder behind, as it leaves any
temporary folder: harmless, and safe to delete once the process is gone). Processes forked
after it was made share it, as they share the rest of its memory. The content hash is
computed from the files, not taken from the descriptor. (It was ``<tmp>/little-skills-<uid>/``,
a name anyone could compute and make first: another local user decided what every skill
prompt said.)
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from little_dist.sandbox import Mount
from little_dist.skills.descriptor import SkillDescriptor
from little_dist.skills.folders import content_hash
from little_dist.skills.frontmatter import SkillError

__all__ = ["SKILLS_ROOT", "materialize_skill", "skill_mounts", "skill_path"]

#: Where the skills are mounted in the sandbox.
SKILLS_ROOT: Final = "/mnt/skills"

_lock = threading.Lock()
# This process's cache folder, made on first use (see the module docstring).
_cache: list[Path] = []


def skill_path(name: str) -> str:
    """The folder of skill ``name`` in the sandbox."""
    return f"{SKILLS_ROOT}/{name}"


def _cache_root() -> Path:
    """This process's cache folder (call with ``_lock`` held)."""
    if not _cache:
        root = Path(tempfile.mkdtemp(prefix="little-skills-"))
        root.chmod(0o711)
        atexit.register(_remove_cache, root, os.getpid())
        _cache.append(root)
    return _cache[0]


def _remove_cache(root: Path, owner: int) -> None:
    if os.getpid() != owner:  # a forked child exiting: the folder is its parent's
        return
    _make_removable(root)
    shutil.rmtree(root, ignore_errors=True)


def _make_removable(root: Path) -> None:
    # The skill folders are read-only (0555): an unprivileged owner cannot delete inside them.
    for folder, _dirs, _files in os.walk(root):
        Path(folder).chmod(0o755)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _safe(relative: str, skill: str) -> PurePosixPath:
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or "\0" in relative or not path.parts:
        raise SkillError(f"skill {skill!r}: file path {relative!r} is not a relative path")
    return path


def materialize_skill(skill: SkillDescriptor) -> Path:
    """The host folder holding ``skill``'s files (written on first use)."""
    if not skill.files:
        raise SkillError(f"skill {skill.name!r} has no files to mount")
    # From the files themselves: two descriptors claiming one hash cannot share a folder.
    digest = content_hash(skill.files).removeprefix("sha256:")
    with _lock:
        target = _cache_root() / digest
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
                _make_removable(staging)
                shutil.rmtree(staging, ignore_errors=True)
    return target


def skill_mounts(skills: Sequence[SkillDescriptor]) -> list[Mount]:
    """A read-only mount per folder skill (inline skills have no files), by name."""
    return [
        Mount(materialize_skill(skill), skill_path(skill.name), writable=False)
        for skill in sorted(skills, key=lambda item: item.name)
        if skill.files
    ]
