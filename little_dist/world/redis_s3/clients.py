"""The Redis and S3 clients a :class:`~little_dist.world.redis_s3.RedisS3World` is built on
(``from_settings``), configured as the world needs them."""

from __future__ import annotations

from typing import Any, Final

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

__all__ = ["redis_client_for", "s3_client_for"]

_MAX_CONNECTIONS: Final = 10_000


def redis_client_for(redis_url: str, socket_timeout: float) -> redis.Redis:
    """A client of ``redis_url`` that never re-sends a command on its own."""
    return redis.Redis.from_url(
        redis_url,
        decode_responses=False,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_timeout,
        health_check_interval=30,
        # redis-py >= 6 caps a pool at 100 connections unless told, and the 101st command
        # in flight at once fails ("Too many connections"): a server following a hundred
        # runs for its SSE watchers (one blocked XREAD each) reached it with its first
        # reads. Redis's own default limit of clients.
        max_connections=_MAX_CONNECTIONS,
        # redis-py >= 6 re-sends a timed-out command by default; a timed-out append may have
        # landed, and without an occurrence id a re-send would record it twice. Failures
        # surface as StorageUnavailableError and the caller decides.
        retry=Retry(NoBackoff(), 0),
    )


def s3_client_for(
    endpoint: str | None,
    region: str,
    access_key_id: str | None,
    secret_access_key: str | None,
) -> Any:
    """A boto3 S3 client of ``endpoint`` (None: AWS), path-style, checksums only when
    required (some S3-compatible stores reject boto3's default ones)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=Config(
            retries={"mode": "standard"},
            # boto3 >= 1.36 checksums by default; some S3-compatible stores reject them.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            s3={"addressing_style": "path"},
        ),
    )
