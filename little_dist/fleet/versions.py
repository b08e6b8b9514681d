"""Compiled workflow versions by id, kept by every fleet process (they never change), and a
version split in two: what every run of a workflow shares, and what binds one run's input.

A compiled version's id binds the run's input (upstream's lock hashes the input into it), so
no two runs of a workflow with different inputs share one. Stored whole, every run cost a new
~7 KB document in S3, put by the submitter and read back by the scheduler and a worker. The
fleet stores it in two parts instead (:func:`split_version`):

* the **shared part**: the LWIR and the lock's fields that do not depend on the input (the
  definition snapshot, the capability manifest, the model slots and tools, their hashes),
  stored once by the digest of its canonical JSON (``world.put_version_part``) and cached by
  every process (:class:`VersionCache`);
* the **binding**: the version's id and hash, the part's digest and the lock's fields that do
  depend on the input (request and input hashes, the input's structure, the validation
  hash); a few hundred bytes, carried by the run's ``WorkflowVersionRegistered`` event
  (payload field ``binding``), so it lives with the run: its log, its archive.

:func:`join_version` puts them back together through
:meth:`~little_dist.compiler.WorkflowVersion.from_json`, which recomputes every hash: the ids
are upstream's, unchanged, and a part that does not fit the binding is refused.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, Final

from little_dist.canonical import sha256_hex_text
from little_dist.compiler import WorkflowVersion
from little_dist.compiler.lock import (
    SHARED_LOCK_KEYS,
    shared_part_text,
)
from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.lru import LruCache
from little_dist.world.base import World
from little_dist.world.extras import extras_of

__all__ = [
    "BINDING_FIELD",
    "SHARED_LOCK_KEYS",
    "VersionCache",
    "join_version",
    "split_version",
    "workflow_name_of_part",
]

#: The ``WorkflowVersionRegistered`` payload field that carries a version's binding.
BINDING_FIELD: Final = "binding"


def split_version(
    version: WorkflowVersion, shared: tuple[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """``(shared part, binding)``: the part as canonical JSON text (stored by its digest,
    ``sha256:`` + hex, which the binding's ``part`` names) and the binding (a JSON object).
    ``shared``: the part's text and digest when the caller has them (a fixed plan's
    template: the same for every input), instead of printed again."""
    lock = dict(version.lock)
    if shared is None:
        text = shared_part_text(
            canonical=version.canonical_json,
            lwir_hash=version.lwir_hash,
            lwir_version_id=version.lwir_version_id,
            canonicalizer=version.canonicalizer,
            lock=lock,
        )
        shared = (text, "sha256:" + sha256_hex_text(text))
    binding = {
        "id": version.id,
        "hash": version.hash,
        "part": shared[1],
        "lock": {key: value for key, value in lock.items() if key not in SHARED_LOCK_KEYS},
    }
    return shared[0], binding


def workflow_name_of_part(world: World, binding: object) -> str | None:
    """The workflow name (``lwir.metadata.name``) of the shared part a binding names, or None
    when the world keeps no parts or the part is not found."""
    part = binding.get("part") if isinstance(binding, Mapping) else None
    parts = extras_of(world).version_parts
    if not isinstance(part, str) or parts is None:
        return None
    try:
        shared = json.loads(parts.get_version_part(part))
        name = json.loads(shared["canonicalJson"]).get("metadata", {}).get("name")
    except (LookupError, ValueError, TypeError, AttributeError, NotFoundError):
        return None
    return name if isinstance(name, str) else None


def join_version(
    shared: Mapping[str, Any],
    binding: Mapping[str, Any],
    *,
    validate: bool = True,
    like: WorkflowVersion | None = None,
) -> WorkflowVersion:
    """The version a shared part and a binding make; every hash recomputed (raises
    :class:`~little_dist.compiler.WorkflowVersionMismatchError` when they do not fit).
    ``like``: a version joined from ``shared`` before, whose checked LWIR the new one
    shares (:meth:`~little_dist.compiler.WorkflowVersion.sharing_lwir`): one LWIR in memory
    per shared part, however many runs' versions a process holds."""
    canonical = shared.get("canonicalJson")
    shared_lock, own_lock = shared.get("lock"), binding.get("lock")
    if not (
        isinstance(canonical, str)
        and isinstance(shared_lock, Mapping)
        and isinstance(own_lock, Mapping)
    ):
        raise InvalidInputError("A workflow version part or binding is not well formed")
    fields = {
        "id": binding.get("id"),
        "hash": binding.get("hash"),
        "canonicalizer": shared.get("canonicalizer"),
        "canonicalJson": canonical,
        "lwirVersionId": shared.get("lwirVersionId"),
        "lwirHash": shared.get("lwirHash"),
        "lock": {**shared_lock, **own_lock},
    }
    if like is not None and like.canonical_json == canonical:
        return WorkflowVersion.sharing_lwir(fields, of=like)
    return WorkflowVersion.from_json({**fields, "lwir": json.loads(canonical)}, validate=validate)


class VersionCache:
    """Compiled workflow versions by id (they are immutable), bounded by count and by the
    length of their canonical LWIR (``max_bytes``: ``LITTLE_VERSION_CACHE_BYTES``), and the
    shared parts versions are joined from (:func:`join_version`), thread-safe."""

    def __init__(self, size: int = 256, max_bytes: int | None = None) -> None:
        self._size = size
        self._versions: LruCache[str, WorkflowVersion] = LruCache(
            size, max_bytes, weigh=_version_bytes
        )
        # Shared parts by digest, parsed, with the first version joined from each: its LWIR,
        # validated once (when the part was first read), is the one the others share.
        self._parts: LruCache[str, tuple[dict[str, Any], WorkflowVersion]] = LruCache(
            64, max_bytes, weigh=_part_bytes
        )
        self._lock = threading.Lock()

    def put(self, version: WorkflowVersion) -> None:
        """Remember a version the caller has in hand (no read of the world later)."""
        with self._lock:
            self._versions[version.id] = version

    def get(
        self, world: World, version_id: str, binding: Mapping[str, Any] | None = None
    ) -> WorkflowVersion:
        """The version ``version_id``; with its ``binding`` (from the run's log), joined from
        the binding and its shared part (read from the world once per process), otherwise
        read whole (``world.get_version``)."""
        with self._lock:
            found = self._versions.get(version_id)
            if found is not None:
                self._versions.move_to_end(version_id)
                return found
        if binding is not None and binding.get("id") == version_id:
            version = self._joined(world, binding)
        else:
            version = WorkflowVersion.from_json(world.get_version(version_id))
        with self._lock:
            self._versions[version_id] = version
        return version

    def _joined(self, world: World, binding: Mapping[str, Any]) -> WorkflowVersion:
        ref = binding.get("part")
        if not isinstance(ref, str):
            raise InvalidInputError("A workflow version binding names no shared part")
        with self._lock:
            known = self._parts.get(ref)
        if known is not None:  # its LWIR was validated when it was read
            part, first = known
            return join_version(part, binding, validate=False, like=first)
        parts = extras_of(world).version_parts
        if parts is None:
            raise InvalidInputError(
                f"{type(world).__name__} keeps no workflow version parts (need {ref})"
            )
        part = json.loads(parts.get_version_part(ref))
        version = join_version(part, binding)
        with self._lock:
            self._parts[ref] = (part, version)
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


def _part_bytes(known: tuple[dict[str, Any], WorkflowVersion]) -> int:
    return len(str(known[0].get("canonicalJson", ""))) + 4096
