"""Open a world from a one-line spec: what ``--world`` and ``LITTLE_WORLD`` hold.

=====================  ===============================================================
spec                   world
=====================  ===============================================================
``PATH``               :class:`~little_dist.world.local.LocalWorld` in that directory
``local:PATH``         the same, explicitly
``memory:``            a new, empty :class:`~little_dist.world.in_process.MemoryWorld`
                       (process-local: another process opening ``memory:`` gets its own)
``redis://...``        :class:`~little_dist.world.redis_s3.RedisS3World` (also ``rediss://``),
                       with S3 settings from the environment (below)
=====================  ===============================================================

For a ``redis://`` spec everything else comes from the settings (:mod:`little_dist.settings`,
read from the environment): S3 (``LITTLE_S3_ENDPOINT``, ``LITTLE_S3_BUCKET``,
``LITTLE_S3_REGION``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), the signal stream and
the archive TTL: :func:`open_world` of such a spec is :func:`world_from_settings` with
``LITTLE_WORLD`` set to it, the one way a process opens the fleet's world. Redis and boto3 are
imported only when such a spec is opened.

**The fleet's world** (:func:`world_from_settings`).

The fleet's world, built one way from :class:`~little_dist.settings.Settings`.

Every fleet process (worker, scheduler, client, the fleet CLI commands) opens its world with
:func:`world_from_settings`, so they all agree on where the log lives and, above all, on the
signal stream: appends signal the scheduler through ``settings.signal_stream``, and a worker
writing to another stream than the one the scheduler reads would leave runs unnoticed until
the next sweep.

The spec is ``LITTLE_WORLD`` (default: ``LITTLE_REDIS_URL`` when an S3 bucket is set). For a
``redis://`` spec the world's own options (``key_prefix``, ``s3_prefix``, ``archive_ttl``,
``signal_stream``, ``hot_artifact_limit``) may be given in the query; ``signal_stream`` and
``archive_ttl`` are added from the settings when absent, and a ``signal_stream`` that
differs from the settings' is refused. S3 comes from the settings (``LITTLE_S3_*``, ``AWS_*``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from little_dist.errors import InvalidInputError
from little_dist.settings import Settings, load_settings, mask_url
from little_dist.world.base import World
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld

__all__ = [
    "fleet_redis_url",
    "fleet_world_spec",
    "is_cross_process",
    "open_world",
    "redis_url_of",
    "world_from_settings",
]

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
        given = os.environ if env is None else env
        return world_from_settings(load_settings({**given, "LITTLE_WORLD": spec}))
    if "://" in spec:
        scheme = spec.split("://", 1)[0]
        raise InvalidInputError(
            f"Unknown world scheme {scheme!r} in {spec!r} "
            "(expected a directory, 'local:PATH', 'memory:' or a redis:// URL)"
        )
    return LocalWorld(spec)


def is_cross_process(spec: str) -> bool:
    """Whether another process opening ``spec`` sees the same world (not ``memory:``)."""
    return spec.strip() not in ("memory:", "memory")


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def fleet_world_spec(settings: Settings) -> str:
    """The world spec the fleet uses, with the settings' signal stream filled in."""
    spec = settings.world
    if spec is None:
        if not settings.s3_bucket:
            raise InvalidInputError(
                "the fleet needs a world: set LITTLE_WORLD (a redis:// URL, with "
                "LITTLE_S3_BUCKET and LITTLE_S3_ENDPOINT for its artifacts)"
            )
        spec = settings.redis_url
    spec = spec.strip()
    if not spec.startswith(_REDIS_SCHEMES):
        return spec
    parts = urlsplit(spec)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = dict(query)
    stream = given.get("signal_stream")
    if stream and stream != settings.signal_stream:
        raise InvalidInputError(
            f"LITTLE_WORLD={mask_url(spec)!r} names signal_stream={stream!r} but "
            f"LITTLE_SIGNAL_STREAM is {settings.signal_stream!r}: the workers would signal a "
            "stream the scheduler does not read; make them agree (or drop it from the URL)"
        )
    if not stream:
        query = [(k, v) for k, v in query if k != "signal_stream"]
        query.append(("signal_stream", settings.signal_stream))
    if "archive_ttl" not in given:
        query.append(("archive_ttl", _format_seconds(settings.archive_ttl)))
    return urlunsplit(parts._replace(query=urlencode(query)))


def redis_url_of(spec: str) -> str:
    """A ``redis://`` world spec without the world's own query options (redis-py would
    refuse them): the URL of the Redis the world lives in."""
    parts = urlsplit(spec)
    from little_dist.world.redis_s3.world import URL_OPTIONS as options

    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in options]
    return urlunsplit(parts._replace(query=urlencode(query)))


def fleet_redis_url(settings: Settings) -> str | None:
    """The Redis the fleet's world lives in, with its signal stream (``None``: the world is
    not on Redis)."""
    spec = fleet_world_spec(settings)
    return redis_url_of(spec) if spec.startswith(_REDIS_SCHEMES) else None


def world_from_settings(settings: Settings) -> World:
    """Open the fleet's world (see the module docstring). The caller closes it."""
    spec = fleet_world_spec(settings)
    if not spec.startswith(_REDIS_SCHEMES):
        return open_world(spec)
    if not settings.s3_bucket:
        raise InvalidInputError(
            f"LITTLE_WORLD={mask_url(spec)!r} keeps artifacts in S3: set LITTLE_S3_BUCKET "
            "(and LITTLE_S3_ENDPOINT for a non-AWS store)"
        )
    from little_dist.world.redis_s3 import RedisS3World

    def secret(value: object) -> str | None:
        getter = getattr(value, "get_secret_value", None)
        return cast(str, getter()) if getter is not None else None

    return RedisS3World.from_url(
        spec,
        s3_endpoint=settings.s3_endpoint,
        s3_bucket=settings.s3_bucket,
        s3_region=settings.s3_region,
        aws_access_key_id=secret(settings.aws_access_key_id),
        aws_secret_access_key=secret(settings.aws_secret_access_key),
    )
