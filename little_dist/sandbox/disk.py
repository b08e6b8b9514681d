"""What a command's writable mounts take on disk, measured while it runs.

The sandbox's writable mounts are host folders (a scratch, a memory store, a program's work
folder) that outlive the command, so no size-limited file system can hold them without
copying; the parent measures them instead, every few tens of milliseconds, and ends the
command the moment they pass ``disk_bytes`` or ``disk_files``
(:mod:`little_dist.sandbox.supervise`).

The folders are the command's to shape, so the walk trusts nothing in them: it opens each
folder relative to its parent's descriptor with ``O_NOFOLLOW | O_DIRECTORY`` (a link is
counted as a link, never followed), takes every size from ``lstat`` (``st_blocks``: what is
allocated, so a sparse file costs what it holds), counts a file with several links once, stays
on the mount's file system, iterates instead of recursing, and bounds the entries it reads and
the depth it goes to. What it cannot measure — a tree deeper than :data:`MAX_DEPTH`, more
entries than the bound, a folder it may not read — is reported as a ``problem``, which ends the
command as surely as the bytes would: a bound that could be hidden from would be none.

Files the command still holds open after unlinking them take disk too and are in no folder:
:func:`unlinked_open_bytes` finds them through ``/proc/<pid>/fd`` of the command's processes
(known where the command has a cgroup).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["MAX_DEPTH", "DiskUse", "disk_use", "own_proc", "unlinked_open_bytes"]

#: Folders deeper than this in a writable mount end the command (``stopped: "disk"``).
MAX_DEPTH: Final = 64
_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_FDS: Final = 4096


@dataclass(frozen=True, slots=True)
class DiskUse:
    """Bytes allocated and entries found; ``problem`` says why the walk could not finish
    (then the figures are a lower bound)."""

    bytes: int
    entries: int
    problem: str | None = None


def disk_use(roots: Sequence[Path], *, max_entries: int, max_depth: int = MAX_DEPTH) -> DiskUse:
    """What the folders ``roots`` take: one bounded walk of each, links never followed."""
    walk = _Walk(max_entries, max_depth)
    for root in roots:
        if walk.problem is not None:
            break
        walk.root(root)
    return DiskUse(walk.bytes, walk.entries, walk.problem)


class _Walk:
    def __init__(self, max_entries: int, max_depth: int) -> None:
        self.bytes = 0
        self.entries = 0
        self.problem: str | None = None
        self._max_entries = max_entries
        self._max_depth = max_depth
        self._linked: set[tuple[int, int]] = set()

    def root(self, root: Path) -> None:
        try:
            fd = os.open(root, _DIR_FLAGS)
        except FileNotFoundError:
            return
        except OSError as exc:
            self.problem = f"cannot read {root}: {exc.strerror}"
            return
        device = os.fstat(fd).st_dev
        # Each frame: an open folder and the names of its subfolders still to visit. At most
        # max_depth frames, so at most max_depth descriptors, whatever the tree's width.
        stack: list[tuple[int, list[str]]] = [(fd, [])]
        try:
            stack[0] = (fd, self._list(fd, device))
            while stack and self.problem is None:
                parent, pending = stack[-1]
                if not pending:
                    os.close(stack.pop()[0])
                    continue
                name = pending.pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=parent)
                except (FileNotFoundError, NotADirectoryError):
                    continue  # removed or replaced since it was listed
                except PermissionError:
                    self.problem = "a folder in a writable mount cannot be read"
                    break
                except OSError:  # ELOOP: a link took its place; counted when next listed
                    continue
                if len(stack) > self._max_depth:
                    os.close(child)
                    self.problem = f"folders deeper than {self._max_depth} levels"
                    break
                stack.append((child, []))  # first: the finally closes it whatever happens
                stack[-1] = (child, self._list(child, device))
        finally:
            for frame_fd, _ in stack:
                os.close(frame_fd)

    def _list(self, fd: int, device: int) -> list[str]:
        """Count one folder's entries (``lstat`` only); return its subfolders' names."""
        folders: list[str] = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    self.entries += 1
                    if self.entries > self._max_entries:
                        self.problem = f"more than {self._max_entries} files and folders"
                        break
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if info.st_dev != device:
                        continue  # another file system mounted inside: not this mount's disk
                    if stat.S_ISDIR(info.st_mode):
                        folders.append(entry.name)
                    elif info.st_nlink > 1:
                        key = (info.st_dev, info.st_ino)
                        if key in self._linked:
                            continue
                        self._linked.add(key)
                    self.bytes += info.st_blocks * 512
        except PermissionError:
            self.problem = "a folder in a writable mount cannot be read"
        except OSError as exc:
            self.problem = f"a folder in a writable mount cannot be listed: {exc.strerror}"
        with contextlib.suppress(OSError):
            self.bytes += os.fstat(fd).st_blocks * 512
        return folders


def unlinked_open_bytes(pids: Iterable[int], devices: set[int]) -> int:
    """Disk taken by regular files on ``devices`` that the processes ``pids`` hold open but
    that are linked in no folder any more (``st_nlink`` 0). Needs a ``/proc`` of this
    process's PID namespace: pass no pids where it is another's."""
    seen: set[tuple[int, int]] = set()
    total = 0
    budget = _MAX_FDS
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names[:budget]:
            budget -= 1
            try:
                info = os.stat(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if (
                stat.S_ISREG(info.st_mode)
                and info.st_nlink == 0
                and info.st_dev in devices
                and key not in seen
            ):
                seen.add(key)
                total += info.st_blocks * 512
        if budget <= 0:
            break
    return total


def own_proc() -> bool:
    """Whether ``/proc`` is of this process's PID namespace (pids read elsewhere mean the
    same processes there)."""
    try:
        return int(os.readlink("/proc/self")) == os.getpid()
    except (OSError, ValueError):
        return False
