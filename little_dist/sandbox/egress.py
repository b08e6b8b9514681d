"""The sandbox's only route out: an HTTP proxy that enforces the bash tool's network allowlist.

A sandboxed command has its own network namespace: no interface but loopback, no route out.
When a workflow grants the bash tool network access (upstream's ``network`` capability), the
session starts an :class:`EgressProxy` in the worker, listening on a Unix socket in a folder
mounted into the sandbox; a small forwarder inside the sandbox (:data:`FORWARDER`, run by the
system's Python before the command) listens on ``127.0.0.1:3128`` and carries each connection
to that socket, and ``HTTP_PROXY``/``HTTPS_PROXY`` point there. So every byte that leaves goes
through the proxy, which allows a request only when:

* its URL starts with one of the allowed prefixes (``allowedUrlPrefixes``) and its method is
  allowed (``allowedMethods``) — for plain ``http://``, where the proxy sees both;
* for ``https://`` (a ``CONNECT host:port`` tunnel, end-to-end encrypted, so the proxy sees
  neither path nor method) its scheme, host and port match an allowed ``https://`` prefix;
* the host's address is public, unless ``denyPrivateRanges`` is false: loopback, private,
  link-local (cloud metadata), multicast and reserved ranges are refused, checked on the
  address actually connected to (no DNS rebinding between check and use).

``dangerouslyAllowFullInternetAccess`` allows any public host. A refusal is an HTTP 403 the
program sees, and every decision is kept (:attr:`EgressProxy.decisions`) for the step's events.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import socketserver
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = ["FORWARDER", "PROXY_PORT", "EgressDecision", "EgressPolicy", "EgressProxy"]

#: Where the forwarder listens inside the sandbox.
PROXY_PORT: Final = 3128
_HEAD_LIMIT: Final = 64 * 1024
_CHUNK: Final = 65536

#: The forwarder run inside the sandbox: ``python3 forward.py SOCKET``. It listens on
#: 127.0.0.1:3128, says it is ready by creating /tmp/.egress-ready, and pipes each connection
#: to the proxy's Unix socket.
FORWARDER: Final = """
import os, socket, sys, threading
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(sys.argv[1])
    except OSError:
        client.close()
        return
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
    pipe(client, upstream)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", PORT))
listener.listen(64)
open("/tmp/.egress-ready", "w").close()
while True:
    client, _ = listener.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
""".replace("PORT", str(PROXY_PORT))


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
    """Upstream's normalized ``network`` capability (an allowlist object), as the proxy reads it."""

    prefixes: tuple[str, ...] = ()
    methods: tuple[str, ...] | None = None
    deny_private: bool = True
    full_internet: bool = False
    timeout_seconds: float = 30.0
    max_response_bytes: int | None = None

    @classmethod
    def from_network(cls, network: Mapping[str, Any]) -> EgressPolicy:
        methods = network.get("allowedMethods")
        timeout = network.get("timeoutMs")
        return cls(
            prefixes=tuple(network.get("allowedUrlPrefixes") or ()),
            methods=None if methods is None else tuple(m.upper() for m in methods),
            deny_private=bool(network.get("denyPrivateRanges", True)),
            full_internet=bool(network.get("dangerouslyAllowFullInternetAccess", False)),
            timeout_seconds=30.0 if timeout is None else max(float(timeout) / 1000, 0.001),
            max_response_bytes=network.get("maxResponseSize"),
        )

    def refuses_url(self, method: str, url: str) -> str | None:
        """Why a plain-HTTP request may not go out, or None."""
        if self.methods is not None and method.upper() not in self.methods:
            return f"method {method} is not allowed (allowed: {', '.join(self.methods)})"
        if self.full_internet or any(url.startswith(prefix) for prefix in self.prefixes):
            return None
        return f"{url} matches no allowed URL prefix"

    def refuses_tunnel(self, host: str, port: int) -> str | None:
        """Why an HTTPS tunnel to ``host:port`` may not be opened, or None: some allowed prefix
        must start the URL ``https://host[:port]/`` (``https://`` allows every host) or name a
        path on it (``https://host/v1/``: the tunnel cannot see paths, so the host decides)."""
        if self.full_internet:
            return None
        origin = f"https://{host.lower()}{'' if port == 443 else f':{port}'}/"
        for prefix in self.prefixes:
            if origin.startswith(prefix.lower()) or prefix.lower().startswith(origin):
                return None
        return f"{origin.rstrip('/')} matches no allowed https:// URL prefix"


def _address(host: str, port: int, policy: EgressPolicy) -> tuple[str, int]:
    """The address to connect to, checked against the private ranges (raises OSError)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{host} does not resolve")
    address = str(infos[0][4][0])
    ip = ipaddress.ip_address(address)
    private = (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )
    if policy.deny_private and private:
        raise PermissionError(f"{host} resolves to {address}, a private address")
    return address, port


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        head = self._head()
        if head is None:
            return
        request_line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ", 2)
        except ValueError:
            self._refuse("?", "?", "malformed request line", 400)
            return
        if method.upper() == "CONNECT":
            self._tunnel(target)
        else:
            self._forward(method, target, version, rest)

    def _head(self) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.connection.recv(_CHUNK)
            if not chunk or len(data) > _HEAD_LIMIT:
                return None
            data += chunk
        head, _, self._early = data.partition(b"\r\n\r\n")
        return head

    def _tunnel(self, target: str) -> None:
        host, _, port_text = target.rpartition(":")
        port = int(port_text) if port_text.isdigit() else 443
        reason = self.server.policy.refuses_tunnel(host, port)
        if reason is None:
            upstream = self._connect(host, port, "CONNECT", target)
            if upstream is None:
                return
            self.connection.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if self._early:
                upstream.sendall(self._early)
            self._relay(upstream)
            return
        self._refuse("CONNECT", target, reason)

    def _forward(self, method: str, url: str, version: str, rest: bytes) -> None:
        reason = self.server.policy.refuses_url(method, url)
        parts = urlsplit(url)
        if reason is None and (parts.scheme != "http" or parts.hostname is None):
            reason = f"{url}: only absolute http:// URLs go through the proxy"
        if reason is not None:
            self._refuse(method, url, reason)
            return
        assert parts.hostname is not None
        upstream = self._connect(parts.hostname, parts.port or 80, method, url)
        if upstream is None:
            return
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        headers = [
            line
            for line in rest.split(b"\r\n")
            if line and not line.lower().startswith((b"proxy-", b"connection:"))
        ]
        head = f"{method} {path} {version}\r\n".encode("latin-1")
        head += b"\r\n".join([*headers, b"Connection: close"]) + b"\r\n\r\n"
        upstream.sendall(head + self._early)
        self._relay(upstream)

    def _connect(self, host: str, port: int, method: str, target: str) -> socket.socket | None:
        policy = self.server.policy
        try:
            address = _address(host, port, policy)
            upstream = socket.create_connection(address, timeout=policy.timeout_seconds)
        except PermissionError as exc:
            self._refuse(method, target, str(exc))
            return None
        except OSError as exc:
            self._refuse(method, target, f"cannot connect to {host}:{port}: {exc}", 502)
            return None
        self.server.note(EgressDecision(method, target, True))
        return upstream

    def _relay(self, upstream: socket.socket) -> None:
        limit = self.server.policy.max_response_bytes
        up = threading.Thread(target=_pipe, args=(self.connection, upstream, None), daemon=True)
        up.start()
        _pipe(upstream, self.connection, limit)
        up.join(timeout=1)

    def _refuse(self, method: str, target: str, reason: str, status: int = 403) -> None:
        self.server.note(EgressDecision(method, target, False, reason))
        body = f"little-dist egress proxy: {reason}\n".encode()
        head = f"HTTP/1.1 {status} Forbidden\r\nContent-Type: text/plain\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        with contextlib.suppress(OSError):  # the client went away
            self.connection.sendall(head.encode() + body)


def _pipe(source: socket.socket, sink: socket.socket, limit: int | None) -> None:
    sent = 0
    try:
        while data := source.recv(_CHUNK):
            if limit is not None and sent + len(data) > limit:
                break  # past maxResponseSize: the response is cut off
            sink.sendall(data)
            sent += len(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, policy: EgressPolicy) -> None:
        super().__init__(path, _Handler)
        self.policy = policy
        self.decisions: list[EgressDecision] = []
        self._lock = threading.Lock()

    def note(self, decision: EgressDecision) -> None:
        with self._lock:
            self.decisions.append(decision)

    def taken(self, clear: bool) -> list[EgressDecision]:
        with self._lock:
            found = list(self.decisions)
            if clear:
                self.decisions.clear()
        return found


class EgressProxy:
    """The proxy of one bash session (see the module docstring); a context manager.

    :attr:`folder` is mounted into the sandbox (the socket ``proxy.sock`` and the forwarder
    ``forward.py``)."""

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        self._folder = tempfile.TemporaryDirectory(prefix="little-egress-")
        self.folder = Path(self._folder.name)
        self.folder.chmod(0o755)
        (self.folder / "forward.py").write_text(FORWARDER)
        (self.folder / "forward.py").chmod(0o644)
        socket_path = self.folder / "proxy.sock"
        self._server = _Server(str(socket_path), policy)
        socket_path.chmod(0o777)  # the sandbox's own user connects to it
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="egress-proxy", daemon=True
        )
        self._thread.start()

    @property
    def decisions(self) -> list[EgressDecision]:
        return self._server.taken(clear=False)

    def take_decisions(self) -> list[EgressDecision]:
        """The decisions since the last call (one command's)."""
        return self._server.taken(clear=True)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._folder.cleanup()

    def __enter__(self) -> EgressProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
