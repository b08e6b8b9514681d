"""A thin adapter over a boto3 S3 client: put-if-absent and get, with errors translated.

S3 holds only immutable objects here, so two operations suffice. Put-if-absent is
``put_object(IfNoneMatch="*")`` (never ``upload_file``, which cannot send the condition,
boto3#4366); a ``412 PreconditionFailed`` means the key is already stored, which for
content-addressed or immutable objects is success. A ``409 ConditionalRequestConflict``
(a concurrent conditional write to the same key) is retried.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from little_dist.errors import StorageUnavailableError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

__all__ = ["S3Objects"]

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
_CONFLICT_RETRIES = 5


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

    def close(self) -> None:
        self._client.close()


def _unavailable(what: str, exc: Exception) -> StorageUnavailableError:
    return StorageUnavailableError(f"{what} failed: {exc}")
