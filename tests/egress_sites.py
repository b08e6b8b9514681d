"""Servers on the host's loopback for the egress tests: what an allowed request reaches."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["SITE_THREAD", "Request", "Site", "serving"]

#: The name of the site's threads (one a connection), which a count of the proxy's leaves out.
SITE_THREAD = "egress-test-site"


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Site:
    """A server on the host's loopback: answers each HTTP request on a connection (it does
    not stop at ``Connection: close``, so a second request smuggled behind the first would be
    seen), answers ``PING`` with ``PONG`` (a tunnel's far end), and records what it got."""

    port: int
    requests: list[Request] = field(default_factory=list)
    open_connections: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self, connection: socket.socket) -> None:
        with self.lock:
            self.open_connections += 1
        try:
            self._serve(connection)
        except OSError:
            pass
        finally:
            connection.close()
            with self.lock:
                self.open_connections -= 1

    def _serve(self, connection: socket.socket) -> None:
        data = b""
        while True:
            while b"\r\n\r\n" not in data and not data.startswith(b"PING"):
                chunk = connection.recv(65536)
                if not chunk:
                    return
                data += chunk
            if data.startswith(b"PING"):
                connection.sendall(b"PONG\n")
                while connection.recv(65536):
                    pass
                return
            head, _, data = data.partition(b"\r\n\r\n")
            line, *lines = head.decode("latin-1").split("\r\n")
            method, path, _ = line.split(" ", 2)
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)
            }
            length = int(headers.get("content-length", "0"))
            while len(data) < length:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                data += chunk
            data = data[length:]
            with self.lock:
                self.requests.append(Request(method, path, headers))
            body = f"hello from {path}\n".encode()
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )


def _listen(family: socket.AddressFamily, host: str, ports: range | None) -> socket.socket:
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if ports is None:
        listener.bind((host, 0))
    else:
        for port in ports:
            with contextlib.suppress(OSError):
                listener.bind((host, port))
                break
        else:
            raise RuntimeError(f"no free port in {ports}")
    listener.listen(128)
    return listener


@contextlib.contextmanager
def serving(family: socket.AddressFamily, host: str, ports: range | None = None) -> Iterator[Site]:
    listener = _listen(family, host, ports)
    site = Site(listener.getsockname()[1])

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(
                target=site.serve, args=(connection,), name=SITE_THREAD, daemon=True
            ).start()

    threading.Thread(target=accept, name=SITE_THREAD, daemon=True).start()
    try:
        yield site
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        listener.close()
