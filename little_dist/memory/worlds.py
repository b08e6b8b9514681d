"""Which :class:`~little_dist.memory.store.MemoryStore` a World keeps its memory in.

A :class:`~little_dist.world.local.LocalWorld` keeps it under its data directory, a
:class:`~little_dist.world.redis_s3.RedisS3World` in its Redis and bucket (each world's
``memory_store()``, whose fenced commits are checked against that world's leases); the
process-local ``MemoryWorld`` of unit tests in a temporary folder that lives as long as the
world object.
"""

from __future__ import annotations

import tempfile
from typing import Any

from little_dist.memory.local import LocalMemoryStore
from little_dist.memory.store import MemoryStore
from little_dist.world.base import World
from little_dist.world.extras import FencesInProcess, KeepsMemory, chosen_store

__all__ = ["memory_store_for"]


def memory_store_for(world: World) -> MemoryStore:
    """The memory stores of ``world``; :class:`InvalidInputError` for a World that has none
    (the choice is :func:`~little_dist.world.extras.chosen_store`'s)."""
    store: MemoryStore = chosen_store(
        world,
        what="memory stores",
        own=world.memory_store if isinstance(world, KeepsMemory) else None,
        in_data_dir=LocalMemoryStore,
        in_process=lambda: _scratch_store(world),
    )
    return store


class _ScratchStore(LocalMemoryStore):
    """A memory store in a temporary folder that lives as long as the store object."""

    def __init__(self, folder: tempfile.TemporaryDirectory[str], **options: Any) -> None:
        super().__init__(folder.name, **options)
        self._folder = folder


def _scratch_store(world: World) -> LocalMemoryStore:
    fenced = world.while_fenced if isinstance(world, FencesInProcess) else None
    folder = tempfile.TemporaryDirectory(prefix="little-memory-")
    return _ScratchStore(folder, fenced=fenced)
