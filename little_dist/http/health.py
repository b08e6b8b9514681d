"""``/readyz``: is the fleet's storage reachable from this process (Redis and S3)?

Redis: a ``PING`` on the fleet's Redis. S3: a ``HeadBucket`` of the world's bucket with the
same settings the world uses (a few seconds' timeouts, no retries: a readiness probe that
hangs is worse than one that says no). Each check answers ``ok`` or why not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from little_dist.redaction import redact

if TYPE_CHECKING:
    from little_dist.settings import Settings

__all__ = ["check_redis", "check_s3"]

_TIMEOUT_S = 3.0


def check_redis(redis: Any) -> str:
    try:
        redis.ping()
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}: {redact(str(exc))[:200]}"
    return "ok"


def check_s3(settings: Settings) -> str:
    if not settings.s3_bucket:
        return "not configured: LITTLE_S3_BUCKET is not set"
    import boto3
    from botocore.config import Config

    def secret(value: object) -> str | None:
        getter = getattr(value, "get_secret_value", None)
        return str(getter()) if getter is not None else None

    try:
        client = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint,
            region_name=settings.s3_region or "us-east-1",
            aws_access_key_id=secret(settings.aws_access_key_id),
            aws_secret_access_key=secret(settings.aws_secret_access_key),
            config=Config(
                connect_timeout=_TIMEOUT_S,
                read_timeout=_TIMEOUT_S,
                retries={"max_attempts": 1},
                request_checksum_calculation="when_required",
            ),
        )
        try:
            client.head_bucket(Bucket=settings.s3_bucket)
        finally:
            client.close()
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}: {redact(str(exc))[:200]}"
    return "ok"
