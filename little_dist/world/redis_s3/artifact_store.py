"""Artifacts in S3: content-addressed blobs plus one immutable manifest per artifact.

Bytes live at ``blobs/sha256/<hex>`` and are stored once whoever writes them; each artifact's
manifest lives at ``manifests/<artifactId>.json``. Both are written put-if-absent, so the
first writer's manifest (and its ``createdAt``) is the artifact for good.
"""

from __future__ import annotations

import json

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
from little_dist.world.redis_s3.keys import KeyLayout
from little_dist.world.redis_s3.s3 import S3Objects

__all__ = ["ArtifactStore"]

_ENCODINGS = ("json", "utf-8", "binary")


class ArtifactStore:
    """Put and get artifacts through :class:`S3Objects`. Thread-safe."""

    def __init__(self, objects: S3Objects, keys: KeyLayout) -> None:
        self._objects = objects
        self._keys = keys

    def put(self, artifact: ArtifactInput) -> ArtifactManifest:
        validate_run_id(artifact.run_id)
        data, encoding = encode_artifact_payload(artifact.payload)
        manifest = build_manifest(artifact, data, encoding, now_iso())
        self._objects.put_if_absent(
            self._keys.blob(manifest.sha256.removeprefix("sha256:")),
            data,
            "application/octet-stream",
        )
        stored = self._objects.put_if_absent(
            self._keys.manifest(manifest.artifact_id),
            canonical_json(manifest.to_json()).encode("utf-8"),
            "application/json",
        )
        if stored:
            return manifest
        # Written before: the first manifest (and its createdAt) is the artifact.
        existing = self._manifest(manifest.artifact_ref, manifest.artifact_id)
        if existing.sha256 != manifest.sha256 or existing.size_bytes != manifest.size_bytes:
            raise ArtifactCorruptError(
                manifest.artifact_ref, "an existing manifest with this id names other bytes"
            )
        return existing

    def get(self, ref: str) -> ArtifactRead:
        artifact_id = artifact_id_from_ref(ref)
        manifest = self._manifest(ref, artifact_id)
        if manifest.artifact_id != artifact_id or manifest.artifact_ref != ref:
            raise ArtifactCorruptError(ref, "the manifest names another artifact")
        data = self._objects.get(self._keys.blob(manifest.sha256.removeprefix("sha256:")))
        if data is None:
            raise ArtifactNotFoundError(ref)
        if payload_sha256(data) != manifest.sha256:
            raise ArtifactCorruptError(ref, "stored bytes do not match the manifest's sha256")
        if len(data) != manifest.size_bytes:
            raise ArtifactCorruptError(ref, "sizeBytes does not match the stored bytes")
        return ArtifactRead(manifest, decode_artifact_payload(data, manifest.encoding))

    def _manifest(self, ref: str, artifact_id: str) -> ArtifactManifest:
        body = self._objects.get(self._keys.manifest(artifact_id))
        if body is None:
            raise ArtifactNotFoundError(ref)
        try:
            manifest = ArtifactManifest.from_json(json.loads(body))
        except (ValueError, KeyError, TypeError) as error:
            raise ArtifactCorruptError(ref, f"malformed manifest: {error}") from error
        if manifest.encoding not in _ENCODINGS:
            raise ArtifactCorruptError(ref, f"unknown encoding {manifest.encoding!r}")
        return manifest
