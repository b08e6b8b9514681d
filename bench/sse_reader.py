"""The SSE watchers of ``bench/http_api.py`` (b), in a process of their own.

Each watcher is one HTTP/1.1 connection (``GET /v1/runs/{id}/events`` with
``Last-Event-ID: 1``) read straight off an asyncio stream: the reader only finds each SSE
message's ``id:`` line and notes when it came (``time.monotonic()``, the machine's one
monotonic clock, which the appending process reads too). Reading a thousand streams through
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

import asyncio
import json
import re
import sys
import time
from typing import Any

#: An SSE message's id line: at the stream's start, after a line's end, or after a chunk's
#: size line (``\r\n``); data lines are JSON and hold no raw line break.
_ID = re.compile(rb"(?:^|\n)id: (\d+)\n")


async def watch(spec: dict[str, Any], watcher: int, run_id: str, out: dict[str, Any]) -> None:
    reader, writer = await asyncio.open_connection(spec["host"], spec["port"])
    request = (
        f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {spec['host']}\r\n"
        f"Authorization: Bearer {spec['token']}\r\nLast-Event-ID: 1\r\n"
        "Accept: text/event-stream\r\n\r\n"
    )
    writer.write(request.encode())
    got = 0
    buffer = b""
    received = out["received"]
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            out["errors"].append(f"watcher {watcher}: {head.splitlines()[0].decode()}")
            return
        while got < spec["events"]:
            data = await reader.read(65536)
            if not data:
                out["errors"].append(f"watcher {watcher}: closed after {got} events")
                return
            now = time.monotonic()
            buffer += data
            cut = buffer.rfind(b"\n") + 1  # (complete lines only)
            for match in _ID.finditer(buffer, 0, cut):
                received.append((watcher, run_id, int(match.group(1)), now))
                got += 1
            buffer = buffer[cut - 1 :] if cut else buffer  # (keep the last "\n" for ^|\n)
    finally:
        writer.close()


async def main_async(spec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"received": [], "errors": []}
    runs = spec["runs"]
    tasks = [
        asyncio.create_task(watch(spec, index, runs[index % len(runs)], out))
        for index in range(spec["watchers"])
    ]
    print("open", len(tasks), flush=True)
    done, pending = await asyncio.wait(tasks, timeout=spec["timeout"])
    for task in pending:
        task.cancel()
    for task in done:
        if task.exception() is not None:
            out["errors"].append(repr(task.exception()))
    if pending:
        out["errors"].append(f"{len(pending)} watcher(s) had not got every event in time")
    return out


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path, encoding="utf-8") as file:
        spec = json.load(file)
    out = asyncio.run(main_async(spec))
    out["cpu"] = time.process_time()  # (this process's whole CPU time: it is gone when read)
    with open(out_path, "w", encoding="utf-8") as file:
        json.dump(out, file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
