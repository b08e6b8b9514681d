"""A tiny HTTP receiver of run callbacks for the tests: ``http.server`` in a thread.

:class:`Receiver` listens on a reserved port (:mod:`tests.ports`) once :meth:`Receiver.up`
is called, records every POST (headers with lower-case names, body) and answers
``status`` (200 by default); :meth:`Receiver.down` closes the socket, so that the fleet's
attempts meet a refused connection, as they would a receiver that is down.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.ports import reserve_port

__all__ = ["Delivery", "Receiver"]


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    port: int = field(default_factory=reserve_port)
    status: int = 200
    received: list[Delivery] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/runs?source=test"

    def up(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                headers = {name.lower(): value for name, value in self.headers.items()}
                with receiver._lock:
                    receiver.received.append(Delivery(self.path, headers, body))
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self._server = server
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def of(self, run_id: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.received if d.json().get("runId") == run_id]
