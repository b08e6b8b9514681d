"""Memory stores of a :class:`~little_dist.world.local.LocalWorld`: files plus an SQLite index.

A store's files live under the data directory as upstream lays them out
(``memory/workflows/<key>/``, ``memory/org/``, ``memory/pipelines/<key>/``); which version
each path holds is in ``memory/index.db`` (path, sha256, size, version; a deleted path keeps
its row with a NULL digest). :meth:`LocalMemoryStore.commit` runs in one ``BEGIN IMMEDIATE``
transaction, so two processes committing to one store take turns and the second sees the
first's versions: the compare-and-set of :mod:`little_dist.memory.store`.

A fenced commit runs inside ``fenced`` (the World's ``while_fenced``: the lease checked in
a ``BEGIN IMMEDIATE`` transaction of the World's database, held until the commit is done),
so no lease can be taken over or expire between the check and the commit.

The files are written inside that transaction, each to a temporary name then renamed over
the old one; folders are walked without following symlinks (a link planted in a store's
folder cannot send a write outside it). Change memory through this store (``little memory
put``), not by editing the files: an edit made behind the index's back is not a new version.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

from little_dist.errors import InvalidInputError, StorageUnavailableError
from little_dist.memory.store import (
    Applied,
    MemoryChange,
    MemoryEntry,
    MemoryNotFoundError,
    check_memory_path,
    check_store_id,
    conflict_path,
)

if TYPE_CHECKING:
    from little_dist.world.base import Fence

__all__ = ["Fenced", "LocalMemoryStore"]

#: Runs a commit while a fence's lease is held (raising LeaseLostError, the commit not run,
#: when it is not): a World's ``while_fenced``.
Fenced = Callable[["Fence", Callable[[], list[Applied]]], list[Applied]]

_SCHEMA = """CREATE TABLE IF NOT EXISTS memory (
    store TEXT NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT,
    size INTEGER NOT NULL,
    version INTEGER NOT NULL,
    PRIMARY KEY (store, path)
)"""


class LocalMemoryStore:
    """The memory stores under ``data_dir/memory`` (see the module docstring); without
    ``fenced``, a fenced commit is refused."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        fenced: Fenced | None = None,
    ) -> None:
        self.root = Path(data_dir) / "memory"
        self._busy_timeout = busy_timeout
        self._fenced = fenced

    def folder(self, store_id: str) -> Path:
        """The folder holding ``store_id``'s files (upstream's backing path)."""
        check_store_id(store_id)
        kind, _, key = store_id.partition(":")
        if kind == "org":
            return self.root / "org"
        return self.root / ("workflows" if kind == "workflow" else "pipelines") / key

    def entries(self, store_id: str) -> Mapping[str, MemoryEntry]:
        check_store_id(store_id)
        if not (self.root / "index.db").exists():
            return {}
        with self._connection() as db:
            rows = db.execute(
                "SELECT path, version, sha256, size FROM memory WHERE store = ?", (store_id,)
            ).fetchall()
        return {row[0]: MemoryEntry(row[0], row[1], row[2], row[3]) for row in rows}

    def read(self, store_id: str, entry: MemoryEntry) -> bytes:
        if entry.sha256 is None:
            raise MemoryNotFoundError(f"memory {store_id}: {entry.path!r} was deleted")
        try:
            folder, path = self.folder(store_id), check_memory_path(entry.path)
            with _open_in(folder, path, write=False) as fd, os.fdopen(os.dup(fd), "rb") as file:
                return file.read()
        except FileNotFoundError as error:
            raise MemoryNotFoundError(f"memory {store_id}: no file {entry.path!r}") from error
        except OSError as error:
            raise StorageUnavailableError(
                f"memory {store_id}: cannot read {entry.path!r}: {error}"
            ) from error

    def commit(
        self,
        store_id: str,
        changes: Sequence[MemoryChange],
        *,
        writer: str,
        fence: Fence | None = None,
    ) -> list[Applied]:
        if fence is None:
            return self._commit(store_id, changes, writer)
        if self._fenced is None:
            raise InvalidInputError(f"memory {store_id}: this store cannot check a fence")
        return self._fenced(fence, lambda: self._commit(store_id, changes, writer))

    def _commit(self, store_id: str, changes: Sequence[MemoryChange], writer: str) -> list[Applied]:
        folder = self.folder(store_id)
        for change in changes:
            check_memory_path(change.path)
        applied: list[Applied] = []
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with self._connection() as db:
                db.execute("BEGIN IMMEDIATE")
                try:
                    for change in changes:
                        applied.append(self._apply(db, folder, store_id, change, writer))
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
        except sqlite3.Error as error:
            raise StorageUnavailableError(f"memory index {self.root}: {error}") from error
        except OSError as error:
            raise StorageUnavailableError(f"memory {store_id}: {error}") from error
        return applied

    def _apply(
        self,
        db: sqlite3.Connection,
        folder: Path,
        store_id: str,
        change: MemoryChange,
        writer: str,
    ) -> Applied:
        now = self._row(db, store_id, change.path)
        sha = None if change.data is None else "sha256:" + hashlib.sha256(change.data).hexdigest()
        size = 0 if change.data is None else len(change.data)
        if now.sha256 == sha:
            return Applied(change.path, "unchanged", now.version, now.version, sha, size)
        if now.version == change.base:
            self._put(db, folder, store_id, change.path, change.data, sha, now.version + 1)
            if change.data is None:
                return Applied(change.path, "deleted", now.version + 1, now.version, None, 0)
            return Applied(change.path, "written", now.version + 1, now.version, sha, size)
        if change.data is None:
            return Applied(
                change.path, "conflict-dropped", now.version, now.version, now.sha256, now.size
            )
        kept = conflict_path(change.path, writer)
        other = self._row(db, store_id, kept)
        self._put(db, folder, store_id, kept, change.data, sha, other.version + 1)
        return Applied(change.path, "conflict", other.version + 1, now.version, sha, size, kept)

    def _row(self, db: sqlite3.Connection, store_id: str, path: str) -> MemoryEntry:
        row = db.execute(
            "SELECT version, sha256, size FROM memory WHERE store = ? AND path = ?",
            (store_id, path),
        ).fetchone()
        return MemoryEntry(path, 0, None) if row is None else MemoryEntry(path, *row)

    def _put(
        self,
        db: sqlite3.Connection,
        folder: Path,
        store_id: str,
        path: str,
        data: bytes | None,
        sha: str | None,
        version: int,
    ) -> None:
        if data is None:
            with (
                _open_in(folder, path, write=True, parent_only=True) as parent,
                suppress(FileNotFoundError),
            ):
                os.unlink(os.path.basename(path), dir_fd=parent)
        else:
            _write_in(folder, path, data)
        db.execute(
            "INSERT INTO memory (store, path, sha256, size, version) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (store, path) DO UPDATE SET sha256 = excluded.sha256, "
            "size = excluded.size, version = excluded.version",
            (store_id, path, sha, 0 if data is None else len(data), version),
        )

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            db = sqlite3.connect(
                self.root / "index.db", timeout=self._busy_timeout, isolation_level=None
            )
        except sqlite3.Error as error:
            raise StorageUnavailableError(f"memory index {self.root}: {error}") from error
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(_SCHEMA)
            yield db
        finally:
            db.close()


@contextmanager
def _open_in(folder: Path, path: str, *, write: bool, parent_only: bool = False) -> Iterator[int]:
    """A descriptor of ``folder/path`` (or of its parent folder), every component opened
    without following a symlink; folders made on the way when ``write``."""
    parts = path.split("/")
    opened = [os.open(folder, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for part in parts[:-1]:
            try:
                fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=opened[-1])
            except FileNotFoundError:
                if not write:
                    raise
                os.mkdir(part, 0o755, dir_fd=opened[-1])
                fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=opened[-1])
            opened.append(fd)
        if parent_only:
            yield opened[-1]
        else:
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW, dir_fd=opened[-1])
            opened.append(fd)
            yield fd
    finally:
        for fd in reversed(opened):
            os.close(fd)


def _write_in(folder: Path, path: str, data: bytes) -> None:
    name = os.path.basename(path)
    temporary = f".{name[:200]}.{os.getpid()}.tmp"
    with _open_in(folder, path, write=True, parent_only=True) as parent:
        fd = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=parent
        )
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
