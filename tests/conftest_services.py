"""Session fixtures for the real services integration tests use: Redis and an S3 server.

* Redis: ``LITTLE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``). Tests write only
  under a per-session key prefix (``redis_key_prefix``) and delete exactly those keys at the
  end, so a shared server keeps its other data.
* S3: ``LITTLE_TEST_S3_ENDPOINT`` (plus ``LITTLE_TEST_S3_BUCKET``, default ``little-test``,
  created if missing) when set; otherwise SeaweedFS ``weed mini`` is started on free ports in
  a temporary directory for the session and stopped at its end. Objects are written under a
  per-session prefix.

A missing service FAILS the tests that need it (``pytest.fail``), it never skips them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, start_weed_mini, wait_for_bucket

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"


@dataclass(frozen=True)
class S3Service:
    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    prefix: str  # per-session object-key prefix


def open_redis_s3_world(
    redis_url: str, redis_key_prefix: str, s3: S3Service, name: str | None = None
) -> Any:
    """A RedisS3World on the test's Redis and S3, its keys and objects under ``name`` (a
    new one by default; worlds opened with the same name share them, as processes do)."""
    from little_dist.world.redis_s3 import RedisS3World

    name = name or uuid.uuid4().hex[:10]
    return RedisS3World.from_settings(
        redis_url,
        s3.endpoint,
        s3.bucket,
        access_key_id=s3.access_key_id,
        secret_access_key=s3.secret_access_key,
        key_prefix=f"{redis_key_prefix}{name}:",
        s3_prefix=f"{s3.prefix}{name}/",
    )


@pytest.fixture(scope="session")
def redis_url() -> str:
    return os.environ.get("LITTLE_TEST_REDIS_URL", DEFAULT_REDIS_URL)


@pytest.fixture(scope="session")
def redis_key_prefix(redis_url: str) -> Iterator[str]:
    """A Redis key prefix unique to this session; its keys are deleted when it ends."""
    import redis

    prefix = f"little-test:{uuid.uuid4().hex[:12]}:"
    client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.exceptions.RedisError as error:
        pytest.fail(f"Redis is required at {redis_url} (LITTLE_TEST_REDIS_URL): {error}")
    yield prefix
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
    finally:
        client.close()


@pytest.fixture(scope="session")
def s3_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    """An S3 endpoint and bucket for the session (started here unless one is configured)."""
    prefix = f"session-{uuid.uuid4().hex[:12]}/"
    endpoint = os.environ.get("LITTLE_TEST_S3_ENDPOINT")
    server: S3Server | None = None
    try:
        if endpoint:
            bucket = os.environ.get("LITTLE_TEST_S3_BUCKET", "little-test")
            wait_for_bucket(endpoint, bucket, timeout=30, create=True)
        else:
            data_dir: Path = tmp_path_factory.mktemp("seaweedfs")
            server = start_weed_mini(data_dir, "little-test")
            endpoint, bucket = server.endpoint, server.bucket
    except Exception as error:  # the S3 server is required: fail, never skip
        pytest.fail(f"An S3 server is required for integration tests: {error}")
    try:
        yield S3Service(endpoint, bucket, ACCESS_KEY, SECRET_KEY, prefix)
    finally:
        if server is not None:
            server.kill()  # its data is the session's temporary folder: nothing to keep
