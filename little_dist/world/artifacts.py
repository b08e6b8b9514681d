"""Artifact encoding and manifests, shared by every world, plus the world layer's clock.

The encoding rule is upstream's (``world.ts``): ``bytes`` are stored raw (``binary``), ``str``
as UTF-8 (``utf-8``), anything else as its canonical JSON (``json``; ``None`` becomes
``null``). An artifact's id hashes its identity and the payload's hash, never its creation
time, so writing the same artifact twice names the same artifact.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.ids import artifact_id_for, artifact_ref, validate_run_id
from little_dist.world.base import ArtifactEncoding, ArtifactInput, ArtifactManifest

__all__ = [
    "artifact_ref_for",
    "build_manifest",
    "decode_artifact_payload",
    "encode_artifact_payload",
    "now_iso",
    "payload_sha256",
]

_ENCODINGS: tuple[ArtifactEncoding, ...] = ("json", "utf-8", "binary")


def encode_artifact_payload(payload: Any) -> tuple[bytes, ArtifactEncoding]:
    """The bytes stored for ``payload`` and their encoding.

    Raises :class:`~little_dist.canonical.NonHashableValueError` for a value with no
    canonical JSON form (NaN, a set, an object...).
    """
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload), "binary"
    if isinstance(payload, str):
        try:
            return payload.encode("utf-8"), "utf-8"
        except UnicodeEncodeError as error:  # a lone surrogate has no UTF-8 form
            raise InvalidInputError(f"Artifact text is not valid Unicode: {error}") from error
    return canonical_json(payload).encode("utf-8"), "json"


def decode_artifact_payload(data: bytes, encoding: str) -> Any:
    """The payload a reader gets back: a JSON value, a ``str`` or ``bytes``."""
    if encoding == "json":
        return json.loads(data.decode("utf-8"))
    if encoding == "utf-8":
        return data.decode("utf-8")
    if encoding == "binary":
        return bytes(data)
    raise InvalidInputError(
        f"Unknown artifact encoding {encoding!r} (expected one of {', '.join(_ENCODINGS)})"
    )


def payload_sha256(data: bytes) -> str:
    """``sha256:<hex>`` of raw bytes (not canonicalised: artifacts hash what is stored)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build_manifest(
    artifact: ArtifactInput, data: bytes, encoding: ArtifactEncoding, created_at: str
) -> ArtifactManifest:
    """The manifest of ``artifact`` stored as ``data`` (upstream's ``writeArtifact`` rule)."""
    validate_run_id(artifact.run_id)
    if not artifact.name:
        raise InvalidInputError("Artifact name must be a non-empty string")
    if not artifact.content_type:
        raise InvalidInputError("Artifact contentType must be a non-empty string")
    payload_hash = payload_sha256(data)
    artifact_id = artifact_id_for(
        run_id=artifact.run_id,
        name=artifact.name,
        content_type=artifact.content_type,
        encoding=encoding,
        payload_hash=payload_hash,
        step_path=artifact.step_path,
    )
    return ArtifactManifest(
        artifact_id=artifact_id,
        artifact_ref=artifact_ref(artifact_id),
        run_id=artifact.run_id,
        name=artifact.name,
        content_type=artifact.content_type,
        encoding=encoding,
        sha256=payload_hash,
        size_bytes=len(data),
        created_at=created_at,
        step_path=artifact.step_path,
    )


class _IsoClock:
    """``now_iso()``: the current UTC time as JavaScript's ``Date#toISOString`` prints it.

    ``2026-05-19T18:43:11.452Z``: milliseconds, truncated like a JS ``Date``, and ``Z``.
    Worlds stamp ``recordedAt`` and ``createdAt`` with it (every event and artifact: a hot
    path); the pure core never reads a clock. The date and time of day change once a
    second, so they are formatted once a second, at a fifth of ``strftime``'s cost a call.
    """

    def __init__(self) -> None:
        self._second: tuple[int, str] = (-1, "")

    def __call__(self) -> str:
        now = time.time()
        second = int(now)
        cached = self._second
        if cached[0] != second:
            # One tuple, replaced whole: threads never see a second paired with another text.
            cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second)))
            self._second = cached
        return f"{cached[1]}{int((now - second) * 1000):03d}Z"


now_iso = _IsoClock()


def artifact_ref_for(artifact: ArtifactInput) -> str:
    """The ``artifact://`` ref ``artifact`` gets when stored, in any world (it hashes the
    artifact's identity and payload, never its creation time): events may name it before
    it is written, when the write and the events go out together
    (:meth:`~little_dist.world.base.World.append_batch_with_artifacts`)."""
    data, encoding = encode_artifact_payload(artifact.payload)
    return build_manifest(artifact, data, encoding, "").artifact_ref
