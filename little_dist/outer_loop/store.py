"""Where outer-loop manifests are kept: the :class:`ManifestStore` protocol, compare-and-set.

A manifest is mutable (the loop rewrites it before and after every cycle), so every write
names the version it was made from: :meth:`ManifestStore.write` lands only if the stored
manifest is still that one (``expected`` is the ``etag`` :meth:`ManifestStore.read` gave,
``None``: none stored yet), else :class:`ManifestConflictError` and nothing is written. Two
processes driving one loop cannot both advance it: the second's write is refused.

Implementations, one per kind of World (:func:`manifest_store_for` picks one):

* :class:`LocalManifestStore` (``LocalWorld``): upstream's file,
  ``<dataDir>/outer-loops/{outerLoopId}.json``, replaced atomically (written to a temporary
  name, fsynced, renamed, the folder fsynced) while an exclusive ``flock`` on the
  ``outer-loops`` folder is held; the etag is the sha256 of the file's bytes.
* :class:`~little_dist.outer_loop.redis_s3.RedisS3ManifestStore` (``RedisS3World``): a
  Redis hash changed by one Lua script (the etag is a revision that only grows), each
  revision mirrored to an immutable S3 object.
* :class:`MemoryManifestStore` (``MemoryWorld``, unit tests): a dict under a lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from little_dist.errors import ConflictError, InvalidInputError, StorageUnavailableError
from little_dist.outer_loop.manifest import (
    OuterLoopManifest,
    manifest_text,
    parse_manifest_text,
    validate_outer_loop_id,
)
from little_dist.world.base import World
from little_dist.world.extras import SharesStorage, chosen_store

__all__ = [
    "LocalManifestStore",
    "ManifestConflictError",
    "ManifestStore",
    "MemoryManifestStore",
    "StoredManifest",
    "manifest_store_for",
]


class ManifestConflictError(ConflictError):
    """The manifest changed since the writer read it: another process advanced the loop."""

    def __init__(self, outer_loop_id: str) -> None:
        super().__init__(
            f"Outer loop {outer_loop_id!r} was changed by another writer since it was read "
            "(is it running in another process?); nothing was written"
        )
        self.outer_loop_id = outer_loop_id


@dataclass(frozen=True)
class StoredManifest:
    """A manifest as stored, and the etag a write made from it names."""

    manifest: OuterLoopManifest
    etag: str


class ManifestStore(Protocol):
    """The outer-loop manifests of one World (see the module docstring)."""

    def read(self, outer_loop_id: str) -> StoredManifest | None:
        """The stored manifest, ``None`` when the loop has none."""
        ...

    def write(self, manifest: OuterLoopManifest, *, expected: str | None) -> str:
        """Store ``manifest`` if the stored one's etag is ``expected`` (``None``: none is
        stored); its new etag. :class:`ManifestConflictError` otherwise."""
        ...


def _etag(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class LocalManifestStore:
    """Manifests under ``data_dir/outer-loops`` (see the module docstring)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.root = Path(data_dir) / "outer-loops"

    def path(self, outer_loop_id: str) -> Path:
        """Upstream's manifest file of ``outer_loop_id``."""
        return self.root / f"{validate_outer_loop_id(outer_loop_id)}.json"

    def read(self, outer_loop_id: str) -> StoredManifest | None:
        path = self.path(outer_loop_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StorageUnavailableError(f"Cannot read {path}: {error}") from error
        return self._parse(path, data)

    def write(self, manifest: OuterLoopManifest, *, expected: str | None) -> str:
        path = self.path(manifest.outer_loop_id)
        data = manifest_text(manifest).encode("utf-8")
        with self._locked(manifest.outer_loop_id):
            try:
                current: str | None = _etag(path.read_bytes())
            except FileNotFoundError:
                current = None
            if current != expected:
                raise ManifestConflictError(manifest.outer_loop_id)
            temporary = path.with_name(f"{path.name}.tmp")
            try:
                with temporary.open("wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temporary, path)
                _sync_folder(self.root)
            except OSError as error:
                with suppress(OSError):
                    temporary.unlink()
                raise StorageUnavailableError(f"Cannot write {path}: {error}") from error
        return _etag(data)

    @contextmanager
    def _locked(self, outer_loop_id: str) -> Iterator[None]:
        # The folder itself is the lock (flock on its descriptor): no lock files beside the
        # manifests, which stay upstream's one file per loop. Writes are a few per cycle.
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.root, os.O_RDONLY)
        except OSError as error:
            raise StorageUnavailableError(f"Cannot lock {self.root}: {error}") from error
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # closing the descriptor releases the lock

    @staticmethod
    def _parse(path: Path, data: bytes) -> StoredManifest:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidInputError(f"{path}: not UTF-8 text") from error
        return StoredManifest(parse_manifest_text(text, str(path)), _etag(data))


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class MemoryManifestStore:
    """Manifests in this process's memory (``MemoryWorld``); the etag is a revision."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, int]] = {}

    def read(self, outer_loop_id: str) -> StoredManifest | None:
        validate_outer_loop_id(outer_loop_id)
        with self._lock:
            held = self._held.get(outer_loop_id)
        if held is None:
            return None
        text, revision = held
        return StoredManifest(
            parse_manifest_text(text, f"outer loop {outer_loop_id}"), str(revision)
        )

    def write(self, manifest: OuterLoopManifest, *, expected: str | None) -> str:
        loop_id = validate_outer_loop_id(manifest.outer_loop_id)
        text = manifest_text(manifest)
        with self._lock:
            held = self._held.get(loop_id)
            current = None if held is None else str(held[1])
            if current != expected:
                raise ManifestConflictError(loop_id)
            revision = 1 if held is None else held[1] + 1
            self._held[loop_id] = (text, revision)
        return str(revision)


def manifest_store_for(world: World) -> ManifestStore:
    """The outer-loop manifests of ``world``: on its Redis and bucket when it lends them
    (``RedisS3World.shared_storage()``), its data directory's (``LocalWorld``), or a
    store living as long as a ``MemoryWorld``; :class:`InvalidInputError` otherwise (the
    choice is :func:`~little_dist.world.extras.chosen_store`'s)."""
    store: ManifestStore = chosen_store(
        world,
        what="outer-loop manifests",
        own=(lambda: _on_shared_storage(world)) if isinstance(world, SharesStorage) else None,
        in_data_dir=LocalManifestStore,
        in_process=MemoryManifestStore,
    )
    return store


def _on_shared_storage(world: SharesStorage) -> ManifestStore:
    from little_dist.outer_loop.redis_s3 import RedisS3ManifestStore

    shared = world.shared_storage()
    return RedisS3ManifestStore(
        shared.redis, shared.s3, key_prefix=shared.key_prefix, s3_prefix=shared.s3_prefix
    )
