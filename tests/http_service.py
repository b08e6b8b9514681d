"""``little serve`` as a process for the HTTP API tests, and a reader of its SSE streams.

:func:`start_serve` starts it on a reserved port with the fleet's environment (the app
``tests.http_fleet_app``) and waits until uvicorn listens. :func:`read_sse` reads a
``text/event-stream`` response into :class:`SseEvent` messages (comments skipped). And the
helpers the HTTP tests share: :func:`little` (a ``little`` command on the fleet),
:func:`token_store`, :func:`is_problem` (an RFC 9457 answer), :func:`v1_calls` (one request
to each ``/v1`` route).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from little_dist.http.tokens import TokenStore
from little_dist.world.fleet_keys import api_tokens_key
from tests import zygote
from tests.fleet_processes import ROOT, FleetEnv, FleetProcess
from tests.ports import reserve_port

__all__ = [
    "APP",
    "RUN",
    "Served",
    "SseEvent",
    "is_problem",
    "little",
    "read_sse",
    "start_serve",
    "token_store",
    "v1_calls",
]

APP = "tests.http_fleet_app"
#: A run of the app's ``http.steps`` that takes no time.
RUN: dict[str, Any] = {"workflow": "http.steps", "input": {"sleep": 0}}


@dataclass
class Served:
    process: FleetProcess
    url: str

    def client(self, token: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kwargs)


def start_serve(fleet: FleetEnv, *, app: str | Sequence[str] = APP) -> Served:
    port = reserve_port()
    apps = [app] if isinstance(app, str) else list(app)
    process = fleet.start(
        "serve", ["serve", "--port", str(port), *(arg for name in apps for arg in ("--app", name))]
    )
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


def little(fleet: FleetEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return zygote.run(args, cwd=ROOT, env=fleet.env, timeout=60)


def token_store(fleet: FleetEnv) -> tuple[Any, TokenStore]:
    """The fleet's tokens, and the Redis client under them (the caller closes it)."""
    import redis

    client = redis.Redis.from_url(fleet.redis_url)
    return client, TokenStore(client, api_tokens_key(fleet.signal_stream))


def is_problem(answer: httpx.Response, status: int) -> dict[str, Any]:
    """The body of an RFC 9457 problem answer of ``status``, without a traceback."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert body["status"] == status and body["title"] and body["detail"]
    assert "Traceback" not in answer.text
    return body


def v1_calls(http: httpx.Client) -> dict[str, httpx.Response]:
    """One request to each ``/v1`` route, by the scope it needs (and what it is)."""
    return {
        "runs:submit": http.post("/v1/runs", json=RUN),
        "runs:read": http.get("/v1/runs/run_nobody"),
        "runs:read list": http.get("/v1/runs"),
        "runs:read events": http.get("/v1/runs/run_nobody/events"),
        "runs:read report": http.get("/v1/runs/run_nobody/report"),
        "runs:cancel": http.post("/v1/runs/run_nobody/cancel"),
        "runs:read workflows": http.get("/v1/workflows"),
        "runs:read approvals": http.get("/v1/approvals"),
        "approvals:decide": http.post(
            "/v1/approvals/apr_0000000000000000.run_nobody", json={"decision": "approve"}
        ),
        "runs:read schedules": http.get("/v1/schedules"),
        "schedules:write delete": http.delete("/v1/schedules/sch_0123456789abcdef"),
    }
