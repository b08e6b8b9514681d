"""A run's callback without a fleet: the URL check, the signature, and the delivery's
retries, outcome and claim over an in-memory world (the POST is a function here; the fleet
tests send real ones: tests/test_callbacks_fleet.py)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from little_dist.errors import InvalidInputError
from little_dist.events import EventInput
from little_dist.fleet.callback_urls import check_callback_url
from little_dist.fleet.callbacks import Answer, Callbacks, callback_event
from little_dist.fleet.webhook_signing import sign, verify
from little_dist.settings import load_settings
from little_dist.world.in_process import MemoryWorld

SECRET = "whsec_c2VjcmV0LWZvci10ZXN0cw=="


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/x", "scheme must be http or https, got 'ftp'"),
        ("file:///etc/passwd", "scheme must be http or https, got 'file'"),
        ("javascript:alert(1)", "scheme must be http or https"),
        ("example.com/hook", "scheme must be http or https, got 'none'"),
        ("http:///nohost", "names no host"),
        ("https://user:pw@example.com/", "may not carry user info"),
        ("https://example.com/a#frag", "fragment"),
        ("https://example.com/a b", "no spaces"),
        ("https://example.com:99999/", "not a URL"),
        ("https://example.com/" + "a" * 2100, "longer than 2048"),
    ],
)
def test_bad_callback_urls_are_refused_saying_why(url: str, why: str) -> None:
    with pytest.raises(InvalidInputError, match="callbackUrl: .*" + why.replace("(", r"\(")):
        check_callback_url(url, "callbackUrl")


def test_good_callback_urls_pass_as_given() -> None:
    for url in ("https://hooks.example.com/runs?team=a", "http://127.0.0.1:8080/", "HTTPS://x.io"):
        assert check_callback_url(url) == url


def test_signature_verifies_and_catches_tampering_and_replays() -> None:
    body = b'{"runId":"run_x","status":"completed"}'
    headers = sign(SECRET, "msg_1", 1_700_000_000, body)
    assert headers["webhook-signature"].startswith("v1,")
    assert verify(SECRET, headers, body, now=1_700_000_010)
    assert not verify(SECRET, headers, body + b" ", now=1_700_000_010)
    assert not verify("whsec_b3RoZXI=", headers, body, now=1_700_000_010)
    assert not verify(SECRET, headers, body, now=1_700_000_000 + 301)
    forged = {**headers, "webhook-id": "msg_2"}
    assert not verify(SECRET, forged, body, now=1_700_000_010)
    # A rotated secret: one of the signatures listed matches.
    both = {**headers, "webhook-signature": "v1,AAAA " + headers["webhook-signature"]}
    assert verify(SECRET, both, body, now=1_700_000_010)


def test_a_whsec_secret_that_is_not_base64_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="base64"):
        sign("whsec_!!!", "msg", 1, b"")


def _ended_run(world: MemoryWorld, run_id: str, url: str | None, *, failed: bool = False) -> None:
    head = [] if url is None else [callback_event(url)]
    end = (
        EventInput(
            type="RunFailed",
            occurrence_id="run-end",
            payload={"error": {"code": "step_failed", "message": "boom"}},
        )
        if failed
        else EventInput(type="RunCompleted", occurrence_id="run-end", payload={"output": {"n": 1}})
    )
    world.append_batch(
        run_id,
        [
            *head,
            EventInput(
                type="RunStarted",
                occurrence_id="run-start",
                payload={"workflowVersionId": "wfver_0123456789abcdef", "input": {}},
            ),
            end,
        ],
    )


class Posts:
    """The POSTs a test's callbacks send; answers from ``answers`` (then 200)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []
        self.lock = threading.Lock()

    def __call__(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
        with self.lock:
            self.sent.append((url, body, headers))
            return self.answers.pop(0) if self.answers else Answer(status=200)


def _settings(**env: str) -> Any:
    return load_settings(
        {
            "LITTLE_CALLBACK_SECRET": SECRET,
            "LITTLE_CALLBACK_BACKOFF": "0.05",
            "LITTLE_CALLBACK_RETRY_FOR": "30",
            **env,
        }
    )


def _types(world: MemoryWorld, run_id: str) -> list[str]:
    return [e.type for e in world.list_events(run_id) if e.type.startswith("little.callback.")]


def test_a_failing_receiver_is_retried_with_backoff_and_each_attempt_recorded() -> None:
    world = MemoryWorld()
    _ended_run(world, "run_cb1", "https://hooks.example.com/x")
    posts = Posts(Answer(error="connection refused"), Answer(status=503))
    callbacks = Callbacks(world, _settings(), "sched-a", post=posts)
    started = time.monotonic()
    assert callbacks.start("run_cb1").result(timeout=10) is True
    # Waits of 0.05 s then 0.1 s between the three attempts.
    assert time.monotonic() - started >= 0.15
    callbacks.close()
    assert _types(world, "run_cb1") == ["little.callback.attempted"] * 3 + [
        "little.callback.delivered"
    ]
    attempts = [e.payload for e in world.list_events("run_cb1") if e.type.endswith("attempted")]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]
    assert attempts[0]["error"] == "connection refused" and attempts[0]["retryInMs"] == 50
    assert attempts[1]["statusCode"] == 503 and attempts[1]["retryInMs"] == 100
    assert attempts[2]["statusCode"] == 200 and "retryInMs" not in attempts[2]
    # One delivery id on every attempt; every attempt signed; the secret never recorded.
    ids = {headers["webhook-id"] for _, _, headers in posts.sent}
    assert len(ids) == 1
    for _, body, headers in posts.sent:
        assert verify(SECRET, headers, body, now=time.time())
    log = json.dumps([e.payload for e in world.list_events("run_cb1")])
    assert SECRET not in log and "c2VjcmV0" not in log
    body = json.loads(posts.sent[-1][1])
    assert body["runId"] == "run_cb1" and body["status"] == "completed"
    assert body["output"] == {"n": 1} and body["type"] == "run.ended" and body["endedAt"]


def test_a_failed_run_tells_why() -> None:
    world = MemoryWorld()
    _ended_run(world, "run_cb2", "http://127.0.0.1:1/x", failed=True)
    posts = Posts()
    callbacks = Callbacks(world, _settings(), "sched-a", post=posts)
    assert callbacks.start("run_cb2").result(timeout=10) is True
    callbacks.close()
    body = json.loads(posts.sent[0][1])
    assert body["status"] == "failed"
    assert body["error"]["message"] == "boom" and body["failure"]


def test_a_callback_is_abandoned_after_its_retry_window() -> None:
    world = MemoryWorld()
    _ended_run(world, "run_cb3", "https://hooks.example.com/x")
    posts = Posts(*[Answer(status=500)] * 100)
    settings = _settings(LITTLE_CALLBACK_RETRY_FOR="0.5", LITTLE_CALLBACK_BACKOFF="0.1")
    callbacks = Callbacks(world, settings, "sched-a", post=posts)
    assert callbacks.start("run_cb3").result(timeout=10) is True
    callbacks.close()
    types = _types(world, "run_cb3")
    assert types[-1] == "little.callback.abandoned"
    assert 2 <= types.count("little.callback.attempted") <= 4
    (outcome,) = [e for e in world.list_events("run_cb3") if e.type.endswith("abandoned")]
    assert outcome.payload["error"] == "answered 500"
    assert outcome.payload["attempts"] == len(posts.sent)


def test_no_secret_sends_nothing_and_records_why() -> None:
    world = MemoryWorld()
    _ended_run(world, "run_cb4", "https://hooks.example.com/x")
    posts = Posts()
    callbacks = Callbacks(world, load_settings({}), "sched-a", post=posts)
    assert callbacks.start("run_cb4").result(timeout=10) is True
    callbacks.close()
    assert posts.sent == []
    (outcome,) = [e for e in world.list_events("run_cb4") if e.type.endswith("abandoned")]
    assert "LITTLE_CALLBACK_SECRET" in outcome.payload["error"]


def test_a_run_without_a_callback_costs_one_read_and_sends_nothing() -> None:
    world = MemoryWorld()
    _ended_run(world, "run_cb5", None)
    posts = Posts()
    callbacks = Callbacks(world, _settings(), "sched-a", post=posts)
    assert callbacks.start("run_cb5").result(timeout=10) is True
    callbacks.close()
    assert posts.sent == [] and _types(world, "run_cb5") == []


def test_several_schedulers_finishing_one_run_send_it_once() -> None:
    world = MemoryWorld()
    _ended_run(world, "run_cb6", "https://hooks.example.com/x")
    posts = Posts(Answer(status=502))
    many = [Callbacks(world, _settings(), f"sched-{i}", post=posts) for i in range(4)]
    futures = [callbacks.start("run_cb6") for callbacks in many]
    assert [f.result(timeout=20) for f in futures] == [True] * 4
    for callbacks in many:
        callbacks.close()
    assert len(posts.sent) == 2  # the 502, then the delivery: by one of them
    assert _types(world, "run_cb6").count("little.callback.delivered") == 1
    # A later finish (a late signal) finds the outcome and sends nothing.
    again = Callbacks(world, _settings(), "sched-late", post=posts)
    assert again.start("run_cb6").result(timeout=10) is True
    again.close()
    assert len(posts.sent) == 2


def test_a_stopped_delivery_leaves_the_run_to_be_taken_over() -> None:
    world = MemoryWorld()
    _ended_run(world, "run_cb7", "https://hooks.example.com/x")
    posts = Posts(Answer(status=500))
    waits = _settings(LITTLE_CALLBACK_BACKOFF="30", LITTLE_CALLBACK_RETRY_FOR="120")
    slow = Callbacks(world, waits, "sched-a", post=posts)
    pending = slow.start("run_cb7")
    deadline = time.monotonic() + 5
    while "little.callback.attempted" not in _types(world, "run_cb7"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    slow.close()  # stops while waiting 30 s for the next attempt (its lease is released)
    assert pending.result(timeout=5) is False
    other = Callbacks(world, _settings(), "sched-b", post=posts)
    assert other.start("run_cb7").result(timeout=10) is True
    other.close()
    attempts = [e.payload for e in world.list_events("run_cb7") if e.type.endswith("attempted")]
    assert [a["attempt"] for a in attempts] == [1, 2]  # counted on from the log
    assert _types(world, "run_cb7")[-1] == "little.callback.delivered"
