"""``Client("http://...", token=...)`` against a real fleet and ``little serve`` (each a
process): the same methods and answers as the ``Client`` on the fleet's settings, over HTTP
only, its refusals as the same errors, its event stream resumed after a dropped connection.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from little_dist import Client
from little_dist.errors import InvalidInputError, StorageUnavailableError
from little_dist.fleet.client import WaitTimeoutError
from little_dist.fleet.http_answers import (
    ApiAccessError,
    ApiConflictError,
    ApiRateLimitedError,
    NotOverHttpError,
)
from little_dist.fleet.http_client import HttpClient
from little_dist.local_runner import RunMismatchError
from little_dist.world.base import RunNotFoundError
from tests.fleet_processes import ROOT, FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_fleet_app import STEPS, steps
from tests.http_service import APP, start_serve, token_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest


def _tokens(fleet: FleetEnv, *specs: tuple[list[str], str | None]) -> list[str]:
    redis, store = token_store(fleet)
    try:
        return [store.create(scopes, rate=rate).token for scopes, rate in specs]
    finally:
        redis.close()


def test_a_client_on_an_http_url_submits_waits_and_reads_as_the_fleet_client(
    fleet_env: FleetEnv,
) -> None:
    start_worker(fleet_env, roles=["worker"], app=APP)
    start_scheduler(fleet_env)
    served = start_serve(fleet_env)
    (token,) = _tokens(fleet_env, (["runs:submit", "runs:read", "runs:cancel"], None))
    fleet = fleet_env.client()
    with Client(served.url, token=token) as client:
        assert isinstance(client, HttpClient)
        run_id = client.submit(
            "http.steps", {"sleep": 0.05}, budget_usd=2.5, deadline="10m", idempotency_key="k1"
        )
        state = client.wait(run_id, timeout=60)
        assert state.status == "completed" and state.output == {"n": STEPS - 1}
        assert state.to_json() == fleet.wait(run_id, timeout=10).to_json()
        assert client.state(run_id).to_json() == state.to_json()
        view = client.status(run_id)
        assert view.to_json() == fleet.status(run_id).to_json()
        assert view.budget_usd == 2.5 and view.deadline is not None
        assert view.deadline_cause == "deadline_exceeded"
        assert client.report(run_id) == fleet.report(run_id)
        logged = [event.to_json() for event in fleet_env.world().list_events(run_id)]
        assert [event.to_json() for event in client.events(run_id)] == logged
        assert [event.to_json() for event in client.events(run_id, after=3)] == logged[3:]
        followed = client.events(run_id, follow=True, after=len(logged) - 2)
        assert [event.to_json() for event in followed] == logged[-2:]
        assert list(client.events(run_id, follow=True, after=len(logged))) == []

        # The same key and body: the same run; another body under it: a conflict.
        again = client.submit(
            "http.steps", {"sleep": 0.05}, budget_usd=2.5, deadline="10m", idempotency_key="k1"
        )
        assert again == run_id
        with pytest.raises(ApiConflictError, match="Idempotency-Key") as conflict:
            client.submit("http.steps", {"sleep": 1}, idempotency_key="k1")
        assert conflict.value.problem["code"] == "idempotency_conflict"
        assert not conflict.value.retryable
        # A run id of one's own, reused with another input: the fleet client's error.
        with pytest.raises(RunMismatchError, match="different input"):
            client.submit("http.steps", {"sleep": 9}, run_id=run_id)

        # (a definition is submitted by its id, as the server's app defines it)
        ids = client.submit_many(steps, [{"sleep": 0}, {"sleep": 0}], run_ids=["run_a1", "run_a2"])
        assert ids == ["run_a1", "run_a2"]
        assert [client.wait(one, timeout=60).status for one in ids] == ["completed"] * 2

        broken = client.submit("http.broken", {})
        failed = client.wait(broken, timeout=60)
        assert failed.status == "failed"
        assert "this tool always fails" in json.dumps(failed.error)
        # Its id and input again with a budget it was not started with: the ended run takes
        # no more events, a 409 run_ended (a 500 before schemathesis found it).
        with pytest.raises(ApiConflictError, match=r"has ended|is archived") as ended:
            client.submit("http.broken", {}, run_id=broken, budget_usd=9)
        assert ended.value.problem["code"] == "run_ended"

        with pytest.raises(RunNotFoundError, match="run_nobody"):
            client.status("run_nobody")
        with pytest.raises(RunNotFoundError):
            client.report("run_nobody")
        with pytest.raises(RunNotFoundError):
            client.wait("run_nobody", timeout=5)
        with pytest.raises(InvalidInputError, match=r"unknown workflow 'no\.such'"):
            client.submit("no.such", {})
        with pytest.raises(InvalidInputError, match="/budgetUsd"):
            client.submit("http.steps", {"sleep": 0}, budget_usd=-1)
        with pytest.raises(InvalidInputError, match="deadline"):
            client.submit("http.steps", {"sleep": 0}, deadline="yesterday")
        with pytest.raises(InvalidInputError, match="max_attempts is not taken by the HTTP API"):
            client.submit("http.steps", {"sleep": 0}, max_attempts=2)
        with pytest.raises(InvalidInputError, match="has no time zone"):
            client.submit("http.steps", {"sleep": 0}, deadline=dt.datetime(2030, 1, 1))
        for what in ("world", "app", "queue", "window", "settings"):
            with pytest.raises(NotOverHttpError, match=f"Client\\(url\\)\\.{what}: "):
                getattr(client, what)

        # Cancel: True, the run fails cancelled; once it has ended, False.
        slow = client.submit("http.steps", {"sleep": 3})
        assert client.cancel(slow, reason="not needed") is True
        cancelled = client.wait(slow, timeout=60)
        assert cancelled.status == "failed"
        assert cancelled.error["causeCode"] == "cancelled"
        assert client.cancel(slow) is False
        with pytest.raises(RunNotFoundError):
            client.cancel("run_nobody")

        # wait's timeout holds for a run still running.
        slower = client.submit("http.steps", {"sleep": 2})
        began = time.monotonic()
        with pytest.raises(WaitTimeoutError, match=f"run {slower} did not finish within 0.5s"):
            client.wait(slower, timeout=0.5)
        assert time.monotonic() - began < 3
    with pytest.raises(StorageUnavailableError, match="could not be reached"):
        Client("http://127.0.0.1:9", token=token).status(run_id)


class _DropOnce(httpx.BaseTransport):
    """httpx's transport, but the first events stream is cut after ``after`` lines."""

    def __init__(self, after: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.after = after
        self.dropped = 0
        self.resumed_from: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not request.url.path.endswith("/events"):
            return response
        self.resumed_from.append(request.headers.get("last-event-id"))
        if self.dropped:
            return response
        self.dropped += 1
        stream = response.stream
        cut = self.after

        class Cut(httpx.SyncByteStream):
            def __iter__(self) -> Any:
                lines = 0
                assert isinstance(stream, httpx.SyncByteStream)
                for chunk in stream:
                    yield chunk
                    lines += chunk.count(b"\n")
                    if lines >= cut:
                        raise httpx.RemoteProtocolError("connection dropped (test)")

            def close(self) -> None:
                assert isinstance(stream, httpx.SyncByteStream)
                stream.close()

        return httpx.Response(
            response.status_code, headers=response.headers, stream=Cut(), request=request
        )

    def close(self) -> None:
        self.inner.close()


def test_a_dropped_events_stream_is_resumed_with_last_event_id_and_wait_folds_each_once(
    fleet_env: FleetEnv,
) -> None:
    start_worker(fleet_env, roles=["worker"], app=APP)
    start_scheduler(fleet_env)
    served = start_serve(fleet_env)
    (token,) = _tokens(fleet_env, (["runs:submit", "runs:read"], None))
    drop = _DropOnce(after=12)  # (3 lines an event and a blank line: mid-run)
    with HttpClient(served.url, token=token, transport=drop) as client:
        run_id = client.submit("http.steps", {"sleep": 0.4})
        state = client.wait(run_id, timeout=60)
    assert drop.dropped == 1 and drop.resumed_from[0] == "0"
    assert len(drop.resumed_from) == 2 and int(drop.resumed_from[1] or 0) >= 2
    assert state.status == "completed"
    fleet = fleet_env.client()
    assert state.to_json() == fleet.wait(run_id, timeout=10).to_json()
    assert state.event_count == len(fleet_env.world().list_events(run_id))


def test_refusals_name_the_missing_scope_and_the_retry_after(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)  # no worker: runs need only be recorded
    reader, limited = _tokens(fleet_env, (["runs:read"], None), (["admin"], "1/minute"))
    with Client(served.url, token=reader) as client:
        with pytest.raises(ApiAccessError, match="403 the token lacks the scope 'runs:submit'"):
            client.submit("http.steps", {"sleep": 0})
        with pytest.raises(ApiAccessError, match="lacks the scope 'runs:cancel'") as refused:
            client.cancel("run_nobody")
        assert refused.value.status == 403
    with Client(served.url) as client, pytest.raises(ApiAccessError, match="401 a bearer token"):
        client.status("run_nobody")
    bad = Client(served.url, token="ldt_nope.nope")
    with bad, pytest.raises(ApiAccessError, match="401 the bearer token is not valid"):
        bad.status("run_nobody")
    # A method a path does not take: 405 naming every method it does (schemathesis found
    # Starlette's naming only the first route's).
    with httpx.Client(base_url=served.url) as http:
        refused = http.request("OPTIONS", "/v1/runs")
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, POST"
        assert http.delete("/v1/runs/run_x").headers["allow"] == "GET"
    with Client(served.url, token=limited) as client:
        client.submit("http.steps", {"sleep": 0})
        with pytest.raises(ApiRateLimitedError, match=r"Retry-After: \d+") as over:
            client.submit("http.steps", {"sleep": 0})
        assert over.value.retry_after is not None and 0 < over.value.retry_after <= 60
        assert over.value.retryable


_NO_REDIS = """
import sys
from little_dist import Client
with Client(sys.argv[1], token=sys.argv[2]) as client:
    run_id = client.submit("http.steps", {"sleep": 0})
    state = client.wait(run_id, timeout=60)
    status = client.status(run_id)
    events = list(client.events(run_id))
loaded = sorted(
    name for name in ("redis", "celery", "kombu", "boto3", "botocore")
    if name in sys.modules
)
print(state.status, status.status, len(events), loaded)
"""


def test_the_http_client_imports_no_redis_celery_or_boto3(fleet_env: FleetEnv) -> None:
    start_worker(fleet_env, roles=["worker"], app=APP)
    start_scheduler(fleet_env)
    served = start_serve(fleet_env)
    (token,) = _tokens(fleet_env, (["runs:submit", "runs:read"], None))
    done = subprocess.run(
        [sys.executable, "-c", _NO_REDIS, served.url, token],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    status, view, count, loaded = done.stdout.split(" ", 3)
    assert (status, view) == ("completed", "completed") and int(count) > STEPS
    assert loaded.strip() == "[]"
