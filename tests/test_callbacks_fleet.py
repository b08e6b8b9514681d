"""Runs' callbacks on a real fleet (Redis, ``weed mini``, a worker, two ``little scheduler``
processes, ``little serve``): a test receiver (``http.server`` in the test,
:mod:`tests.callback_receiver`) gets one signed POST per run end, also when it was down
for a while; bad callback URLs are refused over HTTP and by ``little submit``."""

from __future__ import annotations

import time
from typing import Any

import pytest

from little_dist.fleet.app_registry import load_registry
from little_dist.fleet.webhook_signing import verify
from little_dist.world.base import World
from tests.callback_receiver import Receiver
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_service import APP, RUN, is_problem, little, start_serve, token_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

SECRET = "whsec_ZmxlZXQtY2FsbGJhY2stc2VjcmV0"
READY = "scheduler-started"


def _configure(fleet: FleetEnv) -> None:
    fleet.env.update(
        {
            "LITTLE_CALLBACK_SECRET": SECRET,
            "LITTLE_CALLBACK_BACKOFF": "0.3",
            "LITTLE_CALLBACK_RETRY_FOR": "120",
            "LITTLE_CALLBACK_TIMEOUT": "2",
        }
    )


def _wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


def _callback_events(world: World, run_id: str) -> list[Any]:
    return [e for e in world.list_events(run_id) if e.type.startswith("little.callback.")]


def _check_signed(receiver: Receiver, run_id: str, status: str) -> dict[str, Any]:
    (delivery,) = receiver.of(run_id)
    assert verify(SECRET, delivery.headers, delivery.body, now=time.time())
    assert delivery.path == "/hooks/runs?source=test"
    assert delivery.headers["content-type"] == "application/json"
    body: dict[str, Any] = delivery.json()
    assert body["status"] == status and body["type"] == "run.ended" and body["endedAt"]
    return body


def test_each_run_end_reaches_the_receiver_once_signed(fleet_env: FleetEnv) -> None:
    _configure(fleet_env)
    receiver = Receiver().up()
    try:
        for name in ("sched-a", "sched-b"):
            start_scheduler(fleet_env, name=name, ready_pattern=READY)
        start_worker(fleet_env, app=APP)
        served = start_serve(fleet_env)
        redis, store = token_store(fleet_env)
        try:
            token = store.create(["admin"]).token
        finally:
            redis.close()
        world = fleet_env.world()
        with fleet_env.client(registry=load_registry(APP)) as client:
            by_client = [
                client.submit("http.steps", {"sleep": 0}, callback_url=receiver.url)
                for _ in range(3)
            ]
            broken = client.submit("http.broken", {}, callback_url=receiver.url)
            plain = client.submit("http.steps", {"sleep": 0})
        with served.client(token) as http:
            answer = http.post("/v1/runs", json={**RUN, "callbackUrl": receiver.url})
            assert answer.status_code == 202, answer.text
            by_http = answer.json()["runId"]
        ends = [*by_client, broken, by_http]
        _wait(lambda: all(receiver.of(run) for run in ends), 90, "every run's callback")
        time.sleep(2.0)  # (room for a second POST, which must not come)
        for run_id in [*by_client, by_http]:
            body = _check_signed(receiver, run_id, "completed")
            assert body["runId"] == run_id and "output" in body
        failed = _check_signed(receiver, broken, "failed")
        assert failed["failure"] and failed["error"]
        assert len(receiver.received) == len(ends)  # the run without a callback: none
        assert {d.headers["webhook-id"] for d in receiver.received} == {
            d.headers["webhook-id"] for run in ends for d in receiver.of(run)
        }
        for run_id in ends:
            events = _wait(
                lambda run_id=run_id: (
                    found
                    if (found := _callback_events(world, run_id))
                    and found[-1].type == "little.callback.delivered"
                    else None
                ),
                30,
                f"the outcome in {run_id}'s log",
            )
            assert [e.type for e in events] == [
                "little.callback.attempted",
                "little.callback.delivered",
            ]
            assert events[0].payload["statusCode"] == 200
            assert SECRET not in str([e.payload for e in world.list_events(run_id)])
        assert _callback_events(world, plain) == []
        # The runs are archived once their outcome is recorded: the archive holds it.
        archives = world.has_archive  # type: ignore[attr-defined]
        _wait(lambda: all(archives(run) for run in ends), 60, "the runs' archives")
        assert _callback_events(world, by_http)[-1].type == "little.callback.delivered"
    finally:
        receiver.down()


def test_a_receiver_that_was_down_gets_the_callback_once_it_is_up(fleet_env: FleetEnv) -> None:
    _configure(fleet_env)
    receiver = Receiver()  # its port reserved, nothing listening: connections are refused
    try:
        start_scheduler(fleet_env, name="sched-a", ready_pattern=READY)
        start_worker(fleet_env, app=APP)
        world = fleet_env.world()
        with fleet_env.client(registry=load_registry(APP)) as client:
            run_id = client.submit("http.steps", {"sleep": 0}, callback_url=receiver.url)

        def refused() -> list[Any]:
            tried = [
                e for e in _callback_events(world, run_id) if e.type == "little.callback.attempted"
            ]
            return tried if len(tried) >= 3 else []

        tried = _wait(refused, 60, "three refused attempts")
        assert {e.payload["error"] for e in tried} == {"connection refused"}
        waits = [e.payload["retryInMs"] for e in tried[:3]]
        assert waits == [300, 600, 1200]  # doubling from LITTLE_CALLBACK_BACKOFF
        receiver.up()
        _wait(lambda: receiver.of(run_id), 60, "the callback once the receiver is up")
        time.sleep(1.5)
        _check_signed(receiver, run_id, "completed")
        events = _wait(
            lambda: (
                found
                if (found := _callback_events(world, run_id))
                and found[-1].type == "little.callback.delivered"
                else None
            ),
            30,
            "the outcome in the log",
        )
        attempts = [e.payload for e in events if e.type == "little.callback.attempted"]
        assert attempts[-1]["statusCode"] == 200
        assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
        assert events[-1].payload["attempts"] == len(attempts)
    finally:
        receiver.down()


def test_bad_callback_urls_are_refused_over_http_and_by_little_submit(
    fleet_env: FleetEnv,
) -> None:
    served = start_serve(fleet_env)
    redis, store = token_store(fleet_env)
    try:
        token = store.create(["runs:submit"]).token
    finally:
        redis.close()
    with served.client(token) as http:
        for url, why in [
            ("ftp://example.com/x", "scheme must be http or https"),
            ("https://u:p@example.com/", "user info"),
            ("not a url", "no spaces"),
        ]:
            answer = http.post("/v1/runs", json={**RUN, "callbackUrl": url})
            body = is_problem(answer, 422)
            assert why in body["detail"], body
            assert body["errors"] == [{"pointer": "/callbackUrl", "detail": body["detail"]}]
    done = little(
        fleet_env, "submit", "http.steps", "--app", APP, "--callback-url", "gopher://example.com"
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "little submit: --callback-url: the scheme must be http or https, got 'gopher' "
        "(a callback is an HTTP POST)"
    ]
    assert "Traceback" not in done.stderr
