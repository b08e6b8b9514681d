"""Memory stores: files a workflow keeps across runs, mounted under ``/mnt/memory/``.

:mod:`~little_dist.memory.layout` says which stores a step sees and how (upstream's mount
paths and modes, pure); :mod:`~little_dist.memory.store` is the storage protocol and its
compare-and-set rules, kept by :mod:`~little_dist.memory.local` (LocalWorld: files and an
SQLite index) and :mod:`~little_dist.memory.redis_s3` (RedisS3World: S3 blobs and a Redis
index); :func:`~little_dist.memory.worlds.memory_store_for` picks one for a World;
:mod:`~little_dist.memory.attempt` makes an attempt's mounts and publishes its writes at
commit.
"""

from little_dist.memory.attempt import AttemptMemory, MemoryLimitError, Published
from little_dist.memory.layout import (
    MemoryConfig,
    MemoryMountSpec,
    available_workflow_memory_mounts,
    memory_config,
    memory_store_key,
    orchestrator_memory_mounts,
    pipeline_memory_mounts,
    workflow_memory_mounts,
    workflow_store_id,
)
from little_dist.memory.store import (
    Applied,
    MemoryChange,
    MemoryEntry,
    MemoryNotFoundError,
    MemoryPathError,
    MemoryStore,
    check_memory_path,
    conflict_path,
)
from little_dist.memory.worlds import memory_store_for

__all__ = [
    "Applied",
    "AttemptMemory",
    "MemoryChange",
    "MemoryConfig",
    "MemoryEntry",
    "MemoryLimitError",
    "MemoryMountSpec",
    "MemoryNotFoundError",
    "MemoryPathError",
    "MemoryStore",
    "Published",
    "available_workflow_memory_mounts",
    "check_memory_path",
    "conflict_path",
    "memory_config",
    "memory_store_for",
    "memory_store_key",
    "orchestrator_memory_mounts",
    "pipeline_memory_mounts",
    "workflow_memory_mounts",
    "workflow_store_id",
]
