"""Compiled workflow versions by id, kept by every fleet process (they never change)."""

from __future__ import annotations

import threading

from little_dist.compiler import WorkflowVersion
from little_dist.lru import LruCache
from little_dist.world.base import World

__all__ = ["VersionCache"]


class VersionCache:
    """Compiled workflow versions by id (they are immutable), bounded by count and by the
    length of their canonical LWIR (``max_bytes``: ``LITTLE_VERSION_CACHE_BYTES``),
    thread-safe."""

    def __init__(self, size: int = 256, max_bytes: int | None = None) -> None:
        self._size = size
        self._versions: LruCache[str, WorkflowVersion] = LruCache(
            size, max_bytes, weigh=_version_bytes
        )
        self._lock = threading.Lock()

    def put(self, version: WorkflowVersion) -> None:
        """Remember a version the caller has in hand (no read of the world later)."""
        with self._lock:
            self._versions[version.id] = version

    def get(self, world: World, version_id: str) -> WorkflowVersion:
        with self._lock:
            found = self._versions.get(version_id)
            if found is not None:
                self._versions.move_to_end(version_id)
                return found
        version = WorkflowVersion.from_json(world.get_version(version_id))
        with self._lock:
            self._versions[version_id] = version
        return version

    def __len__(self) -> int:
        with self._lock:
            return len(self._versions)

    def __contains__(self, version_id: object) -> bool:
        with self._lock:
            return version_id in self._versions

    @property
    def max_bytes(self) -> int | None:
        """The bound on the versions' total canonical LWIR length (``None``: count only)."""
        return self._versions.max_weight


def _version_bytes(version: WorkflowVersion) -> int:
    return len(version.canonical_json)
