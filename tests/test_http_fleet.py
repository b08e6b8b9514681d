"""The HTTP API (``little serve``) against a real fleet: Redis, ``weed mini``, a ``little
worker`` and ``little scheduler``, and ``little serve``, each a process.

Runs are submitted over HTTP and watched as Server-Sent Events to their end, reconnecting
mid-run with ``Last-Event-ID``; ``Idempotency-Key`` holds under concurrent POSTs.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from little_dist.http.tokens import TokenStore
from little_dist.world.fleet_keys import api_tokens_key
from tests import zygote
from tests.fleet_processes import ROOT, FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_fleet_app import STEPS
from tests.http_service import APP, SseEvent, read_sse, start_serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest


def _token(fleet: FleetEnv, *scopes: str) -> str:
    import redis

    client = redis.Redis.from_url(fleet.redis_url)
    try:
        return TokenStore(client, api_tokens_key(fleet.signal_stream)).create(scopes).token
    finally:
        client.close()


def _events_of(fleet: FleetEnv, run_id: str) -> list[tuple[int, str]]:
    world = fleet.world()
    return [(event.sequence, event.type) for event in world.list_events(run_id)]


def _wait_archived(fleet: FleetEnv, run_id: str, timeout: float = 30.0) -> None:
    """Until Redis let go of the run's log (its archive in S3 is all there is)."""
    import redis

    client = redis.Redis.from_url(fleet.redis_url)
    deadline = time.monotonic() + timeout
    try:
        while client.exists(f"{fleet.key_prefix}{{{run_id}}}:events"):
            assert time.monotonic() < deadline, f"run {run_id} was not archived in {timeout}s"
            time.sleep(0.2)
    finally:
        client.close()


def test_a_run_submitted_over_http_is_watched_to_its_end_and_reads_as_little_status(
    fleet_env: FleetEnv,
) -> None:
    start_worker(fleet_env, roles=["worker"], app=APP)
    # Archived at once, and let go of by Redis: its events are then read from S3.
    start_scheduler(fleet_env, env={"LITTLE_ARCHIVE_DELAY": "0", "LITTLE_ARCHIVE_TTL": "0"})
    served = start_serve(fleet_env)
    token = _token(fleet_env, "runs:submit", "runs:read")
    with served.client(token) as http:
        answer = http.post("/v1/runs", json={"workflow": "http.steps", "input": {"sleep": 0.1}})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["runId"]
        assert answer.json()["urls"] == {
            "self": f"/v1/runs/{run_id}",
            "events": f"/v1/runs/{run_id}/events",
        }
        assert answer.headers["location"] == f"/v1/runs/{run_id}"
        with http.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            seen = list(read_sse(stream))
        assert seen[-1].event == "RunCompleted"
        assert [(e.id, e.event) for e in seen] == _events_of(fleet_env, run_id)
        assert all(e.data["sequence"] == e.id and e.data["runId"] == run_id for e in seen)

        status = http.get(f"/v1/runs/{run_id}")
        assert status.status_code == 200
        with fleet_env.client() as client:
            assert status.json() == client.status(run_id).to_json()
        assert status.json()["status"] == "completed"
        assert status.json()["output"] == {"n": STEPS - 1}
        report = http.get(f"/v1/runs/{run_id}/report")
        assert report.status_code == 200
        printed = zygote.run(["report", run_id, "--json"], cwd=ROOT, env=fleet_env.env)
        assert printed.returncode == 0, printed.stderr
        assert report.json() == json.loads(printed.stdout)
        assert [step["stepPath"] for step in report.json()["steps"]] == [
            f"s{index}" for index in range(STEPS)
        ]

        failed = http.post("/v1/runs", json={"workflow": "http.broken", "input": {}}).json()
        with http.stream("GET", failed["urls"]["events"]) as stream:
            assert [e.event for e in read_sse(stream)][-1] == "RunFailed"
        why = http.get(failed["urls"]["self"]).json()
        assert why["status"] == "failed"
        assert why["failure"]["stepPath"] == "boom"
        assert "this tool always fails" in why["failure"]["message"]

        _wait_archived(fleet_env, run_id)
        with http.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            assert [(e.id, e.event, e.data) for e in read_sse(stream)] == [
                (e.id, e.event, e.data) for e in seen
            ]
        resume = {"Last-Event-ID": str(seen[2].id)}
        with http.stream("GET", f"/v1/runs/{run_id}/events", headers=resume) as stream:
            assert [e.id for e in read_sse(stream)] == [e.id for e in seen[3:]]
        # As NDJSON: the archived log, one envelope a line.
        ndjson = http.get(f"/v1/runs/{run_id}/events", headers={"Accept": "application/x-ndjson"})
        assert ndjson.headers["content-type"].startswith("application/x-ndjson")
        assert [json.loads(line) for line in ndjson.text.splitlines()] == [e.data for e in seen]
        later = http.get(
            f"/v1/runs/{run_id}/events",
            headers={"Accept": "application/x-ndjson", "Last-Event-ID": str(seen[-2].id)},
        )
        assert [json.loads(line) for line in later.text.splitlines()] == [seen[-1].data]
        assert http.get(f"/v1/runs/{run_id}").json()["output"] == {"n": STEPS - 1}


def test_a_reconnect_with_last_event_id_gets_every_event_exactly_once(
    fleet_env: FleetEnv,
) -> None:
    start_worker(fleet_env, roles=["worker"], app=APP)
    start_scheduler(fleet_env)
    served = start_serve(fleet_env)
    token = _token(fleet_env, "admin")
    with served.client(token) as http:
        answer = http.post("/v1/runs", json={"workflow": "http.steps", "input": {"sleep": 0.6}})
        run_id = answer.json()["runId"]
        first: list[SseEvent] = []
        with http.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            for event in read_sse(stream):
                first.append(event)
                if event.event == "StepCompleted" and event.data["payload"].get("stepId") == "s1":
                    break  # mid-run: hang up
        assert first[-1].event == "StepCompleted"
        ended_meanwhile = _events_of(fleet_env, run_id)[-1][1] == "RunCompleted"
        assert not ended_meanwhile, "the run ended before the reconnect: nothing was tested"
        resume = {"Last-Event-ID": str(first[-1].id)}
        with http.stream("GET", f"/v1/runs/{run_id}/events", headers=resume) as stream:
            rest = list(read_sse(stream))
        ids = [e.id for e in first + rest]
        assert ids == list(range(1, len(ids) + 1))  # each once, none lost
        assert [(e.id, e.event) for e in first + rest] == _events_of(fleet_env, run_id)
        assert rest[-1].event == "RunCompleted"
        # A reconnect after the end event gets nothing and ends.
        done = {"Last-Event-ID": str(rest[-1].id)}
        with http.stream("GET", f"/v1/runs/{run_id}/events", headers=done) as stream:
            assert stream.status_code == 200
            assert list(read_sse(stream)) == []


def test_twenty_concurrent_posts_with_one_idempotency_key_make_one_run(
    fleet_env: FleetEnv,
) -> None:
    served = start_serve(fleet_env)  # no worker: the runs only need to be recorded
    token = _token(fleet_env, "runs:submit")
    body: dict[str, Any] = {"workflow": "http.steps", "input": {"sleep": 0}}
    headers = {"Idempotency-Key": "order-42"}

    def post(_: int) -> tuple[int, str]:
        with served.client(token) as http:
            answer = http.post("/v1/runs", json=body, headers=headers)
            return answer.status_code, answer.json().get("runId", answer.text)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(post, range(20)))
    assert {code for code, _ in answers} == {202}, answers
    run_ids = {run_id for _, run_id in answers}
    assert len(run_ids) == 1
    world = fleet_env.world()
    assert world.list_run_ids() == sorted(run_ids)
    with served.client(token) as http:
        # The same key and body (keys in another order): the same run.
        again = http.post("/v1/runs", json=dict(reversed(body.items())), headers=headers)
        assert again.status_code == 202 and again.json()["runId"] in run_ids
        other = http.post("/v1/runs", json={**body, "input": {"sleep": 1}}, headers=headers)
        assert other.status_code == 409
        assert other.headers["content-type"] == "application/problem+json"
        assert other.json()["errors"][0]["header"] == "idempotency-key"
        # Another key: another run.
        fresh = http.post("/v1/runs", json=body, headers={"Idempotency-Key": "order-43"})
        assert fresh.status_code == 202 and fresh.json()["runId"] not in run_ids
    assert len(world.list_run_ids()) == 2

    # Listed newest first, a page at a time; filtered by status and workflow glob.
    with served.client(_token(fleet_env, "runs:read")) as http:
        every = http.get("/v1/runs").json()
        assert [run["runId"] for run in every["runs"]] == [fresh.json()["runId"], *run_ids]
        assert every["nextCursor"] is None
        assert {run["workflow"] for run in every["runs"]} == {"http.steps"}
        pages, cursor = [], None
        while True:
            query: dict[str, Any] = {"limit": 1, **({"cursor": cursor} if cursor else {})}
            page = http.get("/v1/runs", params=query).json()
            pages += [run["runId"] for run in page["runs"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert pages == [run["runId"] for run in every["runs"]]
        assert len(http.get("/v1/runs", params={"status": "running"}).json()["runs"]) == 2
        assert http.get("/v1/runs", params={"status": "completed"}).json()["runs"] == []
        assert len(http.get("/v1/runs", params={"workflow": "http.*"}).json()["runs"]) == 2
        assert http.get("/v1/runs", params={"workflow": "other.*"}).json()["runs"] == []
        bad = http.get("/v1/runs", params={"cursor": "not-a-cursor"})
        assert bad.status_code == 400 and bad.json()["errors"][0]["query"] == "cursor"
        for query in ({"limit": 0}, {"status": "lost"}):
            wrong = http.get("/v1/runs", params=query)
            assert wrong.status_code == 422
            assert wrong.json()["errors"][0]["query"] == next(iter(query))
