"""Which :class:`~little_dist.memory.store.MemoryStore` a World keeps its memory in.

A :class:`~little_dist.world.local.LocalWorld` keeps it under its data directory, a
:class:`~little_dist.world.redis_s3.RedisS3World` in its Redis and bucket (the world's
``shared_storage()``); either way fenced commits are checked against that world's leases.
The process-local ``MemoryWorld`` of unit tests keeps it in a temporary folder that lives as
long as the world object.
"""

from __future__ import annotations

import tempfile
from typing import Any

from little_dist.memory.local import LocalMemoryStore
from little_dist.memory.store import MemoryStore
from little_dist.world.base import World
from little_dist.world.extras import FencesInProcess, SharesStorage, chosen_store

__all__ = ["memory_store_for"]


def memory_store_for(world: World) -> MemoryStore:
    """The memory stores of ``world``; :class:`InvalidInputError` for a World that has none
    (the choice is :func:`~little_dist.world.extras.chosen_store`'s)."""
    store: MemoryStore = chosen_store(
        world,
        what="memory stores",
        own=(lambda: _on_shared_storage(world)) if isinstance(world, SharesStorage) else None,
        in_data_dir=lambda folder: LocalMemoryStore(folder, fenced=_fence_of(world)),
        in_process=lambda: _scratch_store(world),
    )
    return store


def _on_shared_storage(world: SharesStorage) -> MemoryStore:
    from little_dist.memory.redis_s3 import RedisS3MemoryStore

    shared = world.shared_storage()
    return RedisS3MemoryStore(
        shared.redis,
        shared.s3,
        key_prefix=shared.key_prefix,
        s3_prefix=shared.s3_prefix,
        lease_key=shared.lease_key,
        now_ms=shared.now_ms,
    )


def _fence_of(world: World) -> Any:
    """The world's own fencing (a store's commits checked against its leases), if any."""
    return world.while_fenced if isinstance(world, FencesInProcess) else None


class _ScratchStore(LocalMemoryStore):
    """A memory store in a temporary folder that lives as long as the store object."""

    def __init__(self, folder: tempfile.TemporaryDirectory[str], **options: Any) -> None:
        super().__init__(folder.name, **options)
        self._folder = folder


def _scratch_store(world: World) -> LocalMemoryStore:
    folder = tempfile.TemporaryDirectory(prefix="little-memory-")
    return _ScratchStore(folder, fenced=_fence_of(world))
