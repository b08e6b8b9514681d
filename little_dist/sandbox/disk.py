"""What a command's writable mounts take on disk, measured while it runs.

The sandbox's writable mounts are host folders (a scratch, a memory store, a program's work
folder) that outlive the command, so no size-limited file system can hold them without
copying; the parent measures them instead, every few tens of milliseconds, and ends the
command the moment they pass ``disk_bytes`` or ``disk_files``
(:mod:`little_dist.sandbox.supervise`).

The folders are the command's to shape, so the walk is :mod:`little_dist.sandbox.writable`'s
(relative to directory descriptors, ``O_NOFOLLOW``: a link is counted as a link, never
followed; no recursion; bounded depth and entries). Sizes come from ``lstat``'s ``st_blocks``
(what is allocated: a sparse file costs what it holds) and a file with several links counts
once. What the walk cannot measure — a tree deeper than its bound, more entries than
``disk_files`` — is reported as a ``problem``, which ends the command as surely as the bytes
would: a bound that could be hidden from would be none.

Files the command still holds open after unlinking them take disk too and are in no folder:
:func:`unlinked_open_bytes` finds them through ``/proc/<pid>/fd`` of the command's processes
(known where the command has a cgroup).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from little_dist.sandbox.writable import MAX_DEPTH, UnsafeEntryError, WritableFolder

__all__ = [
    "CHILDREN_LISTED",
    "MAX_DEPTH",
    "DiskUse",
    "descendants",
    "disk_use",
    "own_proc",
    "unlinked_open_bytes",
]

_MAX_FDS: Final = 4096
_MAX_PIDS: Final = 4096
#: Whether this kernel lists each task's children (``/proc/<pid>/task/<tid>/children``).
CHILDREN_LISTED: Final = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


@dataclass(frozen=True, slots=True)
class DiskUse:
    """Bytes allocated and entries found; ``problem`` says why the walk could not finish
    (then the figures are a lower bound)."""

    bytes: int
    entries: int
    problem: str | None = None


class _Unmeasurable(Exception):
    """A walk past its bounds."""


def disk_use(roots: Sequence[Path], *, max_entries: int, max_depth: int = MAX_DEPTH) -> DiskUse:
    """What the folders ``roots`` take: one bounded walk of each, links never followed."""
    total = entries = 0
    linked: set[tuple[int, int]] = set()
    for root in roots:
        try:
            with WritableFolder(root) as folder:
                with folder.folder() as fd:
                    total += os.fstat(fd).st_blocks * 512
                walk = folder.walk(
                    max_depth=max_depth,
                    max_entries=max(max_entries - entries, 0),
                    error=_Unmeasurable,
                )
                for entry in walk:
                    entries += 1
                    info = entry.info
                    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                        if (info.st_dev, info.st_ino) in linked:
                            continue
                        linked.add((info.st_dev, info.st_ino))
                    total += info.st_blocks * 512
        except _Unmeasurable as exc:
            return DiskUse(total, entries, str(exc))
        except (UnsafeEntryError, OSError) as exc:
            return DiskUse(total, entries, f"a writable mount cannot be measured: {exc}")
    return DiskUse(total, entries)


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


def descendants(root: int) -> list[int]:
    """``root`` and every process below it, from the kernel's ``children`` lists: a look
    at the command's processes only, not at every process of the host (which, on a busy
    host, made a look slow, and the looks further apart). Bounded by ``_MAX_PIDS``."""
    found, todo = [root], [root]
    while todo and len(found) < _MAX_PIDS:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # ended meanwhile
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/children", "rb") as listed:
                    children = [int(child) for child in listed.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found[:_MAX_PIDS]


def own_proc() -> bool:
    """Whether ``/proc`` is of this process's PID namespace (pids read elsewhere mean the
    same processes there)."""
    try:
        return int(os.readlink("/proc/self")) == os.getpid()
    except (OSError, ValueError):
        return False
