"""Worlds: where runs keep their event logs, artifacts, leases and workflow versions."""

from __future__ import annotations

from little_dist.world.base import (
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

__all__ = [
    "ArtifactInput",
    "ArtifactManifest",
    "ArtifactNotFoundError",
    "ArtifactRead",
    "Fence",
    "Lease",
    "RunNotFoundError",
    "SequenceConflictError",
    "VersionNotFoundError",
    "World",
]
