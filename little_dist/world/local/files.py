"""The file side of :class:`~little_dist.world.local.LocalWorld`: artifacts and versions.

Layout under the data directory::

    artifacts/<artifactId>.json manifest, canonical JSON
    artifacts/blobs/<sha256>    payload bytes (named by content: the same bytes stored once)
    versions/<versionId>.json   immutable workflow versions, canonical JSON

Every file is written to a temporary name, synced, and linked into place (put-if-absent:
the first writer wins, later writers read what it wrote), so readers never see a partial
file. OS errors surface as :class:`~little_dist.errors.StorageUnavailableError`.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from little_dist.canonical import canonical_json
from little_dist.errors import ConflictError, InvalidInputError, StorageUnavailableError
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
    VersionNotFoundError,
)
from little_dist.world.defaults import validate_version_id

__all__ = ["FileStore", "publish"]


class FileStore:
    """Artifacts and workflow versions as files under ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self._artifacts_dir = data_dir / "artifacts"
        self._blobs_dir = self._artifacts_dir / "blobs"
        self._versions_dir = data_dir / "versions"
        for directory in (self._blobs_dir, self._versions_dir):
            directory.mkdir(parents=True, exist_ok=True)

    # -- artifacts --------------------------------------------------------------------------

    def put_artifact(self, artifact: ArtifactInput) -> ArtifactManifest:
        validate_run_id(artifact.run_id)
        data, encoding = encode_artifact_payload(artifact.payload)
        manifest = build_manifest(artifact, data, encoding, now_iso())
        manifest_path = self._artifacts_dir / f"{manifest.artifact_id}.json"
        try:
            existing = _read_manifest_if_present(manifest_path, manifest.artifact_ref)
            if existing is not None:
                return _check_same(existing, manifest)
            blob_path = self._blobs_dir / manifest.sha256[len("sha256:") :]
            if not blob_path.exists():
                publish(blob_path, data)
            text = canonical_json(manifest.to_json()) + "\n"
            if publish(manifest_path, text.encode("utf-8")):
                return manifest
        except OSError as error:
            raise StorageUnavailableError(
                f"Cannot write artifact {manifest.artifact_ref}: {error}"
            ) from error
        # Another writer published the same artifact first: its manifest is the artifact.
        winner = _read_manifest_if_present(manifest_path, manifest.artifact_ref)
        if winner is None:
            raise StorageUnavailableError(f"Artifact manifest vanished: {manifest.artifact_ref}")
        return _check_same(winner, manifest)

    def get_artifact(self, ref: str) -> ArtifactRead:
        artifact_id = artifact_id_from_ref(ref)
        manifest = _read_manifest_if_present(self._artifacts_dir / f"{artifact_id}.json", ref)
        if manifest is None:
            raise ArtifactNotFoundError(ref)
        if manifest.artifact_id != artifact_id or manifest.artifact_ref != ref:
            raise ArtifactCorruptError(ref, "the manifest names another artifact")
        try:
            data = (self._blobs_dir / manifest.sha256[len("sha256:") :]).read_bytes()
        except FileNotFoundError as error:
            raise ArtifactNotFoundError(ref) from error
        except OSError as error:
            raise StorageUnavailableError(f"Cannot read artifact {ref}: {error}") from error
        if payload_sha256(data) != manifest.sha256:
            raise ArtifactCorruptError(ref, "stored bytes do not match the manifest's sha256")
        if len(data) != manifest.size_bytes:
            raise ArtifactCorruptError(ref, "sizeBytes does not match the stored bytes")
        return ArtifactRead(manifest, decode_artifact_payload(data, manifest.encoding))

    def blob_count(self) -> int:
        """How many distinct blobs are stored (a test hook)."""
        return sum(1 for path in self._blobs_dir.iterdir() if not path.name.endswith(".tmp"))

    # -- workflow versions ------------------------------------------------------------------

    def register_version(self, version_id: str, document: dict[str, Any]) -> None:
        validate_version_id(version_id)
        if not isinstance(document, dict):
            raise InvalidInputError(f"A workflow version document must be an object: {version_id}")
        text = canonical_json(document) + "\n"
        path = self._versions_dir / f"{version_id}.json"
        try:
            if publish(path, text.encode("utf-8")):
                return
            existing = path.read_text(encoding="utf-8")
        except OSError as error:
            raise StorageUnavailableError(f"Cannot write version {version_id}: {error}") from error
        if existing != text:
            raise ConflictError(
                f"Workflow version {version_id} is already registered with a different document"
            )

    def get_version(self, version_id: str) -> dict[str, Any]:
        validate_version_id(version_id)
        try:
            text = (self._versions_dir / f"{version_id}.json").read_text(encoding="utf-8")
        except FileNotFoundError as error:
            raise VersionNotFoundError(version_id) from error
        except OSError as error:
            raise StorageUnavailableError(f"Cannot read version {version_id}: {error}") from error
        document: dict[str, Any] = json.loads(text)
        return document


def _check_same(existing: ArtifactManifest, wanted: ArtifactManifest) -> ArtifactManifest:
    if existing.sha256 != wanted.sha256 or existing.size_bytes != wanted.size_bytes:
        raise ArtifactCorruptError(
            wanted.artifact_ref, "an existing manifest with this id names other bytes"
        )
    return existing


def _read_manifest_if_present(path: Path, ref: str) -> ArtifactManifest | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as error:
        raise StorageUnavailableError(f"Cannot read artifact manifest {ref}: {error}") from error
    try:
        data = json.loads(text)
        manifest = ArtifactManifest.from_json(data)
    except (ValueError, KeyError, TypeError) as error:
        raise ArtifactCorruptError(ref, f"malformed manifest: {error}") from error
    if manifest.encoding not in ("json", "utf-8", "binary"):
        raise ArtifactCorruptError(ref, f"unknown encoding {manifest.encoding!r}")
    return manifest


def publish(path: Path, data: bytes) -> bool:
    """Write ``data`` at ``path`` unless something is there; ``True`` if we wrote it.

    The bytes go to a unique temporary file first, are synced, and are then hard-linked into
    place, which fails if the name exists: readers never see a partial file, and of several
    concurrent writers exactly one wins.
    """
    temp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temp, path)
        won = True
    except FileExistsError:
        won = False
    except OSError:
        # A file system without hard links: replace is atomic too, but last writer wins.
        if path.exists():
            won = False
        else:
            os.replace(temp, path)
            _sync_directory(path.parent)
            return True
    finally:
        if temp.exists():
            temp.unlink()
    if won:
        _sync_directory(path.parent)
    return won


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
