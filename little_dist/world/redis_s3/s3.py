"""A thin adapter over a boto3 S3 client: put-if-absent and get, with errors translated.

S3 holds only immutable objects here, so two operations suffice. Put-if-absent is
``put_object(IfNoneMatch="*")`` (never ``upload_file``, which cannot send the condition,
boto3#4366); a ``412 PreconditionFailed`` means the key is already stored, which for
content-addressed or immutable objects is success. A ``409 ConditionalRequestConflict``
(a concurrent conditional write to the same key) is retried.

A body too large to hold in memory (a run's archive) is streamed instead
(:meth:`S3Objects.put_stream_if_absent`): a multipart upload, one part as it fills,
completed with the same ``IfNoneMatch`` condition, so a second writer of the key is
refused as a ``put_object`` would be. Its sha256 is computed on the way, for comparing
with what the key already holds (:meth:`S3Objects.digest`, which reads it in chunks).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from little_dist.errors import StorageUnavailableError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["Digest", "S3Objects", "StreamedPut"]

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_CONFLICT_RETRIES = 5
#: S3's smallest part but the last.
MIN_PART_BYTES = 5 * 1024 * 1024
_READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Digest:
    """An object's size and the sha256 of its bytes (hex)."""

    size: int
    sha256: str


@dataclass(frozen=True)
class StreamedPut:
    """What :meth:`S3Objects.put_stream_if_absent` did: ``stored`` (False: the key was
    already there, nothing written) and the digest of the bytes it was given."""

    stored: bool
    digest: Digest


def _error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


class S3Objects:
    """Immutable objects in one bucket. Thread-safe (boto3 clients are)."""

    def __init__(self, client: S3Client, bucket: str) -> None:
        self._client = client
        self.bucket = bucket

    def put_if_absent(self, key: str, body: bytes, content_type: str) -> bool:
        """Store ``body`` at ``key`` unless something is there; True if this call stored it."""
        for attempt in range(_CONFLICT_RETRIES):
            try:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=body,
                    ContentType=content_type,
                    IfNoneMatch="*",
                )
                return True
            except ClientError as exc:
                code, status = _error_code(exc), _status(exc)
                if code == "PreconditionFailed" or status == 412:
                    return False
                if code == "ConditionalRequestConflict" or status == 409:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise _unavailable(f"S3 put of {key}", exc) from exc
            except BotoCoreError as exc:
                raise _unavailable(f"S3 put of {key}", exc) from exc
        raise StorageUnavailableError(
            f"S3 put of {key} in bucket {self.bucket}: conditional write kept conflicting"
        )

    def put_stream_if_absent(
        self, key: str, chunks: Iterable[bytes], content_type: str, part_bytes: int
    ) -> StreamedPut:
        """Store the concatenated ``chunks`` at ``key`` unless something is there, holding
        at most about ``part_bytes`` (>= 5 MiB) in memory: a body that fits in one part is
        one ``put_object``, a longer one a multipart upload completed conditionally. An
        exception from ``chunks`` aborts the upload (nothing is stored) and propagates."""
        part_bytes = max(part_bytes, MIN_PART_BYTES)
        hasher = hashlib.sha256()
        size = 0
        buffer = bytearray()
        upload: _Upload | None = None
        try:
            for chunk in chunks:
                hasher.update(chunk)
                size += len(chunk)
                buffer += chunk
                while len(buffer) >= part_bytes:
                    if upload is None:
                        upload = _Upload(self, key, content_type)
                    upload.add(bytes(buffer[:part_bytes]))
                    del buffer[:part_bytes]
            digest = Digest(size, hasher.hexdigest())
            if upload is None:
                return StreamedPut(self.put_if_absent(key, bytes(buffer), content_type), digest)
            if buffer:
                upload.add(bytes(buffer))
            return StreamedPut(upload.complete(), digest)
        except BaseException:
            if upload is not None:
                upload.abort()
            raise

    def digest(self, key: str) -> Digest | None:
        """The size and sha256 of the object at ``key``, read in chunks; None if absent."""
        try:
            body = self._client.get_object(Bucket=self.bucket, Key=key)["Body"]
            hasher = hashlib.sha256()
            size = 0
            for chunk in body.iter_chunks(_READ_CHUNK):
                hasher.update(chunk)
                size += len(chunk)
            return Digest(size, hasher.hexdigest())
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND_CODES:
                return None
            raise _unavailable(f"S3 get of {key}", exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(f"S3 get of {key}", exc) from exc

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None if there is no object at ``key``."""
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=key)
            return response["Body"].read()
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND_CODES:
                return None
            raise _unavailable(f"S3 get of {key}", exc) from exc
        except BotoCoreError as exc:
            raise _unavailable(f"S3 get of {key}", exc) from exc

    def list_keys(self, prefix: str) -> list[str]:
        """The keys under ``prefix``, in S3's order (lexicographic)."""
        keys: list[str] = []
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                keys.extend(item["Key"] for item in page.get("Contents", ()))
        except (ClientError, BotoCoreError) as exc:
            raise _unavailable(f"S3 list of {prefix}", exc) from exc
        return keys

    def close(self) -> None:
        self._client.close()


class _Upload:
    """One multipart upload of :meth:`S3Objects.put_stream_if_absent`."""

    def __init__(self, objects: S3Objects, key: str, content_type: str) -> None:
        self._client = objects._client
        self._bucket = objects.bucket
        self._key = key
        self._parts: list[Any] = []
        with _translated(f"S3 multipart upload of {key}"):
            created = self._client.create_multipart_upload(
                Bucket=self._bucket, Key=key, ContentType=content_type
            )
        self._id = created["UploadId"]

    def add(self, body: bytes) -> None:
        number = len(self._parts) + 1
        with _translated(f"S3 upload of part {number} of {self._key}"):
            reply = self._client.upload_part(
                Bucket=self._bucket, Key=self._key, UploadId=self._id, PartNumber=number, Body=body
            )
        self._parts.append({"PartNumber": number, "ETag": reply["ETag"]})

    def complete(self) -> bool:
        """Complete the upload unless the key exists; True if this call stored it."""
        for attempt in range(_CONFLICT_RETRIES):
            try:
                self._client.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=self._key,
                    UploadId=self._id,
                    MultipartUpload={"Parts": self._parts},
                    IfNoneMatch="*",
                )
                return True
            except ClientError as exc:
                code, status = _error_code(exc), _status(exc)
                if code == "PreconditionFailed" or status == 412:
                    self.abort()
                    return False
                if code == "ConditionalRequestConflict" or status == 409:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise _unavailable(f"S3 completion of {self._key}", exc) from exc
            except BotoCoreError as exc:
                raise _unavailable(f"S3 completion of {self._key}", exc) from exc
        raise StorageUnavailableError(
            f"S3 completion of {self._key} in bucket {self._bucket}: conditional write kept "
            "conflicting"
        )

    def abort(self) -> None:
        """Drop the parts uploaded (best effort: a bucket lifecycle rule for incomplete
        multipart uploads cleans up what a dead process left)."""
        with suppress(ClientError, BotoCoreError):
            self._client.abort_multipart_upload(
                Bucket=self._bucket, Key=self._key, UploadId=self._id
            )


@contextmanager
def _translated(what: str) -> Iterator[None]:
    """Translate botocore errors inside the block into StorageUnavailableError."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise _unavailable(what, exc) from exc


def _unavailable(what: str, exc: Exception) -> StorageUnavailableError:
    return StorageUnavailableError(f"{what} failed: {exc}")
