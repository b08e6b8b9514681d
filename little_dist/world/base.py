"""The ``World`` protocol: where runs keep their event logs, artifacts, leases and versions.

A world is the only stateful thing the engine talks to. Implementations:

* ``LocalWorld`` (``little_dist.world.local``): SQLite in WAL mode plus files under a data
  directory; the embedded default, safe for several processes on one machine.
* ``RedisS3World`` (``little_dist.world.redis_s3``): Redis Streams for events and leases, S3
  for artifacts and archived logs; the fleet's world.
* ``MemoryWorld`` (``little_dist.world.in_process``): one process, for unit tests.

This protocol is what every world does. What only some do (archives, version parts, a
start in one round trip, answers to submissions, stores of their own) is a named optional
protocol in :mod:`little_dist.world.extras`, asked once per world with ``isinstance``.

Guarantees every implementation keeps (checked by one shared conformance suite):

* Appends to one run are serialized: sequences are 1..N, contiguous, none lost or doubled,
  whatever the number of concurrent writers and processes.
* ``expected_sequence`` is optimistic concurrency: the append lands only if the run's last
  sequence is exactly that number, else :class:`SequenceConflictError`.
* An ``occurrence_id`` makes an append idempotent: if the run already has an event with that
  occurrence id, that event is returned and nothing is written (even when
  ``expected_sequence`` is stale: the fact is already recorded).
* A ``fence`` makes an append conditional on a lease: it lands only if the lease named by the
  fence is currently held with exactly that token (not expired, not taken over), and by the
  fence's holder when it names one, else :class:`~little_dist.errors.LeaseLostError`. The
  check and the append are atomic.
* Lease tokens for one key only grow: a newer holder always has a larger token.
* Artifacts are immutable and content-addressed: the same bytes are stored once.
* Workflow versions are immutable: registering a different document under an existing id
  raises :class:`~little_dist.errors.ConflictError`; the same document is a no-op.
* The version index (definition hash -> version ids) is append-only: indexing a pair again
  is a no-op, and ids come back oldest first.
* The end of a run seals its log: once it holds ``RunCompleted`` or ``RunFailed``, an append
  that would add an event of the run's own (any type but the facts written onto a run after
  it of :data:`~little_dist.events.AFTER_END_EVENT_TYPES`: observers' side-channel
  observations, an outer loop's ``OuterLoopCycleCompleted`` and its supervisor's hold) raises
  :class:`~little_dist.errors.RunEndedError` and writes nothing to the log: a step that was
  in flight when the run ended commits nothing after the end. Of what it
  refused, the events that carry a model call's usage
  (:data:`~little_dist.events.USAGE_EVENT_TYPES`) are kept beside the log, in the run's late
  record (:meth:`World.late_events`; once per occurrence id), so that the report still counts
  what was paid for.
* A run id's submission is claimed once: of concurrent :meth:`World.claim_submission` calls
  for one run id, exactly one records its input hash, and every call answers that hash.

Order of the checks on an append (single or batch), all atomic with the write:

1. the run id is validated (:class:`~little_dist.ids.InvalidIdError`) and the payloads are
   encoded (canonical JSON) before storage is touched;
2. inputs whose occurrence id is already recorded resolve to the recorded event; when every
   input does, those events are returned and nothing else is checked or written;
3. the run's end (:class:`~little_dist.errors.RunEndedError`, keeping the late record), then
   the fence, then ``expected_sequence``, are checked against the run as it is;
4. the new events get sequences ``last + 1 ...``, ids from
   :func:`~little_dist.ids.event_id_for`, a ``recordedAt`` from the world's clock, and their
   payload as read back from its canonical JSON (keys sorted, ``1.0`` -> ``1``).

Lease times (``expires_at``) come from the world's clock (``clock``, default
:func:`time.time`), which tests inject to expire leases without sleeping.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from little_dist.errors import ConflictError, LittleError, NotFoundError
from little_dist.events import (
    Event,
    EventInput,
)
from little_dist.world.fleet_keys import run_lease_key
from little_dist.world.process_mark import process_mark

__all__ = [
    "ArtifactCorruptError",
    "ArtifactEncoding",
    "ArtifactInput",
    "ArtifactManifest",
    "ArtifactNotFoundError",
    "ArtifactRead",
    "Fence",
    "LateEvent",
    "Lease",
    "LeaseRequest",
    "RunNotFoundError",
    "SequenceConflictError",
    "UndecodedEvent",
    "VersionNotFoundError",
    "World",
    "run_lease_key",
    "unique_holder",
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


class ArtifactCorruptError(LittleError):
    """Stored artifact bytes or a manifest that do not match what was written (hash, size)."""

    def __init__(self, ref: str, detail: str) -> None:
        super().__init__(f"Artifact is corrupt: {ref}: {detail}")
        self.ref = ref
        self.detail = detail


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


class UndecodedEvent(NamedTuple):
    """An event :meth:`World.list_events_partly` read without making an :class:`Event` of
    it: enough to fold it. ``payload`` is ``None`` when it was not parsed (a type the
    reader does not fold: the fold only counts it), else the parsed payload (a folded type:
    the fold reads it, and no event id is derived nor model built for it); :meth:`decode`
    gives the full event."""

    run_id: str
    sequence: int
    type: str
    recorded_at: str
    decoder: Callable[[], Event]
    payload: dict[str, Any] | None = None

    def decode(self) -> Event:
        return self.decoder()

    def envelope(self) -> dict[str, Any]:
        """The event as a fold takes it: the envelope, with the parsed payload (empty when
        it was not parsed)."""
        return {
            "runId": self.run_id,
            "sequence": self.sequence,
            "type": self.type,
            "payload": {} if self.payload is None else self.payload,
            "recordedAt": self.recorded_at,
        }


class LateEvent(NamedTuple):
    """An event a run's log refused because the run had ended, kept for its model usage (see
    :meth:`World.late_events`): never part of the log, so it has no sequence."""

    run_id: str
    type: str
    payload: dict[str, Any]
    recorded_at: str
    occurrence_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "runId": self.run_id,
            "type": self.type,
            "recordedAt": self.recorded_at,
            "payload": self.payload,
        }
        if self.occurrence_id is not None:
            data["occurrenceId"] = self.occurrence_id
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LateEvent:
        return cls(
            run_id=data["runId"],
            type=data["type"],
            payload=data["payload"],
            recorded_at=data["recordedAt"],
            occurrence_id=data.get("occurrenceId"),
        )


@dataclass(frozen=True)
class Lease:
    """A held lease. ``token`` is the fencing token; ``expires_at`` is epoch seconds."""

    key: str
    holder: str
    token: int
    expires_at: float

    @property
    def fence(self) -> Fence:
        return Fence(self.key, self.token, self.holder)


@dataclass(frozen=True)
class Fence:
    """A condition on a write: the lease ``key`` must be held with exactly ``token`` (and,
    when ``holder`` is given, by that holder).

    Tokens only grow while the store keeps its writes, but a store that loses its last
    writes (Redis after a host crash under ``appendfsync everysec``, SQLite after a power
    cut) may hand a lost token out again, to another holder: the holder that got it first
    still has it and would pass a check of the token alone. :attr:`Lease.fence` names the
    holder, so its commit is refused once the token is another's.
    """

    key: str
    token: int
    holder: str | None = None


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
        signal: bool = True,
        release: bool = False,
    ) -> list[Event]:
        """Append several events atomically (all or none), in order.

        Events whose occurrence id is already recorded are not written again; the returned
        list holds, in input order, the new or previously recorded event for each input. An
        occurrence id repeated inside one batch is recorded once (later inputs get the event
        of the first). ``expected_sequence`` and ``fence`` guard the batch as a whole: on a
        conflict or a lost lease nothing of it is written. ``signal=False`` keeps a world
        that signals a scheduler on appends (``RedisS3World(signal_stream=...)``) from
        signalling this one: its writer advances the run itself. Other worlds ignore it.
        ``release=True`` (with ``fence``) releases the fence's lease when the call is over,
        whatever it wrote or raised (an attempt's commit: one round trip on Redis).
        """
        ...

    def append_batch_then_acquire(
        self,
        run_id: str,
        events: Sequence[EventInput],
        lease: LeaseRequest,
        *,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> tuple[list[Event], Lease | None]:
        """:meth:`append_batch`, then :meth:`acquire_lease` of ``lease``, in one round trip
        where the world can (an attempt's commit taking the next step's lease). If the
        append raises, the lease is not left held."""
        ...

    def append_batch_with_artifacts(
        self,
        run_id: str,
        events: Sequence[EventInput],
        artifacts: Sequence[ArtifactInput],
        *,
        fence: Fence | None = None,
        signal: bool = True,
        release: bool = False,
    ) -> list[Event]:
        """:meth:`put_artifact` of each of ``artifacts``, then :meth:`append_batch` of
        ``events`` (which may name them by :func:`~little_dist.world.artifacts.artifact_ref_for`),
        in one round trip where the world can (an attempt's commit with its output): an
        event never names an artifact that was not written first."""
        ...

    def last_sequence(self, run_id: str) -> int:
        """The run's last sequence, 0 for a run with no events."""
        ...

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        """Events with sequence > ``after``, in order. An unknown run gives ``[]``."""
        ...

    def list_events_partly(
        self,
        run_id: str,
        *,
        after: int,
        decode: frozenset[str],
        skip: Collection[int] = (),
    ) -> list[Event | UndecodedEvent]:
        """:meth:`list_events` for a reader that needs the payloads of the ``decode``
        types only (a fold): a world may hand events back as :class:`UndecodedEvent`, the
        others without parsing their payloads, which nobody reads, and the ``decode`` ones
        with their payloads parsed but no :class:`Event` made (no id derived). ``skip``:
        sequences the reader holds already (its own appends, past a gap in what it
        folded); left out of the answer."""
        ...

    def follow_partly(
        self, run_id: str, *, after: int = 0, timeout: float | None = None, decode: frozenset[str]
    ) -> Iterator[Event | UndecodedEvent]:
        """:meth:`follow` for a reader that needs the payloads of the ``decode`` types only
        (as :meth:`list_events_partly`)."""
        ...

    def follow(
        self, run_id: str, *, after: int = 0, timeout: float | None = None
    ) -> Iterator[Event]:
        """Yield events with sequence > ``after`` as they arrive, in order.

        The iterator ends once no new event arrived for ``timeout`` seconds (never when
        ``None``); callers stop it early by breaking out of the loop.
        """
        ...

    def wait_for_end(self, run_id: str, *, timeout: float | None = None) -> bool:
        """Block until the run's log holds its ``RunCompleted`` or ``RunFailed`` (``True``)
        or ``timeout`` seconds pass without it (``False``; ``None``: no limit).

        What a caller that wants only the outcome uses instead of :meth:`follow`: a world
        may wake it on the end alone, without reading every event as it comes.
        """
        ...

    def list_run_ids(self) -> list[str]: ...

    def first_and_last_events(self, run_id: str) -> tuple[Event, Event] | None:
        """The run's first and last events (the same event for a run of one), ``None`` for
        a run with no events: what a list of runs shows (workflow, status, start, end) at
        the cost of two events, not the whole log."""
        ...

    def late_events(self, run_id: str) -> list[LateEvent]:
        """The run's late record: the events carrying model usage that appends refused
        because the run had ended (see the module docstring), oldest first; ``[]`` for most
        runs. Whoever reports a run's cost adds them to the log's."""
        ...

    # -- submissions ----------------------------------------------------------------------
    def claim_submission(self, run_id: str, input_hash: str) -> str:
        """Record ``input_hash`` (``sha256:`` + 64 hex) as what ``run_id`` is submitted with,
        unless a hash is recorded already; the recorded hash (``input_hash`` when this call
        was first). One atomic step: of concurrent submitters of one run id with different
        inputs, exactly one finds its own hash (the others refuse the submission)."""
        ...

    # -- artifacts ------------------------------------------------------------------------
    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        """Store an artifact (put-if-absent by content); return its manifest."""
        ...

    def get_artifact(self, ref: str, *, run_id: str | None = None) -> ArtifactRead:
        """Read an artifact by ``artifact://art_...`` ref, verifying its hash. ``run_id``:
        the run that wrote it, where the caller knows it (a world may keep the small
        artifacts of an archived run only in its archive).

        :class:`ArtifactNotFoundError` for an unknown ref, :class:`ArtifactCorruptError` when
        the stored bytes do not hash to the manifest's ``sha256``.
        """
        ...

    # -- leases ---------------------------------------------------------------------------
    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        """Take the lease if it is free or expired (or already ours); ``None`` if held.

        Every tenure of a key gets a larger fencing token than the one before it, and the
        first tenure gets token 1: a lease won with token 1 was never held before.
        """
        ...

    def acquire_leases(self, requests: Sequence[LeaseRequest]) -> list[Lease | None]:
        """:meth:`acquire_lease` for each request, in order; a world that can (Redis) takes
        them in one round trip. Each acquire is atomic on its own."""
        ...

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        """Extend a held lease; :class:`LeaseLostError` if it expired or was taken."""
        ...

    def release_lease(self, lease: Lease) -> None:
        """Give the lease up if still held with this token; otherwise do nothing."""
        ...

    # -- workflow versions ----------------------------------------------------------------
    def register_version(self, version_id: str, document: dict[str, Any]) -> None:
        """Store an immutable version (``wfver_...``); same document again is a no-op."""
        ...

    def get_version(self, version_id: str) -> dict[str, Any]:
        """A fresh copy of the stored document; :class:`VersionNotFoundError` if unknown."""
        ...

    def index_version(self, definition_hash: str, version_id: str) -> None:
        """Record that ``version_id`` was compiled from the definition ``definition_hash``.

        Append-only and idempotent: indexing the same pair again changes nothing. The planner
        uses the index to reuse a registered version for a later run of the same definition.
        """
        ...

    def indexed_versions(self, definition_hash: str) -> list[str]:
        """Version ids indexed under ``definition_hash``, oldest first (``[]`` if none)."""
        ...

    def close(self) -> None:
        """Release connections and files; the world is not used afterwards."""
        ...


# -- lease holders (lease names are in little_dist.world.fleet_keys; the defaults and input
# checks the implementations share are in little_dist.world.defaults) ----------------------


# Per process: pid for forked pool children (which copy the counter), a random part for a
# pid reused after a restart. uuid4 per holder cost ~10 us of os.urandom on every attempt.
_HOLDER_NONCE = uuid.uuid4().hex[:8]
_holder_serial = itertools.count(1)


def unique_holder(name: str) -> str:
    """``name`` plus a suffix no other call, in this or any process, gets: the holder of
    a lease taken for one call, so the same process cannot mistake it for another's. It ends
    with the process's mark (:mod:`little_dist.world.process_mark`): a world on one machine
    frees the lease of a holder whose process died at once, not at its expiry."""
    serial = next(_holder_serial)
    return f"{name}:{os.getpid()}.{_HOLDER_NONCE}.{serial:x}{process_mark()}"


@dataclass(frozen=True)
class LeaseRequest:
    """A lease to take: ``acquire_lease(key, holder, ttl_seconds)``."""

    key: str
    holder: str
    ttl_seconds: float
