"""Artifacts in S3: content-addressed blobs plus one immutable manifest per artifact.

Bytes live at ``blobs/sha256/<hex>`` and are stored once whoever writes them; each artifact's
manifest lives at ``manifests/<artifactId>.json``. Both are written put-if-absent, so the
first writer's manifest (and its ``createdAt``) is the artifact for good.

Small artifacts skip these objects: kept in Redis by
:mod:`~little_dist.world.redis_s3.hot_artifacts` while their run is live (one round trip
instead of two S3 puts), then carried by the run's archive. Reads look in Redis first, then
S3, then (given the run's id) the run's archive, whatever this world's limit: where an
artifact lives depends on the world that wrote it. Every tier gets the same integrity checks.
"""

from __future__ import annotations

from collections.abc import Callable

from little_dist.canonical import canonical_json
from little_dist.ids import artifact_id_from_ref, validate_run_id
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
)
from little_dist.world.redis_s3.hot_artifacts import HotArtifacts, QueuedHotPut, parse_manifest
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.s3 import S3Objects

__all__ = ["ArtifactStore", "StagedArtifact"]


class ArtifactStore:
    """Put and get artifacts through :class:`S3Objects` and, when given, the hot tier.

    Thread-safe.
    """

    def __init__(
        self,
        objects: S3Objects,
        keys: KeyLayout,
        hot: HotArtifacts | None = None,
        archived: Callable[[str, str], tuple[bytes, bytes] | None] | None = None,
    ) -> None:
        """``archived(run_id, artifact_id)``: ``(manifest JSON, data)`` of an artifact its
        run's archive carries (:meth:`~little_dist.world.redis_s3.archive.RunArchives.artifact`)."""
        self._objects = objects
        self._keys = keys
        self._hot = hot
        self._archived = archived

    def put(self, artifact: ArtifactInput) -> ArtifactManifest:
        validate_run_id(artifact.run_id)
        data, encoding = encode_artifact_payload(artifact.payload)
        manifest = build_manifest(artifact, data, encoding, now_iso())
        body = canonical_json(manifest.to_json()).encode("utf-8")
        if self._hot is not None and self._hot.accepts(len(data)):
            answer = self._hot.put(manifest, body, data)
            if answer is True:
                return manifest
            if isinstance(answer, bytes):
                return _first_writer(manifest, parse_manifest(manifest.artifact_ref, answer))
            # None: the run is sealed (being archived); S3 is where the artifact goes now,
            # unless the run's archive carries it already (the first writer's, kept).
            archived = (
                self._archived(manifest.run_id, manifest.artifact_id) if self._archived else None
            )
            if archived is not None:
                return _first_writer(manifest, parse_manifest(manifest.artifact_ref, archived[0]))
        self._objects.put_if_absent(
            self._keys.blob(manifest.sha256.removeprefix("sha256:")),
            data,
            "application/octet-stream",
        )
        stored = self._objects.put_if_absent(
            self._keys.manifest(manifest.artifact_id), body, "application/json"
        )
        if stored:
            return manifest
        return _first_writer(manifest, self._manifest(manifest.artifact_ref, manifest.artifact_id))

    def staged(self, artifact: ArtifactInput) -> StagedArtifact | None:
        """:meth:`put` in two halves for an artifact the hot tier takes: a put to queue on
        the pipeline of an append (see ``EventLog.append_batch(before=...)``) and a check of
        its answer once it ran (:meth:`StagedArtifact.check`). An artifact bound for S3 is
        put now (``None``: nothing left to do)."""
        validate_run_id(artifact.run_id)
        data, encoding = encode_artifact_payload(artifact.payload)
        manifest = build_manifest(artifact, data, encoding, now_iso())
        if self._hot is None or not self._hot.accepts(len(data)):
            self.put(artifact)
            return None
        body = canonical_json(manifest.to_json()).encode("utf-8")
        return StagedArtifact(self, artifact, manifest, self._hot.queued_put(manifest, body, data))

    def get(self, ref: str, *, run_id: str | None = None) -> ArtifactRead:
        """The artifact ``ref``; ``run_id`` (its run) lets a small artifact of an archived
        run be found in the run's archive once Redis has given its keys back."""
        artifact_id = artifact_id_from_ref(ref)
        hot = self._hot.get(artifact_id) if self._hot is not None else None
        if hot is not None:
            body, data = hot
            if body is None or data is None:
                raise ArtifactCorruptError(ref, "its Redis hash lacks the manifest or the bytes")
            return _checked(ref, artifact_id, parse_manifest(ref, body), data)
        try:
            manifest = self._manifest(ref, artifact_id)
        except ArtifactNotFoundError:
            archived = None
            if run_id is not None and self._archived is not None:
                archived = self._archived(validate_run_id(run_id), artifact_id)
            if archived is None:
                raise
            return _checked(ref, artifact_id, parse_manifest(ref, archived[0]), archived[1])
        if manifest.artifact_id != artifact_id or manifest.artifact_ref != ref:
            raise ArtifactCorruptError(ref, "the manifest names another artifact")
        data = self._objects.get(self._keys.blob(manifest.sha256.removeprefix("sha256:")))
        if data is None:
            raise ArtifactNotFoundError(ref)
        return _checked(ref, artifact_id, manifest, data)

    def _manifest(self, ref: str, artifact_id: str) -> ArtifactManifest:
        body = self._objects.get(self._keys.manifest(artifact_id))
        if body is None:
            raise ArtifactNotFoundError(ref)
        return parse_manifest(ref, body)


class StagedArtifact:
    """An artifact whose hot put rides on an append's pipeline (:meth:`ArtifactStore.staged`)."""

    def __init__(
        self,
        store: ArtifactStore,
        artifact: ArtifactInput,
        manifest: ArtifactManifest,
        put: QueuedHotPut,
    ) -> None:
        self._store = store
        self._artifact = artifact
        self.manifest = manifest
        self.put = put

    def check(self) -> ArtifactManifest:
        """The stored manifest once the pipeline ran: ours, or the first writer's (the
        same bytes, or :class:`ArtifactCorruptError`); a run sealed meanwhile gets the
        artifact in S3 instead."""
        answer = self.put.answer
        if answer is True:
            return self.manifest
        if isinstance(answer, bytes):
            return _first_writer(self.manifest, parse_manifest(self.manifest.artifact_ref, answer))
        return self._store.put(self._artifact)


def _first_writer(manifest: ArtifactManifest, existing: ArtifactManifest) -> ArtifactManifest:
    """The artifact already stored under ``manifest``'s id (its createdAt wins), if it names
    the same bytes."""
    if existing.sha256 != manifest.sha256 or existing.size_bytes != manifest.size_bytes:
        raise ArtifactCorruptError(
            manifest.artifact_ref, "an existing manifest with this id names other bytes"
        )
    return existing


def _checked(ref: str, artifact_id: str, manifest: ArtifactManifest, data: bytes) -> ArtifactRead:
    """The artifact read, once its manifest and bytes are checked against each other."""
    if manifest.artifact_id != artifact_id or manifest.artifact_ref != ref:
        raise ArtifactCorruptError(ref, "the manifest names another artifact")
    if payload_sha256(data) != manifest.sha256:
        raise ArtifactCorruptError(ref, "stored bytes do not match the manifest's sha256")
    if len(data) != manifest.size_bytes:
        raise ArtifactCorruptError(ref, "sizeBytes does not match the stored bytes")
    return ArtifactRead(manifest, decode_artifact_payload(data, manifest.encoding))
