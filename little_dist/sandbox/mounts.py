"""The folders a sandboxed command sees: each a host directory bound at a path inside.

Nothing else of the host's file system is visible but a read-only system (``/usr`` and the
few files of ``/etc`` programs need). A :class:`Mount` is checked when it is made: its
target is an absolute, normalised path under ``/mnt/`` or ``/work`` (never a system path),
or, read-only, under :data:`READ_ONLY_ROOTS` (``/planner/reuse``: where upstream shows the
planner its reuse candidate's files), its source an existing directory, resolved (a symlink
cannot move a mount elsewhere).

A *writable* mount is a folder the command can fill with anything (links, FIFOs, deep trees)
that the host then reads, walks or removes. So writable mounts exist only at the targets
:data:`WRITABLE_MOUNTS` names, and :data:`HOST_TOUCHES` lists every place the host touches
inside one (what it does there, and which code does it, always through
:mod:`little_dist.sandbox.writable`). A writable mount anywhere else is refused: a new one
must be added to both lists, and the attack test over :data:`HOST_TOUCHES`
(``tests/test_sandbox_host_links.py``) then tries links, FIFOs and deep trees on it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from little_dist.errors import InvalidInputError

__all__ = [
    "HOST_TOUCHES",
    "MAX_PATH_BYTES",
    "READ_ONLY_ROOTS",
    "WRITABLE_MOUNTS",
    "HostTouch",
    "Mount",
    "MountError",
    "check_mounts",
]

#: Longer paths are refused (Linux's PATH_MAX is 4096 bytes).
MAX_PATH_BYTES: Final = 4096
_ROOTS: Final = (PurePosixPath("/mnt"), PurePosixPath("/work"))
#: Roots a read-only mount may also have (never a writable one: the list above names those).
READ_ONLY_ROOTS: Final = (PurePosixPath("/planner/reuse"),)


@dataclass(frozen=True, slots=True)
class HostTouch:
    """One place the host touches inside a writable mount: ``target`` (the mount), ``path``
    inside it (``""``: every entry of the tree), what it ``does`` there and ``where`` (the
    code)."""

    target: str
    path: str
    does: str
    where: str


#: The targets a writable mount may have: a step's own scratch and the memory stores a
#: workflow may write (its own, the organisation's, an orchestration's pipeline).
WRITABLE_MOUNTS: Final = (
    "/mnt/scratch/own",
    "/mnt/memory/workflow",
    "/mnt/memory/org",
    "/mnt/memory/pipeline",
)
_TREE: Final = (
    "before each command: makes the whole tree the command's user's (as root)",
    "little_dist.sandbox.process._give",
)
#: Every place the host reads, writes, walks or removes inside a writable mount.
HOST_TOUCHES: Final = (
    HostTouch("/mnt/scratch/own", "", *_TREE),
    HostTouch(
        "/mnt/scratch/own",
        "",
        "writes the step's files as of its last attempt, and a replayed command's (restore)",
        "little_dist.scratch.attempt.AttemptScratch._write, scratch.snapshots.restore",
    ),
    HostTouch(
        "/mnt/scratch/own",
        "",
        "after each command: walks and reads every file to record it (snapshot)",
        "little_dist.scratch.snapshots.OwnSnapshots.snapshot",
    ),
    HostTouch(
        "/mnt/scratch/own",
        "",
        "at the commit: walks and reads every file to publish what changed",
        "little_dist.scratch.attempt.AttemptScratch.changes",
    ),
    HostTouch(
        "/mnt/scratch/own",
        "",
        "at the attempt's end: removes the whole tree",
        "little_dist.sandbox.writable.remove_tree",
    ),
    HostTouch(
        "/mnt/scratch/own",
        "workflow-results/<run id>/output.json",
        "writes a sub-run's output for the model (orchestrator tools)",
        "little_dist.subruns.orchestrator.write_model_facing_output",
    ),
    HostTouch(
        "/mnt/scratch/own",
        "<cwd>",
        "makes a resumed session's working folder",
        "little_dist.sandbox.bash.BashSession._make_dirs",
    ),
    *(
        HostTouch(
            target,
            "",
            "writes the store's files; after each command and at the commit walks and "
            "reads every file (snapshot, publish); removes the tree at the end",
            "little_dist.memory.attempt.AttemptMemory (_mount_all, _scan, close)",
        )
        for target in WRITABLE_MOUNTS[1:]
    ),
    *(HostTouch(target, "", *_TREE) for target in WRITABLE_MOUNTS[1:]),
    *(
        HostTouch(
            target,
            "",
            "while each command runs: walks the whole tree (lstat only) to bound its disk use",
            "little_dist.sandbox.disk.disk_use",
        )
        for target in WRITABLE_MOUNTS
    ),
)


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
        object.__setattr__(self, "target", _checked_target(self.target, self.writable))
        source = Path(self.source)
        if "\0" in str(source):
            raise MountError(f"mount {self.target}: the source path holds a NUL byte")
        if self.writable and self.target not in WRITABLE_MOUNTS:
            raise MountError(
                f"mount {self.target}: a writable mount may only be at "
                f"{', '.join(WRITABLE_MOUNTS)} (the host touches it only as "
                "little_dist.sandbox.mounts.HOST_TOUCHES lists)"
            )
        resolved = source.resolve()
        if not resolved.is_dir() and (self.writable or not resolved.is_file()):
            what = "directory" if self.writable else "directory or file"
            raise MountError(f"mount {self.target}: {source} is not a {what}")
        object.__setattr__(self, "source", resolved)


def _checked_target(target: str, writable: bool = False) -> str:
    if not isinstance(target, str) or not target:
        raise MountError(f"mount target {target!r}: expected an absolute path")
    if "\0" in target:
        raise MountError(f"mount target {target!r}: holds a NUL byte")
    if len(target.encode()) > MAX_PATH_BYTES:
        raise MountError(f"mount target {target[:40]!r}...: longer than {MAX_PATH_BYTES} bytes")
    path = PurePosixPath(target)
    if not path.is_absolute() or ".." in path.parts or os.path.normpath(target) != target:
        raise MountError(f"mount target {target!r}: expected an absolute, normalised path")
    roots_here = _ROOTS if writable else (*_ROOTS, *READ_ONLY_ROOTS)
    if not any(path == root or root in path.parents for root in roots_here):
        roots = " or ".join(str(root) for root in roots_here)
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
