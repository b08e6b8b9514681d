"""How :class:`RedisS3World` talks to Redis: error translation and Lua scripts by EVALSHA.

No redis exception leaves the world: connection failures and timeouts become
:class:`~little_dist.errors.StorageUnavailableError` (retryable), raised from the original.

:class:`LuaScript` runs a script with one ``EVALSHA`` through ``execute_command``. redis-py's
own ``Script.__call__`` does the same with more work per call (argument tuples, a pipeline
check, a method chain); on the append path that overhead is a measurable share of an append.
A server that does not know the script yet (restarted, flushed, another server) answers
``NOSCRIPT`` without running anything, so loading it and sending again is always safe.

In a pipeline a script is queued as a plain ``EVALSHA`` too, and the pipeline is run by
:func:`execute_pipeline`, which sends a script that met ``NOSCRIPT`` again on its own.
(redis-py's registered scripts make every pipeline ask ``SCRIPT EXISTS`` first: one more
round trip per pipeline, which made a pipelined pair slower than two calls.)

A call whose connection failed after the command was sent (a timeout, a reset while
reading the reply) may have run on the server. Such a call is sent again only when it is
idempotent by construction (running it twice leaves what running it once does, and
answers the same): each :class:`LuaScript` says whether it is, and an append says it per
call (only when every event carries an occurrence id). Otherwise the failure is raised,
and the caller, who knows what the call meant, reads before it writes again. A failure
while *sending* (nothing complete reached the server) is always sent again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import select
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import redis
from redis.client import Pipeline

from little_dist.errors import StorageUnavailableError

__all__ = [
    "LuaScript",
    "ReplyLostError",
    "execute_pipeline",
    "ms",
    "redis_address",
    "redis_errors",
    "text",
    "to_storage_error",
]

Arg = str | int | bytes

_log = logging.getLogger("little.world")


def ms(seconds: float) -> int:
    """Whole milliseconds, at least 1 (a zero TTL would mean "no expiry" to PEXPIRE)."""
    return max(1, int(seconds * 1000))


def redis_address(client: Any) -> tuple[Any, ...]:
    """Where a redis-py client (or a pool's URL-made client) connects: ``(host or socket
    path, port, db)``; clients with the same address reach the same keys."""
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or kwargs.get("host", "localhost")
    return (where, int(kwargs.get("port", 6379) or 0), int(kwargs.get("db", 0) or 0))


def text(value: object) -> str:
    """A reply value as ``str``: the client is built with ``decode_responses=False``."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def to_storage_error(exc: redis.exceptions.RedisError, what: str) -> StorageUnavailableError:
    """The world's error for a redis-py failure during ``what``."""
    if isinstance(exc, ReplyLostError):
        return StorageUnavailableError(
            f"Redis connection lost during {what}, after it was sent: it may have been "
            f"applied; read before trying again ({exc})"
        )
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return StorageUnavailableError(f"Redis unreachable during {what}: {exc}")
    return StorageUnavailableError(f"Redis failed during {what}: {exc}")


class ReplyLostError(redis.exceptions.ConnectionError):
    """The command was sent but its reply was lost: it may have run on the server."""


@contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py failures inside the block (see :func:`to_storage_error`)."""
    try:
        yield
    except redis.exceptions.RedisError as exc:
        raise to_storage_error(exc, what) from exc


class _Lane(threading.local):
    """The connection one thread keeps for the scripts of one pool (and its process)."""

    connection: Any = None
    pid: int = 0
    #: hiredis's packer, when it is what the connection packs commands with: called
    #: directly, without redis-py's per-argument pass (a script's call has dozens).
    pack: Any = None
    #: A poll object on the connection's socket, and that socket (see ``_stale``).
    poller: Any = None
    sock: Any = None
    #: Gives the connection back to its pool when the thread ends (see :class:`_Held`).
    held: Any = None
    #: A call is waiting for its reply on the connection while the thread does something
    #: else (:func:`_meanwhile`): a call made meanwhile takes another connection.
    busy: bool = False


class _Held:
    """A lane's connection, checked out of its pool: given back when the thread that held
    it ends (its thread-local lane goes, and this with it) or when it is dropped. Without
    it, every thread that ever sent a script would keep a connection of the pool for good:
    short-lived threads (a thread pool per run) exhausted redis-py's 100 and every call
    failed with "Too many connections"."""

    __slots__ = ("connection", "pid", "pool")

    def __init__(self, pool: Any, connection: Any) -> None:
        self.pool: Any = pool
        self.connection: Any = connection
        self.pid = os.getpid()

    def give_back(self, *, close: bool) -> None:
        connection, self.connection = self.connection, None
        if connection is None or self.pid != os.getpid():
            return  # (a forked child's copy: the pool reset itself there)
        with suppress(Exception):
            if close:
                connection.disconnect()
            self.pool.release(connection)

    def __del__(self) -> None:
        self.give_back(close=False)


_lanes: weakref.WeakKeyDictionary[Any, _Lane] = weakref.WeakKeyDictionary()
_lanes_lock = threading.Lock()


def _lane_for(pool: Any) -> _Lane:
    with _lanes_lock:
        lane = _lanes.get(pool)
        if lane is None:
            lane = _lanes[pool] = _Lane()
        return lane


def _lane_connection(client: redis.Redis, lane: _Lane) -> Any:
    """The calling thread's own connection of ``client``'s pool (``None``: use redis-py's
    usual path, as for a single-connection client, whose one connection is not ours)."""
    if lane.busy:
        return None  # (a reply is due on it: redis-py's own path, another connection)
    connection = lane.connection
    if connection is not None and lane.pid == os.getpid():
        if not _stale(lane, connection):
            return connection
        _drop(lane, connection, client.connection_pool)
    if getattr(client, "connection", None) is not None:
        return None
    connection = lane.connection = client.connection_pool.get_connection()
    lane.held = _Held(client.connection_pool, connection)
    lane.pid = os.getpid()
    lane.pack = _hiredis_pack if _packs_with_hiredis(connection) else None
    return connection


_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - the redis extra brings hiredis
    _hiredis_pack = None


def _packs_with_hiredis(connection: Any) -> bool:
    """Whether ``connection`` packs commands with hiredis (so that packing them with it
    here sends the same bytes)."""
    from redis.connection import HiredisRespSerializer

    packer = getattr(connection, "_command_packer", None)
    return _hiredis_pack is not None and type(packer) is HiredisRespSerializer


def _packed(lane: _Lane, connection: Any, commands: Sequence[tuple[Any, ...]]) -> Any:
    """The pipeline's commands in the protocol: with hiredis in one call per command where
    the connection packs with it (redis-py's own pass costs a Python call per argument, and
    the commit's pipeline has a hundred); redis-py's way for a command whose name is two
    words (``"CLIENT SETNAME"``: redis-py splits it) or an argument hiredis does not take."""
    pack = lane.pack
    if pack is not None and not any(" " in str(args[0]) for args in commands):
        try:
            return [b"".join([pack(args) for args in commands])]
        except TypeError:
            pass
    return connection.pack_commands(commands)


def _stale(lane: _Lane, connection: Any) -> bool:
    """Whether the idle connection has something to read: the server closed it (restarted,
    killed idle clients). A call sent on it would fail as it reads the reply, and a call
    that may have run is not sent again; so it is replaced before anything is sent. The
    same check redis-py makes on every checkout from its pool, as one ``poll`` (1 us)."""
    sock = getattr(connection, "_sock", None)
    if sock is None:
        return False  # not connected: it connects as it sends
    if lane.sock is not sock:
        lane.poller = select.poll()
        lane.poller.register(sock, select.POLLIN)
        lane.sock = sock
    return bool(lane.poller.poll(0))


def _drop(lane: _Lane, connection: Any, pool: Any) -> None:
    """Forget a connection that failed (the next call takes a new one), giving it back to
    its pool closed."""
    lane.connection = None
    held, lane.held = lane.held, None
    if held is not None and held.connection is connection:
        held.give_back(close=True)
        return
    with suppress(Exception):
        connection.disconnect()
        pool.release(connection)


class LuaScript:
    """One Lua script of a client, run by ``EVALSHA`` (loaded on ``NOSCRIPT``).

    Each thread sends the scripts of a pool over a connection of its own, kept out of the
    pool, straight through the connection: redis-py's per-command path (checking a
    connection out and back in, retry wrappers, metrics hooks) costs about 20 us, a
    quarter of a round trip here, and the engine's hot path is made of these calls. Any
    failure on that connection drops it and sends the script again the usual way, with
    redis-py's own retries; a reply that is an error raises as it would there.
    """

    def __init__(self, client: redis.Redis, source: str, *, idempotent: bool) -> None:
        self._client = client
        # Typed here once: redis-py leaves execute_command unannotated.
        self._execute: Callable[..., Any] = client.execute_command
        self._pool = client.connection_pool
        self._lane = _lane_for(self._pool)
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8")).hexdigest()
        #: Whether a call that may have run is sent again (see the module docstring).
        self.idempotent = idempotent

    def __call__(
        self,
        keys: Sequence[str],
        args: Sequence[Arg],
        *,
        idempotent: bool | None = None,
        meanwhile: Callable[[], None] | None = None,
    ) -> Any:
        """Run the script; redis-py exceptions propagate (callers translate them), among
        them :class:`ReplyLostError` for a call that may have run and is not sent again.
        ``idempotent`` overrides the script's own flag for this call. ``meanwhile`` is
        called once the script is sent over the thread's own connection, before its reply
        is read (not otherwise; see :func:`_meanwhile`)."""
        resend = self.idempotent if idempotent is None else idempotent
        try:
            return self._send(keys, args, resend, meanwhile)
        except redis.exceptions.NoScriptError:
            self._client.script_load(self.source)
            return self._execute("EVALSHA", self.sha, len(keys), *keys, *args)

    def _send(
        self,
        keys: Sequence[str],
        args: Sequence[Arg],
        resend: bool,
        meanwhile: Callable[[], None] | None = None,
    ) -> Any:
        connection = _lane_connection(self._client, self._lane)
        if connection is not None:
            sent = False
            try:
                pack = self._lane.pack
                if pack is not None:
                    connection.send_packed_command(
                        [pack(("EVALSHA", self.sha, len(keys), *keys, *args))]
                    )
                else:
                    connection.send_command("EVALSHA", self.sha, len(keys), *keys, *args)
                sent = True
                if meanwhile is not None:
                    _meanwhile(self._lane, meanwhile)
                return connection.read_response()
            except redis.exceptions.ResponseError:
                raise  # the server answered (NOSCRIPT included): the connection is fine
            except Exception as error:
                _drop(self._lane, connection, self._pool)
                if sent and not resend:
                    raise ReplyLostError(f"reply lost, the script may have run: {error}") from error
        return self._execute("EVALSHA", self.sha, len(keys), *keys, *args)

    def queue(self, pipe: Pipeline, keys: Sequence[str], args: Sequence[Arg]) -> None:
        """Queue the script on a pipeline run by :func:`execute_pipeline`."""
        send: Callable[..., Any] = pipe.execute_command
        send("EVALSHA", self.sha, len(keys), *keys, *args)
        queued: _Queued = pipe.__dict__.setdefault(_QUEUED, {})
        queued[len(pipe.command_stack) - 1] = (self, keys, args)


# Scripts queued on a pipeline, by position: (script, keys, args), kept on the pipeline.
_QUEUED = "_little_scripts"
_Queued = dict[int, tuple[LuaScript, Sequence[str], Sequence[Arg]]]


def execute_pipeline(
    pipe: Pipeline, *, idempotent: bool = True, meanwhile: Callable[[], None] | None = None
) -> list[Any]:
    """``pipe.execute()``; a queued :class:`LuaScript` the server did not know is loaded and
    sent again (alone, after the rest of the pipeline ran). Other errors raise.

    ``idempotent``: whether the whole pipeline may be sent again after its replies were
    lost (it may have run); if not, :class:`ReplyLostError` is raised instead.
    ``meanwhile``: called once the pipeline is sent over the thread's own connection,
    before its replies are read (not otherwise; see :func:`_meanwhile`)."""
    queued: _Queued = pipe.__dict__.get(_QUEUED, {})
    replies = _send_over_lane(pipe, idempotent, meanwhile)
    if replies is None:
        replies = pipe.execute(raise_on_error=False)
    for index, reply in enumerate(replies):
        if not isinstance(reply, Exception):
            continue
        entry = queued.get(index)
        if entry is None or not isinstance(reply, redis.exceptions.NoScriptError):
            raise reply
        script, keys, args = entry
        replies[index] = script(keys, args)
    return replies


def _send_over_lane(
    pipe: Pipeline, resend: bool, meanwhile: Callable[[], None] | None = None
) -> list[Any] | None:
    """The pipeline's commands sent over the thread's own connection (as
    :class:`LuaScript` does), their raw replies in order, error replies as exceptions;
    ``None`` when that connection failed or is not to be used (then redis-py runs it).
    :class:`ReplyLostError` when the replies were lost and ``resend`` is false."""
    client: Any = pipe
    lane = _lane_for(pipe.connection_pool)
    connection = _lane_connection(client, lane)
    if connection is None:
        return None
    commands = [args for args, _ in pipe.command_stack]
    replies: list[Any] = []
    sent = False
    try:
        connection.send_packed_command(_packed(lane, connection, commands))
        sent = True
        if meanwhile is not None:
            _meanwhile(lane, meanwhile)
        for _ in commands:
            try:
                replies.append(connection.read_response())
            except redis.exceptions.ResponseError as error:
                replies.append(error)
    except Exception as error:
        _drop(lane, connection, pipe.connection_pool)
        if sent and not resend:
            raise ReplyLostError(f"replies lost, the pipeline may have run: {error}") from error
        return None
    return replies


def _meanwhile(lane: _Lane, work: Callable[[], None]) -> None:
    """Run ``work`` while a call's reply is due on the lane's connection (the caller reads
    it next): a call ``work`` makes goes over another connection, and an exception it
    raises is logged, not raised (the call's reply must still be read)."""
    lane.busy = True
    try:
        work()
    except Exception:
        _log.exception("work done while a Redis reply was due failed")
    finally:
        lane.busy = False
