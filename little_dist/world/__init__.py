"""Worlds: where runs keep their event logs, artifacts, leases and workflow versions.

``open_world(spec)`` opens one from a spec (a directory, ``local:PATH``, ``memory:`` or a
``redis://`` URL); ``LocalWorld`` and ``MemoryWorld`` are here too. ``RedisS3World`` lives
in :mod:`little_dist.world.redis_s3` and is imported only when asked for, so that using a
local world never imports redis or boto3.
"""

from __future__ import annotations

from little_dist.world.base import (
    ArtifactCorruptError,
    ArtifactInput,
    ArtifactManifest,
    ArtifactNotFoundError,
    ArtifactRead,
    Fence,
    Lease,
    RunNotFoundError,
    SequenceConflictError,
    VersionNotFoundError,
    World,
)
from little_dist.world.factory import open_world
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld

__all__ = [
    "ArtifactCorruptError",
    "ArtifactInput",
    "ArtifactManifest",
    "ArtifactNotFoundError",
    "ArtifactRead",
    "Fence",
    "Lease",
    "LocalWorld",
    "MemoryWorld",
    "RunNotFoundError",
    "SequenceConflictError",
    "VersionNotFoundError",
    "World",
    "open_world",
]
