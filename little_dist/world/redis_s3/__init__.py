"""The fleet's world: Redis Streams for events and leases, S3 for artifacts and archives.

:mod:`little_dist.world.redis_s3.world` assembles the parts (event appends and reads, leases,
archive, versions, artifacts), each in its own module; :mod:`little_dist.world.redis_s3.keys`
holds the key layout.
"""

from __future__ import annotations

from little_dist.world.redis_s3.keys import lease_key_for
from little_dist.world.redis_s3.world import (
    DEFAULT_ARCHIVE_TTL_SECONDS,
    RedisS3World,
    RunNotEndedError,
    RunSealedError,
)

__all__ = [
    "DEFAULT_ARCHIVE_TTL_SECONDS",
    "RedisS3World",
    "RunNotEndedError",
    "RunSealedError",
    "lease_key_for",
]
