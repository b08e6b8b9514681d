"""Sandbox user ids, as root: each live command on a host gets one no other live command has.

A root worker runs each command as a user id of its own (``UID_BASE`` upward) so that the
kernel's per-user process limit counts that command's processes only and no command can
signal or trace another's. Worker processes (several per host, in containers that share the
host's user ids, each perhaps pid 1 of its own PID namespace) take ids by locking a file per
id in :data:`LOCKS` (a root-owned 0700 folder): a command holds its id's ``flock`` for its
life and the next command tries the next id while one is taken. A crashed worker's locks
end with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from little_dist.sandbox.isolation import SandboxUnavailableError

__all__ = ["LOCKS", "UID_BASE", "UID_SPAN", "leased_uid"]

#: Sandbox user ids: ``UID_BASE + n`` for n below ``UID_SPAN``.
UID_BASE: Final = 200_000
UID_SPAN: Final = 10_000
#: Where the per-id lock files are (one host's, shared by its workers).
LOCKS: Final = Path("/run/little-sandbox")

_next = secrets.randbelow(UID_SPAN)
_guard = threading.Lock()


@contextlib.contextmanager
def leased_uid() -> Iterator[int | None]:
    """A user id no other live command on this host runs as, held while inside; None (the
    worker's own) when this process is not root."""
    if os.geteuid() != 0:
        yield None
        return
    folder = _lock_folder()
    try:
        uid, lock = _take(folder)
    finally:
        os.close(folder)
    try:
        yield uid
    finally:
        os.close(lock)


def _take(folder: int) -> tuple[int, int]:
    global _next
    with _guard:
        start = _next
        _next = (_next + 1) % UID_SPAN
    for step in range(UID_SPAN):
        uid = UID_BASE + (start + step) % UID_SPAN
        fd = os.open(
            f"{uid}.lock",
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=folder,
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return uid, fd
    raise SandboxUnavailableError(
        f"every sandbox user id ({UID_BASE}..{UID_BASE + UID_SPAN - 1}) is in use on this host"
    )


def _lock_folder() -> int:
    """:data:`LOCKS`, made if missing; refused unless a root-owned folder no one else may
    enter (a planted folder or link would let another user hold every id)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(LOCKS, 0o700)
    try:
        fd = os.open(LOCKS, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxUnavailableError(f"sandbox user ids: cannot open {LOCKS}: {exc}") from exc
    info = os.fstat(fd)
    if info.st_uid != 0 or stat.S_IMODE(info.st_mode) & 0o077:
        os.close(fd)
        raise SandboxUnavailableError(
            f"sandbox user ids: {LOCKS} must be a folder owned by root with mode 0700 "
            f"(it is owned by uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):04o})"
        )
    return fd
