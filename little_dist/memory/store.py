"""Where memory is kept: the :class:`MemoryStore` protocol, its data, and the path rules.

A store (``workflow:<key>``, ``org``, ``pipeline:<key>``) maps relative paths to files. Each
path has a *version*, raised by one on every change; a deleted file keeps its version as a
tombstone (``sha256`` None), so "absent when I started" is a version too and a delete then
re-create by someone else is never mistaken for no change.

:meth:`MemoryStore.commit` applies one attempt's changes atomically: each change names the
version its writer started from (``base``); where the path still holds that version the
change lands, else the change is a *conflict* and its bytes land under
:func:`conflict_path` instead (``notes.conflict-<writer>.md``), so the other writer's update
stays and neither is lost. A change that writes what the path already holds is a no-op
(a retried attempt re-publishing its own change). A commit made with a ``fence`` (the
step lease of the attempt that made the changes) lands only while that lease is held with
that token: the check is atomic with the commit, so an attempt that was superseded or lost
its lease (a zombie) publishes nothing, and :class:`~little_dist.errors.LeaseLostError`
says so. Implementations:

* :class:`~little_dist.memory.local.LocalMemoryStore` — files under the data directory
  (upstream's layout: ``memory/workflows/<key>/``, ``memory/org/``,
  ``memory/pipelines/<key>/``), versions in an SQLite index changed in one transaction
  (a fenced one inside the World's lease check: see :mod:`~little_dist.memory.local`);
* :class:`~little_dist.memory.redis_s3.RedisS3MemoryStore` — content-addressed S3 objects
  and a Redis hash per store (path -> sha256, size, version) changed by one script, which
  also checks the fence's lease.

Errors: :class:`MemoryPathError` (a path that is not a plain relative path inside its store:
``..``, absolute, NUL, too long), :class:`MemoryNotFoundError`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

from little_dist.errors import InvalidInputError, NotFoundError

if TYPE_CHECKING:
    from little_dist.world.base import Fence

__all__ = [
    "MAX_MEMORY_PATH_BYTES",
    "Applied",
    "MemoryChange",
    "MemoryEntry",
    "MemoryNotFoundError",
    "MemoryPathError",
    "MemoryStore",
    "check_memory_path",
    "check_store_id",
    "conflict_path",
]

#: The longest relative path a store keeps (bytes of UTF-8).
MAX_MEMORY_PATH_BYTES: Final = 1024
_NAME_BYTES: Final = 255
_STORE_ID = re.compile(r"^(org|workflow:[a-z0-9-]+|pipeline:sha256:[0-9a-f]{64})$")


class MemoryPathError(InvalidInputError):
    """A memory path that would leave its store, or that no file system can hold."""


class MemoryNotFoundError(NotFoundError):
    """No such memory store, or no such file in it."""


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """A path of a store now: its version, and its digest and size (``sha256`` None: deleted)."""

    path: str
    version: int
    sha256: str | None
    size: int = 0

    @property
    def exists(self) -> bool:
        return self.sha256 is not None


@dataclass(frozen=True, slots=True)
class MemoryChange:
    """Write ``data`` at ``path`` (None: delete it), made from version ``base`` (0: the path
    never existed)."""

    path: str
    base: int
    data: bytes | None


@dataclass(frozen=True, slots=True)
class Applied:
    """What :meth:`MemoryStore.commit` did with one change: ``written``, ``deleted``,
    ``unchanged`` (the path already held it), ``conflict`` (kept at ``conflict_path``) or
    ``conflict-dropped`` (a delete whose file had changed meanwhile: the newer file stays).
    ``version`` is the path's version after; ``current`` what it held when the change came."""

    path: str
    outcome: Literal["written", "deleted", "unchanged", "conflict", "conflict-dropped"]
    version: int
    current: int
    sha256: str | None
    size: int
    conflict_path: str | None = None


class MemoryStore(Protocol):
    """The memory stores of one World (see the module docstring)."""

    def entries(self, store_id: str) -> Mapping[str, MemoryEntry]:
        """Every path of the store, tombstones included; empty for an unknown store."""
        ...

    def read(self, store_id: str, entry: MemoryEntry) -> bytes:
        """The bytes of ``entry`` (as :meth:`entries` gave it)."""
        ...

    def commit(
        self,
        store_id: str,
        changes: Sequence[MemoryChange],
        *,
        writer: str,
        fence: Fence | None = None,
    ) -> list[Applied]:
        """Apply ``changes`` atomically, conflicts kept under :func:`conflict_path`; with
        ``fence``, only while its lease is held (else
        :class:`~little_dist.errors.LeaseLostError` and nothing changes)."""
        ...


def check_store_id(store_id: str) -> str:
    if not isinstance(store_id, str) or not _STORE_ID.fullmatch(store_id):
        raise MemoryPathError(f"memory store id {store_id!r} is not one this engine makes")
    return store_id


def check_memory_path(path: str) -> str:
    """``path`` as a store keeps it: relative, normalised, inside the store; else
    :class:`MemoryPathError` naming the path and what is wrong with it."""
    shown = repr(path[:80]) + ("..." if isinstance(path, str) and len(path) > 80 else "")
    if not isinstance(path, str) or not path:
        raise MemoryPathError(f"memory path {shown}: expected a relative file path")
    if "\0" in path:
        raise MemoryPathError(f"memory path {shown}: holds a NUL byte")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_MEMORY_PATH_BYTES:
        raise MemoryPathError(f"memory path {shown}: longer than {MAX_MEMORY_PATH_BYTES} bytes")
    if path.startswith("/"):
        raise MemoryPathError(
            f"memory path {shown}: starts with '/' (give it relative to the store)"
        )
    parts = path.split("/")
    if any(part in ("..",) for part in parts):
        raise MemoryPathError(f"memory path {shown}: '..' would leave the store")
    normal = posixpath.normpath(path)
    if normal in (".", "") or normal != path.rstrip("/") or path.endswith("/"):
        raise MemoryPathError(f"memory path {shown}: expected a normalised file path")
    if any(len(part.encode("utf-8", "surrogateescape")) > _NAME_BYTES for part in parts):
        raise MemoryPathError(f"memory path {shown}: a name is longer than {_NAME_BYTES} bytes")
    return path


def conflict_path(path: str, writer: str) -> str:
    """Where a conflicting change of ``path`` by ``writer`` is kept:
    ``dir/name.conflict-<writer>.ext`` (``.ext`` only when the name has one)."""
    folder, name = posixpath.split(path)
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", writer).strip("-")[:120] or "writer"
    stem, dot, ext = name.rpartition(".")
    if not stem:  # no extension, or a dotfile such as ".notes"
        stem, dot, ext = name, "", ""
    # A name stays within what a file system holds: the stem gives way first.
    room = _NAME_BYTES - len(f".conflict-{safe}{dot}{ext}".encode())
    while len(stem.encode()) > max(room, 1):
        stem = stem[:-1]
    renamed = f"{stem}.conflict-{safe}{dot}{ext}"
    return posixpath.join(folder, renamed) if folder else renamed
