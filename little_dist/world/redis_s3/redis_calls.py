"""How :class:`RedisS3World` talks to Redis: error translation and Lua scripts by EVALSHA.

No redis exception leaves the world: connection failures and timeouts become
:class:`~little_dist.errors.StorageUnavailableError` (retryable), raised from the original.

:class:`LuaScript` runs a script with one ``EVALSHA`` through ``execute_command``. redis-py's
own ``Script.__call__`` does the same with more work per call (argument tuples, a pipeline
check, a method chain); on the append path that overhead is a measurable share of an append.
A server that does not know the script yet (restarted, flushed, another server) answers
``NOSCRIPT`` without running anything, so loading it and sending again is always safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.client import Pipeline

from little_dist.errors import StorageUnavailableError

__all__ = ["LuaScript", "ms", "redis_errors", "text", "to_storage_error"]

Arg = str | int | bytes


def ms(seconds: float) -> int:
    """Whole milliseconds, at least 1 (a zero TTL would mean "no expiry" to PEXPIRE)."""
    return max(1, int(seconds * 1000))


def text(value: object) -> str:
    """A reply value as ``str``: the client is built with ``decode_responses=False``."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def to_storage_error(exc: redis.exceptions.RedisError, what: str) -> StorageUnavailableError:
    """The world's error for a redis-py failure during ``what``."""
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return StorageUnavailableError(f"Redis unreachable during {what}: {exc}")
    return StorageUnavailableError(f"Redis failed during {what}: {exc}")


@contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py failures inside the block (see :func:`to_storage_error`)."""
    try:
        yield
    except redis.exceptions.RedisError as exc:
        raise to_storage_error(exc, what) from exc


class LuaScript:
    """One Lua script of a client, run by ``EVALSHA`` (loaded on ``NOSCRIPT``)."""

    def __init__(self, client: redis.Redis, source: str) -> None:
        self._client = client
        # Typed here once: redis-py leaves execute_command unannotated.
        self._execute: Callable[..., Any] = client.execute_command
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8")).hexdigest()
        # redis-py's Script object: pipelines load scripts through it before they execute.
        self._registered = client.register_script(source)

    def __call__(self, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run the script; redis-py exceptions propagate (callers translate them)."""
        try:
            return self._execute("EVALSHA", self.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            self._client.script_load(self.source)
            return self._execute("EVALSHA", self.sha, len(keys), *keys, *args)

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Arg]) -> None:
        """Queue the script on a pipeline, which loads it first if the server lacks it."""
        self._registered(keys=list(keys), args=list(args), client=pipe)
