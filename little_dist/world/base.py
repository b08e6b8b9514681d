"""The ``World`` protocol: where runs keep their event logs, artifacts, leases and versions.

A world is the only stateful thing the engine talks to. Implementations:

* ``LocalWorld`` (``little_dist.world.local``): SQLite in WAL mode plus files under a data
  directory; the embedded default, safe for several processes on one machine.
* ``RedisS3World`` (``little_dist.world.redis_s3``): Redis Streams for events and leases, S3
  for artifacts and archived logs; the fleet's world.
* ``MemoryWorld`` (``little_dist.world.memory``): one process, for unit tests.

Guarantees every implementation keeps (checked by one shared conformance suite):

* Appends to one run are serialized: sequences are 1..N, contiguous, none lost or doubled,
  whatever the number of concurrent writers and processes.
* ``expected_sequence`` is optimistic concurrency: the append lands only if the run's last
  sequence is exactly that number, else :class:`SequenceConflictError`.
* An ``occurrence_id`` makes an append idempotent: if the run already has an event with that
  occurrence id, that event is returned and nothing is written (even when
  ``expected_sequence`` is stale: the fact is already recorded).
* A ``fence`` makes an append conditional on a lease: it lands only if the lease named by the
  fence is currently held with exactly that token (not expired, not taken over), else
  :class:`~little_dist.errors.LeaseLostError`. The check and the append are atomic.
* Lease tokens for one key only grow: a newer holder always has a larger token.
* Artifacts are immutable and content-addressed: the same bytes are stored once.
* Workflow versions are immutable: registering a different document under an existing id
  raises :class:`~little_dist.errors.ConflictError`; the same document is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from little_dist.errors import ConflictError, NotFoundError
from little_dist.events import Event, EventInput

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

ArtifactEncoding = Literal["json", "utf-8", "binary"]


class SequenceConflictError(ConflictError):
    """The run's last sequence was not the one the writer expected."""

    def __init__(self, run_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"Sequence conflict on {run_id}: expected last sequence {expected}, found {actual}"
        )
        self.run_id = run_id
        self.expected = expected
        self.actual = actual


class RunNotFoundError(NotFoundError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run not found: {run_id}")
        self.run_id = run_id


class ArtifactNotFoundError(NotFoundError):
    def __init__(self, ref: str) -> None:
        super().__init__(f"Artifact not found: {ref}")
        self.ref = ref


class VersionNotFoundError(NotFoundError):
    def __init__(self, version_id: str) -> None:
        super().__init__(f"Workflow version not found: {version_id}")
        self.version_id = version_id


@dataclass(frozen=True)
class Lease:
    """A held lease. ``token`` is the fencing token; ``expires_at`` is epoch seconds."""

    key: str
    holder: str
    token: int
    expires_at: float

    @property
    def fence(self) -> Fence:
        return Fence(self.key, self.token)


@dataclass(frozen=True)
class Fence:
    """A condition on a write: the lease ``key`` must be held with exactly ``token``."""

    key: str
    token: int


@dataclass(frozen=True)
class ArtifactInput:
    """An artifact to store. ``payload``: bytes (binary), str (utf-8) or a JSON value (json)."""

    run_id: str
    name: str
    payload: Any
    content_type: str = "application/json"
    step_path: str | None = None


@dataclass(frozen=True)
class ArtifactManifest:
    """Upstream's manifest; ``to_json`` gives its JSON shape (``stepPath`` only when set)."""

    artifact_id: str
    artifact_ref: str
    run_id: str
    name: str
    content_type: str
    encoding: ArtifactEncoding
    sha256: str  # "sha256:<hex>" of the stored bytes
    size_bytes: int
    created_at: str
    step_path: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "artifactId": self.artifact_id,
            "artifactRef": self.artifact_ref,
            "runId": self.run_id,
            "name": self.name,
            "contentType": self.content_type,
            "encoding": self.encoding,
            "sha256": self.sha256,
            "sizeBytes": self.size_bytes,
            "createdAt": self.created_at,
        }
        if self.step_path is not None:
            data["stepPath"] = self.step_path
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArtifactManifest:
        return cls(
            artifact_id=data["artifactId"],
            artifact_ref=data["artifactRef"],
            run_id=data["runId"],
            name=data["name"],
            content_type=data["contentType"],
            encoding=data["encoding"],
            sha256=data["sha256"],
            size_bytes=data["sizeBytes"],
            created_at=data["createdAt"],
            step_path=data.get("stepPath"),
        )


@dataclass(frozen=True)
class ArtifactRead:
    manifest: ArtifactManifest
    payload: Any  # decoded per manifest.encoding: JSON value, str, or bytes


@runtime_checkable
class World(Protocol):
    """Storage for runs. All methods are synchronous and thread-safe."""

    # -- events ---------------------------------------------------------------------------
    def append(
        self,
        run_id: str,
        event: EventInput,
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> Event:
        """Append one event; see the module docstring for the guarantees."""
        ...

    def append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None = None,
        fence: Fence | None = None,
    ) -> list[Event]:
        """Append several events atomically (all or none), in order.

        Events whose occurrence id is already recorded are not written again; the returned
        list holds, in input order, the new or previously recorded event for each input.
        """
        ...

    def last_sequence(self, run_id: str) -> int:
        """The run's last sequence, 0 for a run with no events."""
        ...

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events with sequence > ``after``, in order. An unknown run gives ``[]``."""
        ...

    def follow(
        self, run_id: str, *, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        """Yield events with sequence > ``after`` as they arrive, in order.

        The iterator ends once no new event arrived for ``timeout`` seconds (never when
        ``None``); callers stop it early by breaking out of the loop.
        """
        ...

    def list_run_ids(self) -> list[str]: ...

    # -- artifacts ------------------------------------------------------------------------
    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        """Store an artifact (put-if-absent by content); return its manifest."""
        ...

    def get_artifact(self, ref: str) -> ArtifactRead:
        """Read an artifact by ``artifact://art_...`` ref, verifying its hash."""
        ...

    # -- leases ---------------------------------------------------------------------------
    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        """Take the lease if it is free or expired (or already ours); ``None`` if held."""
        ...

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        """Extend a held lease; :class:`LeaseLostError` if it expired or was taken."""
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up if still held with this token; otherwise do nothing."""
        ...

    # -- workflow versions ----------------------------------------------------------------
    def register_version(self, version_id: str, document: dict[str, Any]) -> None: ...

    def get_version(self, version_id: str) -> dict[str, Any]: ...

    def close(self) -> None: ...
