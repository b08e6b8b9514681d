"""``little serve`` as a process for the HTTP API tests, and a reader of its SSE streams.

:func:`start_serve` starts it on a reserved port with the fleet's environment (the app
``tests.http_fleet_app``) and waits until uvicorn listens. :func:`read_sse` reads a
``text/event-stream`` response into :class:`SseEvent` messages (comments skipped).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from tests.fleet_processes import FleetEnv, FleetProcess
from tests.ports import reserve_port

__all__ = ["APP", "Served", "SseEvent", "read_sse", "start_serve"]

APP = "tests.http_fleet_app"


@dataclass
class Served:
    process: FleetProcess
    url: str

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kwargs)


def start_serve(fleet: FleetEnv, *, app: str = APP) -> Served:
    port = reserve_port()
    process = fleet.start("serve", ["serve", "--port", str(port), "--app", app])
    process.wait_for_output(r"Uvicorn running on", timeout=120)
    return Served(process, f"http://127.0.0.1:{port}")


@dataclass(frozen=True)
class SseEvent:
    id: int
    event: str
    data: dict[str, Any]


def read_sse(response: httpx.Response) -> Iterator[SseEvent]:
    """The messages of an SSE response as they arrive."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                yield SseEvent(int(fields["id"]), fields["event"], json.loads(fields["data"]))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
