"""The HTTP API's refusals and documents against ``little serve`` as a process (Redis and
``weed mini``; no worker: nothing here runs a run): every scope refused where it should be
(401, 403), bad input as RFC 9457 problems naming what and where, ``/readyz``, the
committed OpenAPI document, and ``little tokens``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from little_dist.http.tokens import TokenStore
from little_dist.world.fleet_keys import api_tokens_key
from tests import zygote
from tests.fleet_processes import ROOT, FleetEnv, fleet_env
from tests.http_service import Served, read_sse, start_serve
from tests.ports import reserve_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

OPENAPI = ROOT / "docs" / "openapi.json"
RUN = {"workflow": "http.steps", "input": {"sleep": 0}}


def _little(fleet: FleetEnv, *args: str) -> subprocess.CompletedProcess[str]:
    return zygote.run(args, cwd=ROOT, env=fleet.env, timeout=60)


def _store(fleet: FleetEnv) -> tuple[Any, TokenStore]:
    import redis

    client = redis.Redis.from_url(fleet.redis_url)
    return client, TokenStore(client, api_tokens_key(fleet.signal_stream))


def _is_problem(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = answer.json()
    assert body["status"] == status and body["title"] and body["detail"]
    assert "Traceback" not in answer.text
    return body


def _calls(http: httpx.Client) -> dict[str, httpx.Response]:
    return {
        "runs:submit": http.post("/v1/runs", json=RUN),
        "runs:read": http.get("/v1/runs/run_nobody"),
        "runs:read events": http.get("/v1/runs/run_nobody/events"),
        "runs:cancel": http.post("/v1/runs/run_nobody/cancel"),
        "runs:read workflows": http.get("/v1/workflows"),
    }


def test_every_v1_route_refuses_a_missing_bad_or_revoked_token_and_a_wrong_scope(
    fleet_env: FleetEnv,
) -> None:
    served = start_serve(fleet_env)
    redis, store = _store(fleet_env)
    try:
        with served.client() as http:
            assert http.get("/healthz").json() == {"status": "ok", "checks": {}}
            for name, answer in _calls(http).items():
                body = _is_problem(answer, 401)
                assert answer.headers["www-authenticate"].startswith("Bearer"), name
                assert "bearer token is required" in body["detail"]
        for bad in ["nonsense", "ldt_000000000000." + "x" * 43]:
            with served.client(bad) as http:
                for answer in _calls(http).values():
                    assert "not valid" in _is_problem(answer, 401)["detail"]
        tokens = {
            scope: store.create([scope]).token
            for scope in ("runs:submit", "runs:read", "runs:cancel", "admin")
        }
        allowed = {  # route -> the scopes that reach it (past auth: 202 or 404)
            "runs:submit": {"runs:submit", "admin"},
            "runs:read": {"runs:read", "admin"},
            "runs:read events": {"runs:read", "admin"},
            "runs:cancel": {"runs:cancel", "admin"},
            "runs:read workflows": {"runs:read", "admin"},
        }
        for scope, token in tokens.items():
            with served.client(token) as http:
                for route, answer in _calls(http).items():
                    if scope in allowed[route]:
                        assert answer.status_code in (200, 202, 404), (scope, route, answer.text)
                    else:
                        body = _is_problem(answer, 403)
                        assert route.split()[0] in body["detail"], body
        # Revoked: refused at once.
        (admin,) = [record for record in store.list() if record.scopes == ("admin",)]
        assert store.revoke(admin.id)
        with served.client(tokens["admin"]) as http:
            _is_problem(http.get("/v1/runs/run_nobody"), 401)
    finally:
        redis.close()


def test_bad_input_is_a_problem_that_names_what_and_where(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    redis, store = _store(fleet_env)
    try:
        token = store.create(["admin"]).token
    finally:
        redis.close()
    with served.client(token) as http:
        malformed = http.post(
            "/v1/runs",
            content=b'{"workflow": "http.steps",',
            headers={"content-type": "application/json"},
        )
        assert "not JSON" in _is_problem(malformed, 400)["detail"]
        assert malformed.json()["errors"] == [
            {
                "pointer": "",
                "detail": "malformed JSON at character 26: "
                "Expecting property name enclosed in double quotes",
            }
        ]
        deep = http.post(
            "/v1/runs",
            content=b'{"workflow": "http.steps", "input": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            headers={"content-type": "application/json"},
        )
        assert "nested too deeply" in _is_problem(deep, 400)["detail"]
        # Over the body cap (twice LITTLE_MAX_INPUT_BYTES and 64 KiB), declared or chunked.
        huge = b'{"workflow": "http.steps", "input": "' + b"x" * (3 << 20) + b'"}'
        declared = http.post("/v1/runs", content=huge, headers={"content-type": "application/json"})
        assert "over this server's" in _is_problem(declared, 413)["detail"]
        chunked = http.post(
            "/v1/runs",
            content=iter([huge[i : i + 65536] for i in range(0, len(huge), 65536)]),
            headers={"content-type": "application/json"},
        )
        assert "over this server's" in _is_problem(chunked, 413)["detail"]
        # Under the cap but over LITTLE_MAX_INPUT_BYTES: the engine's own limit.
        over = http.post("/v1/runs", json={**RUN, "input": {"sleep": 0, "pad": "x" * (1 << 20)}})
        assert "LITTLE_MAX_INPUT_BYTES" in _is_problem(over, 413)["detail"]

        wrong = http.post("/v1/runs", json={"workflow": 3, "budgetUsd": "1", "extra": True})
        errors = {e["pointer"]: e["detail"] for e in _is_problem(wrong, 422)["errors"]}
        assert set(errors) == {"/workflow", "/budgetUsd", "/extra"}, errors
        assert "string" in errors["/workflow"] and "number" in errors["/budgetUsd"]

        missing = http.post("/v1/runs", json={"input": {}})
        assert _is_problem(missing, 422)["errors"][0]["pointer"] == "/workflow"

        negative = http.post("/v1/runs", json={**RUN, "budgetUsd": -1})
        assert _is_problem(negative, 422)["errors"][0]["pointer"] == "/budgetUsd"

        listed = http.get("/v1/workflows").json()["workflows"]
        assert [w["id"] for w in listed] == ["http.broken", "http.steps"]
        steps = listed[1]
        assert steps["inputSchema"]["required"] == ["sleep"] and steps["planned"] is False
        assert steps["description"] == "A chain of pauses."

        unknown = http.post("/v1/runs", json={"workflow": "no.such", "input": {}})
        body = _is_problem(unknown, 422)
        assert body["errors"] == [{"pointer": "/workflow", "detail": body["detail"]}]
        assert "'no.such'" in body["detail"] and "http.steps" in body["detail"]

        bad_id = http.post("/v1/runs", json={**RUN, "runId": "not a run id"})
        assert _is_problem(bad_id, 400)["errors"][0]["pointer"] == "/runId"

        not_input = http.post("/v1/runs", json={"workflow": "http.steps", "input": {}})
        assert "sleep" in _is_problem(not_input, 422)["detail"]  # the workflow's input schema

        for path in ("/v1/runs/run$bad", "/v1/runs/run$bad/events"):
            answer = http.get(path)
            assert _is_problem(answer, 400)["errors"][0]["path"] == "run_id"
        for path in ("/v1/runs/run_nobody", "/v1/runs/run_nobody/events"):
            assert "run_nobody" in _is_problem(http.get(path), 404)["detail"]

        run_id = http.post("/v1/runs", json=RUN).json()["runId"]
        for value, why in [("x", "whole number"), ("-1", "whole number"), ("999", "past")]:
            answer = http.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": value})
            body = _is_problem(answer, 400)
            assert why in body["detail"] and body["errors"][0]["header"] == "last-event-id"
        reason = http.post(f"/v1/runs/{run_id}/cancel", json={"reason": 3})
        assert _is_problem(reason, 422)["errors"][0]["pointer"] == "/reason"
        # The same run id with another input: a conflict, not a second run.
        again = http.post("/v1/runs", json={**RUN, "runId": run_id, "input": {"sleep": 5}})
        _is_problem(again, 409)


def test_readyz_says_whether_redis_and_s3_are_reachable(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    with served.client() as http:
        answer = http.get("/readyz")
        assert answer.status_code == 200
        assert answer.json() == {"status": "ok", "checks": {"redis": "ok", "s3": "ok"}}
    dead = f"http://127.0.0.1:{reserve_port()}"  # nothing listens there
    port = reserve_port()
    process = fleet_env.start(
        "serve-no-s3",
        ["serve", "--port", str(port), "--app", "tests.http_fleet_app"],
        env={"LITTLE_S3_ENDPOINT": dead},
    )
    process.wait_for_output(r"Uvicorn running on")
    with Served(process, f"http://127.0.0.1:{port}").client() as http:
        answer = http.get("/readyz")
        assert answer.status_code == 503
        checks = answer.json()["checks"]
        assert checks["redis"] == "ok" and checks["s3"].startswith("unreachable")
        assert http.get("/healthz").status_code == 200


def test_the_committed_openapi_document_is_the_served_one(fleet_env: FleetEnv) -> None:
    committed = json.loads(OPENAPI.read_text(encoding="utf-8"))
    served = start_serve(fleet_env)
    with served.client() as http:
        answer = http.get("/openapi.json")
    assert answer.status_code == 200
    assert answer.json() == committed, (
        "docs/openapi.json is stale: `little serve --openapi > docs/openapi.json`"
    )
    printed = _little(fleet_env, "serve", "--openapi")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == committed
    assert set(committed["paths"]) == {
        "/healthz",
        "/readyz",
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/events",
        "/v1/runs/{run_id}/cancel",
        "/v1/workflows",
    }


def test_little_tokens_makes_lists_and_revokes_tokens_stored_hashed(fleet_env: FleetEnv) -> None:
    made = _little(
        fleet_env, "tokens", "create", "--scope", "runs:read,runs:submit", "--name", "ci job"
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert token.startswith("ldt_") and "not shown again" in made.stderr
    redis, store = _store(fleet_env)
    try:
        stored = redis.hgetall(api_tokens_key(fleet_env.signal_stream))
        assert len(stored) == 1
        assert token.split(".", 1)[1].encode() not in b"".join(stored.values())  # hash only
        record = store.verify(token)
        assert record is not None and record.scopes == ("runs:submit", "runs:read")
    finally:
        redis.close()
    listed = json.loads(_little(fleet_env, "tokens", "list", "--json").stdout)
    assert listed == [record.to_json()] and listed[0]["name"] == "ci job"
    assert token.split(".", 1)[1] not in _little(fleet_env, "tokens", "list").stdout
    bad = _little(fleet_env, "tokens", "create", "--scope", "runs:everything")
    assert bad.returncode == 1 and "unknown scope 'runs:everything'" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert _little(fleet_env, "tokens", "revoke", record.id).returncode == 0
    gone = _little(fleet_env, "tokens", "revoke", record.id)
    assert gone.returncode == 1 and f"no token {record.id}" in gone.stderr
    assert json.loads(_little(fleet_env, "tokens", "list", "--json").stdout) == []


def test_a_run_is_cancelled_over_http_and_its_events_end_with_the_cancel(
    fleet_env: FleetEnv,
) -> None:
    served = start_serve(fleet_env)  # no worker: the run waits for its first step
    redis, store = _store(fleet_env)
    try:
        submit, cancel = (
            store.create(["runs:submit", "runs:read"]).token,
            store.create(["runs:cancel"]).token,
        )
    finally:
        redis.close()
    with served.client(submit) as http:
        run_id = http.post("/v1/runs", json=RUN).json()["runId"]
        assert http.get(f"/v1/runs/{run_id}").json()["status"] == "running"
    with served.client(cancel) as http:
        answer = http.post(f"/v1/runs/{run_id}/cancel", json={"reason": "not needed"})
        assert answer.status_code == 202, answer.text
        assert answer.json() == {"runId": run_id, "cancelRequested": True}
        again = http.post(f"/v1/runs/{run_id}/cancel")
        assert "already ended (failed)" in _is_problem(again, 409)["detail"]
    with served.client(submit) as http:
        with http.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            events = list(read_sse(stream))
        assert events[-1].event == "RunFailed"
        assert events[-1].data["payload"]["error"]["causeCode"] == "cancelled"
        requested = [e for e in events if e.event == "little.run.cancel_requested"]
        assert requested[0].data["payload"]["reason"] == "not needed"
        status = http.get(f"/v1/runs/{run_id}").json()
        assert status["status"] == "failed" and status["cancelRequested"] is True


def test_watchers_of_quiet_runs_do_not_hold_up_other_requests(fleet_env: FleetEnv) -> None:
    # Each watcher of a run that records nothing waits in a thread for its next event: more
    # watchers than the server's default thread pool (40) must neither wait for one another
    # to get their first events nor hold up the requests that need a thread (every route
    # with a token does).
    served = start_serve(fleet_env)  # no worker: the run stays quiet after its start
    redis, store = _store(fleet_env)
    try:
        token = store.create(["admin"]).token
    finally:
        redis.close()
    watchers = 60
    with served.client(token) as http:
        run_id = http.post("/v1/runs", json=RUN).json()["runId"]
    ready = threading.Barrier(watchers + 1, timeout=60)
    stop = threading.Event()

    def watch(_: int) -> int:
        with served.client(token) as http, http.stream("GET", f"/v1/runs/{run_id}/events") as s:
            seen = next(read_sse(s))  # caught up: the server now waits for the next event
            ready.wait()
            stop.wait(60)
            return seen.id

    with ThreadPoolExecutor(watchers) as pool:
        futures = [pool.submit(watch, index) for index in range(watchers)]
        try:
            started = time.monotonic()
            ready.wait()
            caught_up = time.monotonic() - started
            took = 0.0
            with served.client(token) as http:
                for _ in range(6):
                    started = time.monotonic()
                    answer = http.post("/v1/runs", json=RUN)
                    status = http.get(f"/v1/runs/{run_id}")
                    took = max(took, time.monotonic() - started)
                    time.sleep(0.5)
        finally:
            stop.set()
        assert [future.result() for future in futures] == [1] * watchers
    assert answer.status_code == 202 and status.status_code == 200
    assert caught_up < 5.0, f"{watchers} watchers took {caught_up:.1f}s to get their first event"
    assert took < 3.0, f"a submit and a status took {took:.1f}s beside {watchers} watchers"


def test_little_serve_refuses_bad_arguments_in_one_line(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    taken = served.url.rsplit(":", 1)[1]
    cases = [
        (["serve", "--port", "http"], "expected a port number, got 'http'"),
        (["serve", "--port", "70000"], "expected a port from 1 to 65535"),
        (["serve", "--app", "tests.no_such_app"], "cannot import app module 'tests.no_such_app'"),
        (["serve", "--world", str(fleet_env.tmp / "local-world")], "a fleet on Redis"),
        (
            ["serve", "--port", taken, "--app", "tests.http_fleet_app"],
            f"cannot serve on 127.0.0.1:{taken}",
        ),
    ]
    for args, message in cases:
        result = _little(fleet_env, *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)


def test_with_redis_unreachable_the_api_answers_503_problems_and_readyz_says_why(
    fleet_env: FleetEnv,
) -> None:
    dead = f"redis://127.0.0.1:{reserve_port()}/0"  # nothing listens there
    world = fleet_env.env["LITTLE_WORLD"].replace(fleet_env.redis_url, dead)
    assert world != fleet_env.env["LITTLE_WORLD"]
    port = reserve_port()
    process = fleet_env.start(
        "serve-no-redis",
        ["serve", "--port", str(port), "--app", "tests.http_fleet_app"],
        env={"LITTLE_WORLD": world},
    )
    process.wait_for_output(r"Uvicorn running on")
    served = Served(process, f"http://127.0.0.1:{port}")
    with served.client("ldt_0123456789ab." + "x" * 43) as http:
        assert http.get("/healthz").status_code == 200
        ready = http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["checks"]["redis"].startswith("unreachable")
        assert ready.json()["checks"]["s3"] == "ok"
        for answer in _calls(http).values():
            body = _is_problem(answer, 503)
            assert "Redis is unreachable" in body["detail"]
            assert answer.headers["retry-after"] == "5"
    # SIGTERM: requests finished and the app shut down, then the process ends by the signal
    # (uvicorn raises it again once it has stopped, so a supervisor sees why it ended).
    assert served.process.stop() == -signal.SIGTERM
    assert "Application shutdown complete" in served.process.output()


def test_a_token_with_a_rate_is_refused_429_once_it_is_used_up(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    made = _little(fleet_env, "tokens", "create", "--scope", "runs:read", "--rate", "3/minute")
    assert made.returncode == 0, made.stderr
    limited = made.stdout.strip()
    redis, store = _store(fleet_env)
    try:
        free = store.create(["runs:read"]).token
    finally:
        redis.close()
    with served.client(limited) as http:
        assert [http.get("/v1/workflows").status_code for _ in range(3)] == [200] * 3
        over = http.get("/v1/runs/run_nobody")
        body = _is_problem(over, 429)
        assert "3/minute" in body["detail"]
        assert 0 < int(over.headers["retry-after"]) <= 60
    with served.client(free) as http:  # another token's window is its own
        assert [http.get("/v1/workflows").status_code for _ in range(5)] == [200] * 5
    listed = _little(fleet_env, "tokens", "list").stdout
    assert "3/minute" in listed
    bad = _little(fleet_env, "tokens", "create", "--scope", "runs:read", "--rate", "lots")
    assert bad.returncode == 1 and "--rate: expected a rate such as" in bad.stderr


def test_a_token_restricted_to_workflows_submits_only_those(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    made = _little(
        fleet_env, "tokens", "create", "--scope", "runs:submit", "--workflow", "http.broken"
    )
    assert made.returncode == 0, made.stderr
    with served.client(made.stdout.strip()) as http:
        refused = http.post("/v1/runs", json=RUN)
        body = _is_problem(refused, 403)
        assert body["errors"][0]["pointer"] == "/workflow"
        assert "'http.steps'" in body["detail"] and "http.broken" in body["detail"]
        allowed = http.post("/v1/runs", json={"workflow": "http.broken", "input": {}})
        assert allowed.status_code == 202, allowed.text
    (listed,) = json.loads(_little(fleet_env, "tokens", "list", "--json").stdout)
    assert listed["workflows"] == ["http.broken"]
