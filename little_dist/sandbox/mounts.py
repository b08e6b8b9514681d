"""The folders a sandboxed command sees: each a host directory bound at a path inside.

Nothing else of the host's file system is visible but a read-only system (``/usr`` and the
few files of ``/etc`` programs need). A :class:`Mount` is checked when it is made: its
target is an absolute, normalised path under ``/mnt/`` or ``/work`` (never a system path),
its source an existing directory, resolved (a symlink cannot move a mount elsewhere).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from little_dist.errors import InvalidInputError

__all__ = ["MAX_PATH_BYTES", "Mount", "MountError", "check_mounts"]

#: Longer paths are refused (Linux's PATH_MAX is 4096 bytes).
MAX_PATH_BYTES: Final = 4096
_ROOTS: Final = (PurePosixPath("/mnt"), PurePosixPath("/work"))


class MountError(InvalidInputError):
    """A mount that cannot be made as asked (its target or source is unsafe or missing)."""


@dataclass(frozen=True, slots=True)
class Mount:
    """Host directory ``source`` seen at ``target`` inside the sandbox, writable or not; a
    read-only mount may also be one file (a binary the command runs)."""

    source: Path
    target: str
    writable: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "target", _checked_target(self.target))
        source = Path(self.source)
        if "\0" in str(source):
            raise MountError(f"mount {self.target}: the source path holds a NUL byte")
        resolved = source.resolve()
        if not resolved.is_dir() and (self.writable or not resolved.is_file()):
            what = "directory" if self.writable else "directory or file"
            raise MountError(f"mount {self.target}: {source} is not a {what}")
        object.__setattr__(self, "source", resolved)


def _checked_target(target: str) -> str:
    if not isinstance(target, str) or not target:
        raise MountError(f"mount target {target!r}: expected an absolute path")
    if "\0" in target:
        raise MountError(f"mount target {target!r}: holds a NUL byte")
    if len(target.encode()) > MAX_PATH_BYTES:
        raise MountError(f"mount target {target[:40]!r}...: longer than {MAX_PATH_BYTES} bytes")
    path = PurePosixPath(target)
    if not path.is_absolute() or ".." in path.parts or os.path.normpath(target) != target:
        raise MountError(f"mount target {target!r}: expected an absolute, normalised path")
    if not any(path == root or root in path.parents for root in _ROOTS):
        roots = " or ".join(str(root) for root in _ROOTS)
        raise MountError(f"mount target {target!r}: must be under {roots}")
    return target


def check_mounts(mounts: Sequence[Mount]) -> None:
    """Refuse two mounts at one target (the second would hide the first) and a mount inside
    another (its mount point would be made in the outer mount's host folder)."""
    seen: set[str] = set()
    for mount in mounts:
        if mount.target in seen:
            raise MountError(f"mount target {mount.target!r} is given twice")
        seen.add(mount.target)
    for mount in mounts:
        for other in seen:
            if mount.target.startswith(other + "/"):
                raise MountError(f"mount target {mount.target!r} is inside mount {other!r}")
