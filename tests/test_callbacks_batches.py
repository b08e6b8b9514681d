"""Callbacks on the other ways in: ``Client.submit_many`` (the batch path, which prints the
starts in chunks), the HTTP ``Client``'s ``submit_many``, and the Celery task
``little.submit_run`` sent by name. Each run's end reaches a test receiver once, signed, as
``Client.submit``'s does (:mod:`tests.test_callbacks_fleet`); a bad ``callback_url`` sent by
name is refused as the task's other arguments are."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from little_dist.fleet.app_registry import load_registry
from little_dist.fleet.refusals import SubmissionRefused, submit_arguments
from little_dist.fleet.webhook_signing import verify
from tests.callback_receiver import Receiver
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_service import APP, start_serve, token_store

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

SECRET = "whsec_ZmxlZXQtY2FsbGJhY2stc2VjcmV0"


def _wait(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("ftp://example.com/x", "the scheme must be http or https"),
        (42, "expected an http(s) URL, got int"),
        ("https://u:p@example.com/", "user info"),
    ],
)
def test_little_submit_run_refuses_a_bad_callback_url_naming_it(value: Any, why: str) -> None:
    with pytest.raises(SubmissionRefused) as refused:
        submit_arguments((), {"workflow_id": "w", "callback_url": value})
    assert refused.value.cause == "invalid_arguments"
    assert refused.value.message.startswith("callback_url: ") and why in refused.value.message


def test_a_good_callback_url_sent_by_name_is_kept_by_position_and_by_name() -> None:
    url = "https://hooks.example.com/runs?x=1"
    assert submit_arguments((), {"workflow_id": "w", "callback_url": url}).callback_url == url
    by_position = ("w", None, {}, None, None, None, None, None, url)
    assert submit_arguments(by_position, {}).callback_url == url
    assert submit_arguments((), {"workflow_id": "w"}).callback_url is None


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_submit_many_and_little_submit_run_send_each_runs_end_once_signed(
    fleet_env: FleetEnv,
) -> None:
    from celery import Celery

    from little_dist.fleet.client import Client

    fleet_env.env.update({"LITTLE_CALLBACK_SECRET": SECRET, "LITTLE_CALLBACK_BACKOFF": "0.3"})
    receiver = Receiver().up()
    try:
        start_scheduler(fleet_env)
        start_worker(fleet_env, app=APP)
        served = start_serve(fleet_env)
        redis, store = token_store(fleet_env)
        try:
            token = store.create(["runs:submit", "runs:read"]).token
        finally:
            redis.close()
        world = fleet_env.world()
        with fleet_env.client(registry=load_registry(APP)) as client:
            batch = client.submit_many("http.steps", [{"sleep": 0}] * 4, callback_url=receiver.url)
            plain = client.submit_many("http.steps", [{"sleep": 0}])
        with Client(served.url, token=token) as http:
            over_http = http.submit_many(
                "http.steps", [{"sleep": 0}] * 2, callback_url=receiver.url
            )
        by_name = f"run_byname_{uuid.uuid4().hex[:8]}"
        sender = Celery(broker=fleet_env.env["LITTLE_BROKER_URL"])
        try:
            sender.send_task(
                "little.submit_run",
                kwargs={
                    "workflow_id": "http.steps",
                    "input": {"sleep": 0},
                    "run_id": by_name,
                    "callback_url": receiver.url,
                },
                queue=fleet_env.env["LITTLE_QUEUE_PLANNER"],
            )
        finally:
            sender.close()
        ends = [*batch, *over_http, by_name]
        _wait(lambda: all(receiver.of(run) for run in ends), 90, "every run's callback")
        time.sleep(1.5)  # (room for a second POST, which must not come)
        for run_id in ends:
            (delivery,) = receiver.of(run_id)
            assert verify(SECRET, delivery.headers, delivery.body, now=time.time())
            body = delivery.json()
            assert (body["runId"], body["status"]) == (run_id, "completed")
            recorded = [e for e in world.list_events(run_id) if e.type == "little.run.callback"]
            assert [e.payload["url"] for e in recorded] == [receiver.url]
        assert len(receiver.received) == len(ends)  # the run without a callback: none
        assert not [e for e in world.list_events(plain[0]) if e.type == "little.run.callback"]
    finally:
        receiver.down()
