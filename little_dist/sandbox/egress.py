"""The sandbox's only route out: an HTTP proxy that enforces the bash tool's network allowlist.

A sandboxed command has its own network namespace: no interface but loopback, no route out.
When a workflow grants the bash tool network access (upstream's ``network`` capability), the
session starts an :class:`EgressProxy` in the worker. For each command, the worker finds the
command's sandbox (a child of the thread that runs it, named by a marker in its command line)
and opens the proxy's listening socket *inside the sandbox's network namespace*, on
``127.0.0.1:3128``, from outside (:mod:`.egress_listener`): as root a short-lived thread enters
that namespace (``setns``), binds and comes back; otherwise a short-lived helper process (the
worker's own interpreter) joins the sandbox's user and network namespaces, binds, and hands the
socket back over a Unix socket. The proxy, in the worker, accepts on it;
``HTTP_PROXY``/``HTTPS_PROXY`` point there. So every byte that leaves goes through the proxy,
and nothing of the proxy's runs inside the sandbox: no interpreter the command could use
(``python: false`` holds), no job of the command's shell (a bare ``wait`` returns), nothing the
command can kill or trace.

The proxy allows a request only when (see :mod:`little_dist.sandbox.allowlist` for how entries
and requests are parsed and compared, never as strings):

* plain ``http://`` (the proxy sees the whole request): its URL's scheme, host, port and path
  match an entry, its method is allowed (``allowedMethods``; upstream's default, GET and HEAD,
  when absent), it carries no userinfo and no dot segment; it is forwarded as one request on a
  fresh connection (``Host`` rewritten to the URL's, hop-by-hop headers dropped, the body cut at
  its ``Content-Length``; a chunked body is refused), so nothing can ride behind it;
* ``https://`` (a ``CONNECT host:port`` tunnel, end-to-end encrypted, so the proxy sees neither
  path nor method): its host and port match an ``https`` entry;
* each address the host resolves to is public, unless ``denyPrivateRanges`` is false: an IP
  literal is checked before anything else, a name after resolution, and the connection goes to
  the address checked (no DNS rebinding between check and use).

``network: true`` is upstream's ``["https://"]`` with GET and HEAD: a tunnel to port 443 of any
public host, and no plain HTTP. ``dangerouslyAllowFullInternetAccess`` allows any host, port
and method (a tunnel to any port is then arbitrary TCP), still only to public addresses unless
``denyPrivateRanges`` is false. ``timeoutMs`` bounds resolving and connecting;
``maxResponseSize`` cuts what one connection brings back; ``maxRedirects`` is the client's: each
redirect is a new request, checked as any.

Bounded: one event-loop thread and two resolver threads per session, whatever the commands do;
at most ``LITTLE_SANDBOX_EGRESS_CONNECTIONS`` (32) connections of one command at once (more are
answered 503 and recorded); a request head must arrive within
``LITTLE_SANDBOX_EGRESS_HEAD_SECONDS`` (10 s; else 408) and fit in 16 KiB (else 431). When a
command ends, its listener and every relay of its connections are closed; :meth:`EgressProxy.close`
ends the rest. A refusal is an HTTP error the program sees, and every decision is kept
(:meth:`EgressProxy.take_decisions`, up to 1,000 a command, then one line counting the rest) for
the step's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.sandbox.allowlist import (
    AllowEntry,
    Refusal,
    Target,
    is_public,
    parse_connect_target,
    parse_entry,
    parse_request_url,
    refusal_reason,
)
from little_dist.sandbox.egress_listener import PROXY_PORT, find_sandbox, listener_in

__all__ = [
    "CONNECTIONS_ENV",
    "HEAD_SECONDS_ENV",
    "PROXY_PORT",
    "EgressDecision",
    "EgressPolicy",
    "EgressProxy",
]

#: Settings (read when a session's proxy starts): connections one command may hold at once,
#: and the seconds a request head may take to arrive.
CONNECTIONS_ENV: Final = "LITTLE_SANDBOX_EGRESS_CONNECTIONS"
HEAD_SECONDS_ENV: Final = "LITTLE_SANDBOX_EGRESS_HEAD_SECONDS"
_CONNECTIONS: Final = 32
_HEAD_SECONDS: Final = 10.0
_HEAD_LIMIT: Final = 16 * 1024
_DECISIONS_KEPT: Final = 1000
# After a refusal, what the proxy still reads (and drops) before it closes the connection.
_LINGER_BYTES: Final = 256 * 1024
_LINGER_SECONDS: Final = 2.0
_RESOLVERS: Final = 2
_CHUNK: Final = 65536
_ALL_METHODS: Final = None
_HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_TOKEN: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
_STATUS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    411: "Length Required",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class EgressDecision:
    """One request the proxy saw: what was asked and whether it went out (and if not, why)."""

    method: str
    target: str
    allowed: bool
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "target": self.target,
            "allowed": self.allowed,
            **({"reason": self.reason} if self.reason else {}),
        }


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Upstream's normalized ``network`` capability (an allowlist object), as the proxy reads it.

    ``prefixes`` are parsed into :attr:`entries` when the policy is made (a bad one raises
    :class:`~little_dist.sandbox.allowlist.AllowlistError`); ``methods`` None allows every
    method."""

    prefixes: tuple[str, ...] = ()
    methods: tuple[str, ...] | None = ("GET", "HEAD")
    deny_private: bool = True
    full_internet: bool = False
    timeout_seconds: float = 30.0
    max_response_bytes: int | None = None
    entries: tuple[AllowEntry, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(parse_entry(p) for p in self.prefixes))

    @classmethod
    def from_network(cls, network: Mapping[str, Any]) -> EgressPolicy:
        full = bool(network.get("dangerouslyAllowFullInternetAccess", False))
        methods = network.get("allowedMethods")
        timeout = network.get("timeoutMs")
        return cls(
            prefixes=tuple(network.get("allowedUrlPrefixes") or ()),
            methods=(
                _ALL_METHODS
                if full
                else ("GET", "HEAD")
                if methods is None
                else tuple(m.upper() for m in methods)
            ),
            deny_private=bool(network.get("denyPrivateRanges", True)),
            full_internet=full,
            timeout_seconds=30.0 if timeout is None else max(float(timeout) / 1000, 0.001),
            max_response_bytes=network.get("maxResponseSize"),
        )

    def check_request(self, method: str, url: str) -> Target:
        """The target of a plain-HTTP request this policy allows, or :class:`Refusal`."""
        if self.methods is not None and method not in self.methods:
            raise Refusal(f"method {method} is not allowed (allowed: {', '.join(self.methods)})")
        return self._check(parse_request_url(url))

    def check_tunnel(self, authority: str) -> Target:
        """The target of a CONNECT tunnel (``host:port``) this policy allows, or
        :class:`Refusal`."""
        return self._check(parse_connect_target(authority))

    def _check(self, target: Target) -> Target:
        address = target.host.address
        if self.deny_private and address is not None and not is_public(address):
            raise Refusal(f"{target.host.name} resolves to {address}, a private address")
        if not self.full_internet:
            reason = refusal_reason(self.entries, target)
            if reason is not None:
                raise Refusal(reason)
        return target

    def refuses_url(self, method: str, url: str) -> str | None:
        """Why a plain-HTTP request may not go out, or None (before any name is resolved)."""
        try:
            self.check_request(method, url)
        except Refusal as refusal:
            return refusal.reason
        return None

    def refuses_tunnel(self, host: str, port: int) -> str | None:
        """Why an HTTPS tunnel to ``host:port`` may not be opened, or None (before any name
        is resolved). An IPv6 ``host`` may come with or without its brackets."""
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        try:
            self.check_tunnel(f"{shown}:{port}")
        except Refusal as refusal:
            return refusal.reason
        return None


class EgressProxy:
    """The proxy of one bash session (see the module docstring); a context manager.

    Each command runs inside :meth:`command`, which opens the proxy's listener in that
    command's sandbox and closes it, and every connection of the command, when it ends."""

    def __init__(self, policy: EgressPolicy, settings_env: Mapping[str, str] | None = None) -> None:
        environ = os.environ if settings_env is None else settings_env
        self.policy = policy
        self.max_connections = _positive(environ, CONNECTIONS_ENV, _CONNECTIONS, int)
        self.head_seconds = _positive(environ, HEAD_SECONDS_ENV, _HEAD_SECONDS, float)
        #: The most connections one command held at once, over the session.
        self.peak_connections = 0
        self._lock = threading.Lock()  # the decisions
        self._state = threading.Lock()  # open or closed, and the commands
        self._decisions: list[EgressDecision] = []
        self._dropped: dict[str, int] = {}
        self._closed = False
        self._commands: set[_Command] = set()
        self._loop = asyncio.new_event_loop()
        self._executor = ThreadPoolExecutor(_RESOLVERS, thread_name_prefix="egress-resolve")
        self._loop.set_default_executor(self._executor)
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="egress-proxy", daemon=True
        )
        self._thread.start()

    @property
    def decisions(self) -> list[EgressDecision]:
        with self._lock:
            return list(self._decisions)

    def take_decisions(self) -> list[EgressDecision]:
        """The decisions since the last call (one command's)."""
        with self._lock:
            found = list(self._decisions)
            for outcome, count in sorted(self._dropped.items()):
                found.append(
                    EgressDecision(
                        "?",
                        "?",
                        False,
                        f"{count} more requests {outcome}, not kept (at most "
                        f"{_DECISIONS_KEPT} decisions a command are)",
                    )
                )
            self._decisions.clear()
            self._dropped.clear()
        return found

    def open_connections(self) -> int:
        """Connections being served now (not counting those being refused), over every
        command."""
        return sum(command.admitted for command in list(self._commands))

    @contextlib.contextmanager
    def command(self, marker: str) -> Iterator[None]:
        """Serve the command run inside this block by this thread: its sandbox is found by
        ``marker`` (a string in the sandbox's command line, unique to the command)."""
        command = _Command(self)
        with self._state:
            if self._closed:
                raise RuntimeError("the egress proxy is closed")
            self._commands.add(command)
        stop = threading.Event()
        arming = threading.Thread(
            target=self._arm,
            args=(command, marker, os.readlink("/proc/thread-self"), stop),
            name="egress-arm",
            daemon=True,
        )
        arming.start()
        try:
            yield
        finally:
            stop.set()
            arming.join()
            with self._state:
                if not self._closed:
                    self._run(command.close())
                self._commands.discard(command)

    def close(self) -> None:
        """Stop the proxy: every listener and relay of its commands ends."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            for command in list(self._commands):
                self._run(command.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> EgressProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def note(self, decision: EgressDecision) -> None:
        with self._lock:
            if len(self._decisions) < _DECISIONS_KEPT:
                self._decisions.append(decision)
            else:
                key = "allowed" if decision.allowed else "refused"
                self._dropped[key] = self._dropped.get(key, 0) + 1

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def _arm(self, command: _Command, marker: str, caller: str, stop: threading.Event) -> None:
        """Find the command's sandbox and hand the proxy a listener inside it."""
        try:
            pid = find_sandbox(marker, caller, stop)
            if pid is None:
                return
            listener = listener_in(pid)
        except OSError as exc:
            if not stop.is_set():
                self.note(
                    EgressDecision("-", "-", False, f"the egress listener could not start: {exc}")
                )
            return
        with self._state:
            try:
                if self._closed:
                    raise OSError("the egress proxy is closed")
                self._run(command.serve(listener))
            except Exception as exc:
                listener.close()
                if not self._closed:
                    self.note(EgressDecision("-", "-", False, f"the egress listener failed: {exc}"))


class _Command:
    """One command's listener and connections, on the proxy's loop."""

    def __init__(self, proxy: EgressProxy) -> None:
        self.proxy = proxy
        self.policy = proxy.policy
        self.tasks: set[asyncio.Task[None]] = set()
        self.admitted = 0  # the connections served (the others are refused: too many)
        self.server: asyncio.Server | None = None
        self.closed = False

    async def serve(self, listener: socket.socket) -> None:
        if self.closed:
            listener.close()
            return
        listener.setblocking(False)
        self.server = await asyncio.start_server(self._connection, sock=listener, limit=_HEAD_LIMIT)

    async def close(self) -> None:
        self.closed = True
        if self.server is not None:
            self.server.close()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        proxy = self.proxy
        admitted = self.admitted < proxy.max_connections
        if admitted:
            self.admitted += 1
            proxy.peak_connections = max(proxy.peak_connections, self.admitted)
        ends = [writer]  # every stream this connection opened, closed when it ends
        try:
            if not self.closed:
                await self._handle(reader, writer, admitted, ends)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # a bug of ours must end one connection, not the proxy
            proxy.note(EgressDecision("?", "?", False, f"proxy error: {exc!r}"))
        finally:
            self.tasks.discard(task)
            self.admitted -= admitted
            for end in ends:
                end.close()

    async def _handle(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        admitted: bool,
        ends: list[asyncio.StreamWriter],
    ) -> None:
        proxy = self.proxy
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), proxy.head_seconds)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:  # an empty connection is the shell's probe: nothing to record
                await self._refuse(
                    reader, writer, "?", "?", "the connection ended inside its request head", 400
                )
            return
        except asyncio.LimitOverrunError:
            reason = f"request head over {_HEAD_LIMIT} bytes"
            await self._refuse(reader, writer, "?", "?", reason, 431)
            return
        except TimeoutError:
            reason = f"request head not complete within {proxy.head_seconds:g} s"
            await self._refuse(reader, writer, "?", "?", reason, 408)
            return
        try:
            method, target, version, headers = _parse_head(head)
        except Refusal as refusal:
            await self._refuse(reader, writer, "?", "?", refusal.reason, refusal.status)
            return
        if not admitted:
            limit = proxy.max_connections
            reason = f"too many connections from this command (at most {limit} at once)"
            await self._refuse(reader, writer, method, target, reason, 503)
        elif method == "CONNECT":
            await self._tunnel(reader, writer, target, ends)
        else:
            await self._forward(reader, writer, method, target, version, headers, ends)

    async def _tunnel(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        authority: str,
        ends: list[asyncio.StreamWriter],
    ) -> None:
        try:
            target = self.policy.check_tunnel(authority)
            up_reader, up_writer = await self._open(target, ends)
        except Refusal as refusal:
            await self._refuse(reader, writer, "CONNECT", authority, refusal.reason, refusal.status)
            return
        self.proxy.note(EgressDecision("CONNECT", authority, True))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _relay(reader, writer, up_reader, up_writer, None, self.policy.max_response_bytes)

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        url: str,
        version: str,
        headers: list[tuple[str, str]],
        ends: list[asyncio.StreamWriter],
    ) -> None:
        try:
            target = self.policy.check_request(method, url)
            length = _body_length(headers)
            up_reader, up_writer = await self._open(target, ends)
        except Refusal as refusal:
            await self._refuse(reader, writer, method, url, refusal.reason, refusal.status)
            return
        self.proxy.note(EgressDecision(method, url, True))
        dropped = {"connection", "proxy-connection"}
        for name, value in headers:
            if name.lower() == "connection":
                dropped.update(t.strip().lower() for t in value.split(","))
        kept = [
            f"{name}: {value}"
            for name, value in headers
            if name.lower() not in _HOP_BY_HOP and name.lower() not in dropped
        ]
        port = "" if target.port == 80 else f":{target.port}"
        path = (target.path or "/") + (f"?{target.query}" if target.query is not None else "")
        lines = [
            f"{method} {path} {version}",
            f"Host: {target.host.shown()}{port}",
            *kept,
            *([f"Content-Length: {length}"] if length else []),
            "Connection: close",
        ]
        up_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await _relay(reader, writer, up_reader, up_writer, length, self.policy.max_response_bytes)

    async def _open(
        self, target: Target, ends: list[asyncio.StreamWriter]
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Resolve, check and connect to ``target``, pinned to the address checked; the
        stream is added to ``ends``."""
        policy = self.policy
        loop = asyncio.get_running_loop()
        host = target.host
        shown = f"{host.shown()}:{target.port}"
        try:
            if host.address is not None:
                addresses: list[Any] = [host.address]
            else:
                infos = await asyncio.wait_for(
                    loop.getaddrinfo(
                        host.name, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                    ),
                    policy.timeout_seconds,
                )
                addresses = list(dict.fromkeys(ipaddress.ip_address(i[4][0]) for i in infos))
        except (OSError, TimeoutError, ValueError) as exc:
            raise Refusal(f"cannot connect to {shown}: {exc or 'timed out'}", 502) from None
        if not addresses:
            raise Refusal(f"cannot connect to {shown}: {host.name} does not resolve", 502)
        if policy.deny_private:
            for address in addresses:
                if not is_public(address):
                    raise Refusal(f"{host.name} resolves to {address}, a private address")
        failure: BaseException | None = None
        for address in addresses:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(
                    loop.sock_connect(sock, (str(address), target.port)), policy.timeout_seconds
                )
                opened = await asyncio.open_connection(sock=sock, limit=_CHUNK)
                ends.append(opened[1])
                return opened
            except (OSError, TimeoutError) as exc:
                sock.close()
                failure = exc
        raise Refusal(f"cannot connect to {shown}: {failure or 'timed out'}", 502)

    async def _refuse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        reason: str,
        status: int,
    ) -> None:
        """Record the refusal and answer it; then read what the client still sends, a little
        (a close with unread bytes would reset the connection, and the client could lose
        the answer)."""
        self.proxy.note(EgressDecision(method, target, False, reason))
        body = f"little-dist egress proxy: {reason}\n".encode()
        head = f"HTTP/1.1 {status} {_STATUS.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        with contextlib.suppress(OSError, TimeoutError):  # the client went away, or lingers
            writer.write(head.encode() + body)
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            await asyncio.wait_for(_discard(reader, _LINGER_BYTES), _LINGER_SECONDS)


async def _discard(reader: asyncio.StreamReader, limit: int) -> None:
    while limit > 0 and (data := await reader.read(min(limit, _CHUNK))):
        limit -= len(data)


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    text = head[: -len(b"\r\n\r\n")].decode("latin-1")
    request_line, *lines = text.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[0] or not set(parts[0]) <= _TOKEN:
        raise Refusal(f"malformed request line {request_line[:200]!r}", 400)
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise Refusal(f"unsupported HTTP version {version[:20]!r}", 400)
    headers: list[tuple[str, str]] = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or not set(name) <= _TOKEN or any(c in line for c in "\r\n\0"):
            raise Refusal(f"malformed header line {line[:200]!r}", 400)
        headers.append((name, value.strip(" \t")))
    return method.upper() if method.upper() == "CONNECT" else method, target, version, headers


def _body_length(headers: list[tuple[str, str]]) -> int:
    """The request body's length: one ``Content-Length`` (or none: 0); a chunked or otherwise
    framed body is refused, so exactly one request goes out on a connection."""
    if any(name.lower() == "transfer-encoding" for name, _ in headers):
        raise Refusal("a chunked request body is not forwarded (send Content-Length)", 411)
    lengths = {value for name, value in headers if name.lower() == "content-length"}
    if not lengths:
        return 0
    if len(lengths) > 1 or not all(v.isascii() and v.isdigit() for v in lengths):
        raise Refusal(f"bad Content-Length {sorted(lengths)!r}", 400)
    return int(lengths.pop())


async def _relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
    request_body: int | None,
    response_limit: int | None,
) -> None:
    """Carry bytes both ways until the far end is done. ``request_body`` None: a tunnel (every
    byte goes up); a number: a plain request's body, after which the client's bytes are
    dropped. What comes back stops at ``response_limit``."""

    async def up() -> None:
        left = request_body
        while left is None or left > 0:
            data = await client_reader.read(_CHUNK if left is None else min(_CHUNK, left))
            if not data:
                break
            if left is not None:
                left -= len(data)
            up_writer.write(data)
            await up_writer.drain()
        if left is not None and left <= 0:
            while await client_reader.read(_CHUNK):  # one request a connection: drop the rest
                pass
        if up_writer.can_write_eof():
            with contextlib.suppress(OSError):
                up_writer.write_eof()

    async def down() -> None:
        sent = 0
        while data := await up_reader.read(_CHUNK):
            if response_limit is not None and sent + len(data) > response_limit:
                break  # past maxResponseSize: the response is cut off
            client_writer.write(data)
            await client_writer.drain()
            sent += len(data)

    uploading = asyncio.ensure_future(up())
    try:
        with contextlib.suppress(OSError, ConnectionError):
            await down()
    finally:
        uploading.cancel()
        await asyncio.gather(uploading, return_exceptions=True)


def _positive(environ: Mapping[str, str], name: str, default: Any, kind: Any) -> Any:
    given = environ.get(name)
    if not given:
        return default
    try:
        value = kind(given)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidInputError(f"{name}={given!r}: expected a number greater than 0")
    return value
