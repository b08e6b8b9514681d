"""Which :class:`~little_dist.memory.store.MemoryStore` a World keeps its memory in.

A :class:`~little_dist.world.local.LocalWorld` keeps it under its data directory, a
:class:`~little_dist.world.redis_s3.RedisS3World` in its Redis and bucket (each world's
``memory_store()``, whose fenced commits are checked against that world's leases); the
process-local ``MemoryWorld`` of unit tests in a temporary folder that lives as long as the
world object.
"""

from __future__ import annotations

import tempfile
import weakref
from typing import Any

from little_dist.errors import InvalidInputError
from little_dist.memory.local import LocalMemoryStore
from little_dist.memory.store import MemoryStore
from little_dist.world.base import World

__all__ = ["memory_store_for"]

_scratch_stores: weakref.WeakKeyDictionary[Any, tuple[Any, LocalMemoryStore]] = (
    weakref.WeakKeyDictionary()
)


def memory_store_for(world: World) -> MemoryStore:
    """The memory stores of ``world``; :class:`InvalidInputError` for a World that has none."""
    made = getattr(world, "memory_store", None)
    if callable(made):
        store: MemoryStore = made()
        return store
    data_dir = getattr(world, "data_dir", None)
    if data_dir is not None:
        return LocalMemoryStore(data_dir)
    from little_dist.world.memory import MemoryWorld

    if isinstance(world, MemoryWorld):
        held = _scratch_stores.get(world)
        if held is None:
            folder = tempfile.TemporaryDirectory(prefix="little-memory-")
            held = (folder, LocalMemoryStore(folder.name, fenced=world.while_fenced))
            _scratch_stores[world] = held
        return held[1]
    raise InvalidInputError(f"{type(world).__name__} keeps no memory stores")
