"""The HTTP API's refusals and documents against ``little serve`` as a process (Redis and
``weed mini``; no worker: nothing here runs a run): bad input as RFC 9457 problems naming
what and where, cancel, ``/v1/workflows``, ``/readyz`` and Redis down, watchers of quiet runs
beside other requests, ``little serve``'s bad arguments, the committed OpenAPI document
(tokens: ``tests/test_http_tokens.py``).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.fleet_processes import ROOT, FleetEnv, fleet_env
from tests.http_service import (
    RUN,
    Served,
    is_problem,
    little,
    read_sse,
    start_serve,
    token_store,
    v1_calls,
)
from tests.ports import reserve_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

OPENAPI = ROOT / "docs" / "openapi.json"


def test_bad_input_is_a_problem_that_names_what_and_where(fleet_env: FleetEnv) -> None:
    served = start_serve(fleet_env)
    redis, store = token_store(fleet_env)
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
        assert "not JSON" in is_problem(malformed, 400)["detail"]
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
        assert "nested too deeply" in is_problem(deep, 400)["detail"]
        # Over the body cap (twice LITTLE_MAX_INPUT_BYTES and 64 KiB), declared or chunked.
        huge = b'{"workflow": "http.steps", "input": "' + b"x" * (3 << 20) + b'"}'
        declared = http.post("/v1/runs", content=huge, headers={"content-type": "application/json"})
        assert "over this server's" in is_problem(declared, 413)["detail"]
        chunked = http.post(
            "/v1/runs",
            content=iter([huge[i : i + 65536] for i in range(0, len(huge), 65536)]),
            headers={"content-type": "application/json"},
        )
        assert "over this server's" in is_problem(chunked, 413)["detail"]
        # Under the cap but over LITTLE_MAX_INPUT_BYTES: the engine's own limit.
        over = http.post("/v1/runs", json={**RUN, "input": {"sleep": 0, "pad": "x" * (1 << 20)}})
        assert "LITTLE_MAX_INPUT_BYTES" in is_problem(over, 413)["detail"]

        wrong = http.post("/v1/runs", json={"workflow": 3, "budgetUsd": "1", "extra": True})
        errors = {e["pointer"]: e["detail"] for e in is_problem(wrong, 422)["errors"]}
        assert set(errors) == {"/workflow", "/budgetUsd", "/extra"}, errors
        assert "string" in errors["/workflow"] and "number" in errors["/budgetUsd"]

        missing = http.post("/v1/runs", json={"input": {}})
        assert is_problem(missing, 422)["errors"][0]["pointer"] == "/workflow"

        negative = http.post("/v1/runs", json={**RUN, "budgetUsd": -1})
        assert is_problem(negative, 422)["errors"][0]["pointer"] == "/budgetUsd"

        listed = http.get("/v1/workflows").json()["workflows"]
        assert [w["id"] for w in listed] == ["http.broken", "http.steps"]
        steps = listed[1]
        assert steps["inputSchema"]["required"] == ["sleep"] and steps["planned"] is False
        assert steps["description"] == "A chain of pauses."

        unknown = http.post("/v1/runs", json={"workflow": "no.such", "input": {}})
        body = is_problem(unknown, 422)
        assert body["errors"] == [{"pointer": "/workflow", "detail": body["detail"]}]
        assert "'no.such'" in body["detail"] and "http.steps" in body["detail"]

        bad_id = http.post("/v1/runs", json={**RUN, "runId": "not a run id"})
        assert is_problem(bad_id, 400)["errors"][0]["pointer"] == "/runId"

        not_input = http.post("/v1/runs", json={"workflow": "http.steps", "input": {}})
        assert "sleep" in is_problem(not_input, 422)["detail"]  # the workflow's input schema

        for path in ("/v1/runs/run$bad", "/v1/runs/run$bad/events"):
            answer = http.get(path)
            assert is_problem(answer, 400)["errors"][0]["path"] == "run_id"
        for path in ("/v1/runs/run_nobody", "/v1/runs/run_nobody/events"):
            assert "run_nobody" in is_problem(http.get(path), 404)["detail"]

        run_id = http.post("/v1/runs", json=RUN).json()["runId"]
        for value, why in [("x", "whole number"), ("-1", "whole number"), ("999", "past")]:
            answer = http.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": value})
            body = is_problem(answer, 400)
            assert why in body["detail"] and body["errors"][0]["header"] == "last-event-id"
        reason = http.post(f"/v1/runs/{run_id}/cancel", json={"reason": 3})
        assert is_problem(reason, 422)["errors"][0]["pointer"] == "/reason"
        # The same run id with another input: a conflict, not a second run.
        again = http.post("/v1/runs", json={**RUN, "runId": run_id, "input": {"sleep": 5}})
        is_problem(again, 409)


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
    printed = little(fleet_env, "serve", "--openapi")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == committed
    assert set(committed["paths"]) == {
        "/healthz",
        "/readyz",
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/events",
        "/v1/runs/{run_id}/cancel",
        "/v1/runs/{run_id}/report",
        "/v1/workflows",
        "/v1/approvals",
        "/v1/approvals/{approval_id}",
        "/v1/schedules",
        "/v1/schedules/{schedule_id}",
    }


def test_a_run_is_cancelled_over_http_and_its_events_end_with_the_cancel(
    fleet_env: FleetEnv,
) -> None:
    served = start_serve(fleet_env)  # no worker: the run waits for its first step
    redis, store = token_store(fleet_env)
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
        assert "already ended (failed)" in is_problem(again, 409)["detail"]
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
    redis, store = token_store(fleet_env)
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
        result = little(fleet_env, *args)
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
        for answer in v1_calls(http).values():
            body = is_problem(answer, 503)
            assert "Redis is unreachable" in body["detail"]
            assert answer.headers["retry-after"] == "5"
    # SIGTERM: requests finished and the app shut down, then the process ends by the signal
    # (uvicorn raises it again once it has stopped, so a supervisor sees why it ended).
    assert served.process.stop() == -signal.SIGTERM
    assert "Application shutdown complete" in served.process.output()
