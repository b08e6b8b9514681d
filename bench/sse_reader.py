"""The SSE watchers of ``bench/http_api.py`` (b), in a process of their own.

Each watcher is one HTTP/1.1 connection (``GET /v1/runs/{id}/events`` with
``Last-Event-ID: 1``) read straight off its socket (one ``selectors`` loop for all of them):
the reader only finds each SSE message's ``id:`` line and notes when it came
(``time.monotonic()``, the machine's one monotonic clock, which the appending process reads
too). Reading a thousand streams through
a full HTTP client cost more CPU per event than the server spent sending it, and in the
appender's process it also took the appender's turns: the figure measured the reader.

::

    python bench/sse_reader.py SPEC.json OUT.json

``SPEC`` holds ``{"host", "port", "token", "runs": [...], "watchers", "events",
"timeout"}``; the watchers are spread over the runs in turn. ``OUT`` gets
``{"received": [[watcher, run, sequence, at], ...], "errors": [...], "cpu": seconds}``
once every watcher has its ``events`` events (or ``timeout`` seconds passed). The line
``open N`` goes to stdout once every request is sent.
"""

from __future__ import annotations

import json
import re
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

#: An SSE message's id line: at the stream's start, after a line's end, or after a chunk's
#: size line (``\r\n``); data lines are JSON and hold no raw line break.
_ID = re.compile(rb"(?:^|\n)id: (\d+)\n")


@dataclass
class Watcher:
    index: int
    run_id: str
    sock: socket.socket
    got: int = 0
    head: bool = False  # (the response's head read)
    buffer: bytes = b""
    received: list[tuple[int, str, int, float]] = field(default_factory=list)


def connect(spec: dict[str, Any], index: int, run_id: str) -> Watcher:
    sock = socket.create_connection((spec["host"], spec["port"]), timeout=60)
    sock.sendall(
        (
            f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {spec['host']}\r\n"
            f"Authorization: Bearer {spec['token']}\r\nLast-Event-ID: 1\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
    )
    sock.setblocking(False)
    return Watcher(index, run_id, sock)


def take(watcher: Watcher, data: bytes, now: float, errors: list[str]) -> bool:
    """Note the ids in ``data``; whether the watcher is done."""
    buffer = watcher.buffer + data
    if not watcher.head:
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            watcher.buffer = buffer
            return False
        if not buffer.startswith(b"HTTP/1.1 200"):
            errors.append(f"watcher {watcher.index}: {buffer.splitlines()[0].decode()}")
            return True
        watcher.head = True
        buffer = buffer[end + 2 :]  # (from the head's last "\r\n")
    cut = buffer.rfind(b"\n") + 1  # (complete lines only)
    for match in _ID.finditer(buffer, 0, cut):
        watcher.received.append((watcher.index, watcher.run_id, int(match.group(1)), now))
        watcher.got += 1
    watcher.buffer = buffer[cut - 1 :] if cut else buffer  # (keeps the "\n" before a line)
    return False


def read_all(spec: dict[str, Any]) -> dict[str, Any]:
    """Every watcher's stream until each has its events (or the time is up)."""
    errors: list[str] = []
    runs = spec["runs"]
    watchers = [connect(spec, index, runs[index % len(runs)]) for index in range(spec["watchers"])]
    print("open", len(watchers), flush=True)
    selector = selectors.DefaultSelector()
    for watcher in watchers:
        selector.register(watcher.sock, selectors.EVENT_READ, watcher)
    left = len(watchers)
    deadline = time.monotonic() + spec["timeout"]
    while left and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=1.0):
            watcher = key.data
            try:
                data = watcher.sock.recv(65536)
            except BlockingIOError:
                continue
            now = time.monotonic()
            done = not data or take(watcher, data, now, errors) or watcher.got >= spec["events"]
            if not data:
                errors.append(f"watcher {watcher.index}: closed after {watcher.got} events")
            if done:
                selector.unregister(watcher.sock)
                watcher.sock.close()
                left -= 1
    if left:
        errors.append(f"{left} watcher(s) had not got every event in time")
    received = [item for watcher in watchers for item in watcher.received]
    return {"received": received, "errors": errors}


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path, encoding="utf-8") as file:
        spec = json.load(file)
    out = read_all(spec)
    out["cpu"] = time.process_time()  # (this process's whole CPU time: it is gone when read)
    with open(out_path, "w", encoding="utf-8") as file:
        json.dump(out, file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
