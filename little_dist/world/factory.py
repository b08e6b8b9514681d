"""Open a world from a one-line spec: what ``--world`` and ``LITTLE_WORLD`` hold.

=====================  ===============================================================
spec                   world
=====================  ===============================================================
``PATH``               :class:`~little_dist.world.local.LocalWorld` in that directory
``local:PATH``         the same, explicitly
``memory:``            a new, empty :class:`~little_dist.world.memory.MemoryWorld`
                       (process-local: another process opening ``memory:`` gets its own)
``redis://...``        :class:`~little_dist.world.redis_s3.RedisS3World` (also ``rediss://``),
                       with S3 settings from the environment (below)
=====================  ===============================================================

S3 settings for ``redis://`` specs: ``LITTLE_S3_ENDPOINT`` (endpoint URL, empty for AWS),
``LITTLE_S3_BUCKET`` (required), ``LITTLE_S3_REGION``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``. Redis and boto3 are imported only when such a spec is opened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import import_module
from typing import Any, cast

from little_dist.errors import InvalidInputError
from little_dist.world.base import World
from little_dist.world.local import LocalWorld
from little_dist.world.memory import MemoryWorld

__all__ = ["is_cross_process", "open_world", "s3_settings_from_env"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def open_world(spec: str, *, env: Mapping[str, str] | None = None) -> World:
    """The world ``spec`` names (see the module docstring); ``env`` defaults to the process's."""
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidInputError(
            "A world spec must be a directory, 'local:PATH', 'memory:' or a redis:// URL"
        )
    spec = spec.strip()
    if spec == "memory:" or spec == "memory":
        return MemoryWorld()
    if spec.startswith("local:"):
        path = spec[len("local:") :]
        if not path:
            raise InvalidInputError("World spec 'local:' needs a directory: 'local:PATH'")
        return LocalWorld(path)
    if spec.startswith(_REDIS_SCHEMES):
        settings = s3_settings_from_env(os.environ if env is None else env)
        module = import_module("little_dist.world.redis_s3")
        world_class: Any = module.RedisS3World
        return cast(World, world_class.from_url(spec, **settings))
    if "://" in spec:
        scheme = spec.split("://", 1)[0]
        raise InvalidInputError(
            f"Unknown world scheme {scheme!r} in {spec!r} "
            "(expected a directory, 'local:PATH', 'memory:' or a redis:// URL)"
        )
    return LocalWorld(spec)


def s3_settings_from_env(env: Mapping[str, str]) -> dict[str, str | None]:
    """Keyword arguments for ``RedisS3World.from_url`` read from ``env``."""
    bucket = env.get("LITTLE_S3_BUCKET")
    if not bucket:
        raise InvalidInputError("A redis:// world needs LITTLE_S3_BUCKET (and LITTLE_S3_ENDPOINT)")
    return {
        "s3_endpoint": env.get("LITTLE_S3_ENDPOINT") or None,
        "s3_bucket": bucket,
        "s3_region": env.get("LITTLE_S3_REGION") or None,
        "aws_access_key_id": env.get("AWS_ACCESS_KEY_ID") or None,
        "aws_secret_access_key": env.get("AWS_SECRET_ACCESS_KEY") or None,
    }


def is_cross_process(spec: str) -> bool:
    """Whether another process opening ``spec`` sees the same world (not ``memory:``)."""
    return spec.strip() not in ("memory:", "memory")
