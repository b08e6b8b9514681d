"""``MemoryWorld``: the whole world in one process's memory, for unit tests.

Thread-safe (one lock guards everything), never shared between processes, gone when the
process ends. It keeps every guarantee of :class:`~little_dist.world.base.World`, checked
by the same conformance suite as the durable worlds.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from little_dist.canonical import canonical_json
from little_dist.errors import ConflictError, InvalidInputError, LeaseLostError, RunEndedError
from little_dist.events import RUN_END_EVENT_TYPES, Event, EventInput
from little_dist.ids import artifact_id_from_ref, validate_run_id
from little_dist.occurrences import RUN_END
from little_dist.world.artifacts import (
    build_manifest,
    decode_artifact_payload,
    encode_artifact_payload,
    now_iso,
    payload_sha256,
)
from little_dist.world.base import (
    ArtifactCorruptError,
    ArtifactInput,
    ArtifactManifest,
    ArtifactNotFoundError,
    ArtifactRead,
    Fence,
    LateEvent,
    Lease,
    SequenceConflictError,
    VersionNotFoundError,
)
from little_dist.world.defaults import (
    AppendsInOneProcess,
    DecodesEveryEvent,
    LeasesOneByOne,
    PreparedEvent,
    SequentialAppendThenAcquire,
    SequentialArtifactsThenAppend,
    WaitForEndByFollowing,
    check_event_window,
    check_lease_request,
    check_submission,
    late_events_of,
    prepare_events,
    refused_after_end,
    validate_definition_hash,
    validate_version_id,
)

__all__ = ["MemoryWorld"]

_T = TypeVar("_T")


@dataclass
class _LeaseState:
    holder: str | None
    token: int
    expires_at: float


class MemoryWorld(
    AppendsInOneProcess,
    LeasesOneByOne,
    SequentialAppendThenAcquire,
    SequentialArtifactsThenAppend,
    DecodesEveryEvent,
    WaitForEndByFollowing,
):
    """A :class:`~little_dist.world.base.World` held in memory.

    ``clock`` gives lease times in epoch seconds; tests pass a fake one to expire leases
    without sleeping.
    """

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._changed = threading.Condition()
        self._events: dict[str, list[Event]] = {}
        self._occurrences: dict[str, dict[str, Event]] = {}
        self._blobs: dict[str, bytes] = {}
        self._manifests: dict[str, ArtifactManifest] = {}
        self._leases: dict[str, _LeaseState] = {}
        self._versions: dict[str, str] = {}
        self._version_index: dict[str, list[str]] = {}
        self._submissions: dict[str, str] = {}
        self._late: dict[str, list[LateEvent]] = {}
        self._closed = False

    # -- events -----------------------------------------------------------------------------

    def _append_batch(
        self,
        run_id: str,
        events: Sequence[EventInput],
        *,
        expected_sequence: int | None,
        fence: Fence | None,
    ) -> list[Event]:
        validate_run_id(run_id)
        prepared = prepare_events(events)
        if not prepared:
            return []
        with self._changed:
            log = self._events.setdefault(run_id, [])
            occurrences = self._occurrences.setdefault(run_id, {})
            resolved: list[Event | None] = [
                occurrences.get(p.occurrence_id) if p.occurrence_id is not None else None
                for p in prepared
            ]
            if all(event is not None for event in resolved):
                return [event for event in resolved if event is not None]
            new = [item for item, event in zip(prepared, resolved, strict=True) if event is None]
            if self._ended(log, occurrences) and refused_after_end(new):
                self._keep_late(run_id, late_events_of(run_id, new, now_iso()))
                raise RunEndedError(run_id)
            if fence is not None:
                self._check_fence(fence)
            if expected_sequence is not None and expected_sequence != len(log):
                raise SequenceConflictError(run_id, expected_sequence, len(log))
            recorded_at = now_iso()
            result = self._record(run_id, log, occurrences, prepared, resolved, recorded_at)
            self._changed.notify_all()
            return result

    @staticmethod
    def _ended(log: list[Event], occurrences: dict[str, Event]) -> bool:
        return RUN_END in occurrences or bool(log and log[-1].type in RUN_END_EVENT_TYPES)

    def _keep_late(self, run_id: str, late: list[LateEvent]) -> None:
        kept = self._late.setdefault(run_id, [])
        seen = {event.occurrence_id for event in kept}
        for event in late:
            if event.occurrence_id is None or event.occurrence_id not in seen:
                kept.append(event)
                seen.add(event.occurrence_id)

    @staticmethod
    def _record(
        run_id: str,
        log: list[Event],
        occurrences: dict[str, Event],
        prepared: list[PreparedEvent],
        resolved: list[Event | None],
        recorded_at: str,
    ) -> list[Event]:
        result: list[Event] = []
        for item, existing in zip(prepared, resolved, strict=True):
            # A repeated occurrence id inside one batch names the event recorded for the
            # first of them, like a retried append would.
            if existing is None and item.occurrence_id is not None:
                existing = occurrences.get(item.occurrence_id)
            if existing is not None:
                result.append(existing)
                continue
            recorded = item.to_event(run_id, len(log) + 1, recorded_at)
            log.append(recorded)
            if item.occurrence_id is not None:
                occurrences[item.occurrence_id] = recorded
            result.append(recorded)
        return result

    def last_sequence(self, run_id: str) -> int:
        validate_run_id(run_id)
        with self._changed:
            return len(self._events.get(run_id, ()))

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        validate_run_id(run_id)
        check_event_window(after, limit)
        with self._changed:
            log = self._events.get(run_id, [])
            # Sequences are 1..N, so sequence s lives at index s - 1.
            end = len(log) if limit is None else min(len(log), after + limit)
            return log[after:end]

    def _follow(self, run_id: str, after: int, timeout: float | None) -> Iterator[Event]:
        cursor = after
        while True:
            with self._changed:
                deadline = None if timeout is None else time.monotonic() + timeout
                while True:
                    batch = self._events.get(run_id, [])[cursor:]
                    if batch or self._closed:
                        break
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return
                    self._changed.wait(remaining)
            if not batch:
                return
            for event in batch:
                yield event
                cursor = event.sequence

    def list_run_ids(self) -> list[str]:
        with self._changed:
            return sorted(run_id for run_id, log in self._events.items() if log)

    def first_and_last_events(self, run_id: str) -> tuple[Event, Event] | None:
        validate_run_id(run_id)
        with self._changed:
            log = self._events.get(run_id)
            return (log[0], log[-1]) if log else None

    def late_events(self, run_id: str) -> list[LateEvent]:
        validate_run_id(run_id)
        with self._changed:
            return list(self._late.get(run_id, ()))

    # -- artifacts --------------------------------------------------------------------------

    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        validate_run_id(artifact.run_id)
        data, encoding = encode_artifact_payload(artifact.payload)
        manifest = build_manifest(artifact, data, encoding, now_iso())
        digest = manifest.sha256[len("sha256:") :]
        with self._changed:
            existing = self._manifests.get(manifest.artifact_id)
            if existing is not None:
                return existing
            self._blobs.setdefault(digest, data)
            self._manifests[manifest.artifact_id] = manifest
            return manifest

    def get_artifact(self, ref: str, *, run_id: str | None = None) -> ArtifactRead:
        artifact_id = artifact_id_from_ref(ref)
        with self._changed:
            manifest = self._manifests.get(artifact_id)
            data = None if manifest is None else self._blobs.get(manifest.sha256[7:])
        if manifest is None or data is None:
            raise ArtifactNotFoundError(ref)
        if payload_sha256(data) != manifest.sha256:
            raise ArtifactCorruptError(ref, "stored bytes do not match the manifest's sha256")
        return ArtifactRead(manifest, decode_artifact_payload(data, manifest.encoding))

    def _blob_count(self) -> int:
        """Test hook: how many distinct blobs are stored."""
        with self._changed:
            return len(self._blobs)

    # -- leases -----------------------------------------------------------------------------

    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Lease | None:
        check_lease_request(key, holder, ttl_seconds)
        with self._changed:
            now = self._clock()
            state = self._leases.get(key)
            if state is None:
                state = self._leases[key] = _LeaseState(None, 0, 0.0)
            live = state.holder is not None and state.expires_at > now
            if live and state.holder != holder:
                return None
            if not live:
                # Every new tenure gets a larger token, so older holders' fences go stale.
                state.token += 1
                state.holder = holder
            state.expires_at = now + ttl_seconds
            return Lease(key, holder, state.token, state.expires_at)

    def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
        check_lease_request(lease.key, lease.holder, ttl_seconds)
        with self._changed:
            now = self._clock()
            self._check_fence(lease.fence, now)
            state = self._leases[lease.key]
            state.expires_at = now + ttl_seconds
            return Lease(lease.key, lease.holder, lease.token, state.expires_at)

    def release_lease(self, lease: Lease) -> None:
        with self._changed:
            state = self._leases.get(lease.key)
            if (
                state is not None
                and state.token == lease.token
                and state.holder is not None
                and (lease.holder == "" or state.holder == lease.holder)
            ):
                state.holder = None
                state.expires_at = 0.0

    def while_fenced(self, fence: Fence, body: Callable[[], _T]) -> _T:
        """``body()`` while ``fence``'s lease is held (checked under the world's lock, held
        until ``body`` returns); LeaseLostError, ``body`` not run, when it is not."""
        with self._changed:
            self._check_fence(fence)
            return body()

    def _check_fence(self, fence: Fence, now: float | None = None) -> None:
        state = self._leases.get(fence.key)
        at = self._clock() if now is None else now
        if (
            state is None
            or state.holder is None
            or state.token != fence.token
            or (fence.holder is not None and state.holder != fence.holder)
            or state.expires_at <= at
        ):
            raise LeaseLostError(f"Lease {fence.key!r} is no longer held with token {fence.token}")

    # -- submissions --------------------------------------------------------------------------

    def claim_submission(self, run_id: str, input_hash: str) -> str:
        check_submission(run_id, input_hash)
        with self._changed:
            return self._submissions.setdefault(run_id, input_hash)

    # -- workflow versions ------------------------------------------------------------------

    def register_version(self, version_id: str, document: dict[str, Any]) -> None:
        validate_version_id(version_id)
        if not isinstance(document, dict):
            raise InvalidInputError(f"A workflow version document must be an object: {version_id}")
        text = canonical_json(document)
        with self._changed:
            existing = self._versions.setdefault(version_id, text)
        if existing != text:
            raise ConflictError(
                f"Workflow version {version_id} is already registered with a different document"
            )

    def get_version(self, version_id: str) -> dict[str, Any]:
        validate_version_id(version_id)
        with self._changed:
            text = self._versions.get(version_id)
        if text is None:
            raise VersionNotFoundError(version_id)
        document: dict[str, Any] = json.loads(text)
        return document

    def index_version(self, definition_hash: str, version_id: str) -> None:
        validate_definition_hash(definition_hash)
        validate_version_id(version_id)
        with self._changed:
            indexed = self._version_index.setdefault(definition_hash, [])
            if version_id not in indexed:
                indexed.append(version_id)

    def indexed_versions(self, definition_hash: str) -> list[str]:
        validate_definition_hash(definition_hash)
        with self._changed:
            return list(self._version_index.get(definition_hash, ()))

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
