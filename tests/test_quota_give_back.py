"""A model call that would wait long for its provider quota gives its worker slot back
(issue 33): the attempt ends ``quota_wait`` with when to run again, the next attempt is free
of the step's retries and is sent to run then, and the slot serves other work meanwhile."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from little_dist.errors import LittleError
from little_dist.quotas import QuotaLimiter, QuotaWaitGivenBack, QuotaWaitTooLong
from little_dist.quotas.memory import MemoryQuotaBackend
from little_dist.quotas.rules import Amounts, CallIdentity, parse_quotas
from little_dist.runtime.failures import error_envelope
from little_dist.scheduling.policy import (
    MAX_QUOTA_WAITS,
    GiveUp,
    NextAttempt,
    next_action,
    not_before_ms,
)
from little_dist.scheduling.times import epoch_ms
from little_dist.testing.provider_quota import ProviderQuota
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.quota_fleet_app import build_script, noted, two

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

CALL = CallIdentity("scripted", "quota", "default")
ONE = Amounts(requests=1, input_tokens=10, output_tokens=10)


def _limiter(give_back_after: float | None) -> QuotaLimiter:
    rules = parse_quotas(json.dumps({"rules": [{"name": "k", "requests": "1/10 seconds"}]}))
    return QuotaLimiter(rules, MemoryQuotaBackend(), max_wait=60, give_back_after=give_back_after)


def test_a_wait_past_the_threshold_gives_back_and_one_under_it_waits_in_place() -> None:
    limiter = _limiter(0.5)
    held = limiter.reserve(CALL, ONE)
    assert held is not None
    # In flight, the call's end is unknown: the wait polls, and gives back after the
    # threshold, to come back no sooner than the threshold.
    with pytest.raises(QuotaWaitGivenBack) as polled:
        limiter.reserve(CALL, ONE)
    assert polled.value.expected_in == 0.5
    held.settle(10, 10)  # ended: its request leaves the window one period later
    with pytest.raises(QuotaWaitGivenBack) as given:
        limiter.reserve(CALL, ONE)
    assert 9 < given.value.expected_in <= 10
    assert isinstance(given.value, QuotaWaitTooLong)  # (a kind of the wait that gives up)
    # In process (no threshold) the same wait is waited in place, up to max_wait.
    patient = _limiter(None)
    patient.max_wait = 0.1
    assert patient.reserve(CALL, ONE) is not None
    with pytest.raises(QuotaWaitTooLong) as waited:
        patient.reserve(CALL, ONE)
    assert not isinstance(waited.value, QuotaWaitGivenBack)


class _Attempt:
    def __init__(self, cause: str, *, after_ms: int | None = None, ended: str = "") -> None:
        self.status = "failed"
        self.error: dict[str, Any] = {"causeCode": cause, "retriable": True}
        if after_ms is not None:
            self.error["retryAfterMs"] = after_ms
        self.finished_at = ended or "2026-12-05T22:00:00.000Z"


class _Step:
    max_attempts = 1
    fixer_max_attempts = 0


def test_quota_waits_are_free_of_the_steps_retries_up_to_a_cap() -> None:
    waits = [_Attempt("quota_wait", after_ms=500) for _ in range(3)]
    following = next_action(_Step(), waits, default_max_attempts=1, max_crash_retries=5)  # type: ignore[arg-type]
    assert following == NextAttempt(4, "execute_step")
    # A real failure after them still has the step's one attempt to itself, and uses it.
    failed = [*waits, _Attempt("model_error")]
    gave_up = next_action(_Step(), failed, default_max_attempts=1, max_crash_retries=5)  # type: ignore[arg-type]
    assert isinstance(gave_up, GiveUp)
    endless = [_Attempt("quota_wait", after_ms=1) for _ in range(MAX_QUOTA_WAITS + 1)]
    assert isinstance(
        next_action(_Step(), endless, default_max_attempts=1, max_crash_retries=5),  # type: ignore[arg-type]
        GiveUp,
    )


def test_the_next_attempt_is_due_after_the_wait_counted_from_the_end() -> None:
    ended = "2026-12-05T22:00:00.250Z"
    waited = [_Attempt("quota_wait", after_ms=1500, ended=ended)]
    assert not_before_ms(waited) == epoch_ms(ended) + 1500  # type: ignore[arg-type, operator]
    assert not_before_ms([_Attempt("model_error", ended=ended)]) is None
    assert not_before_ms([]) is None


def test_the_failure_records_when_to_run_again() -> None:
    error = LittleError("quota of k expected in 2.3 s")
    error.cause_code = "quota_wait"  # type: ignore[attr-defined]
    error.retry_after = 2.3001  # type: ignore[attr-defined]
    envelope = error_envelope(error)
    assert envelope["causeCode"] == "quota_wait" and envelope["retriable"] is True
    assert envelope["retryAfterMs"] == 2301


@pytest.mark.integration
@pytest.mark.slow
def test_a_slot_waiting_for_quota_serves_other_work_meanwhile(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    period = 6  # one call per period: the second call of `two` waits about that long
    quota = ProviderQuota(
        requests=1, period=period, redis_url=fleet_env.redis_url, name=f"{fleet_env.key_prefix}sim"
    )
    script = build_script(quota).save(tmp_path / "script.json")
    rules = {"rules": [{"name": f"{fleet_env.key_prefix}key", "provider": "scripted",
                        "requests": f"1/{period} seconds"}]}  # fmt: skip
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.quota_fleet_app",
            "LITTLE_SCRIPTED_MODEL": str(script),
            "LITTLE_QUOTAS": json.dumps(rules),
            "LITTLE_QUOTA_GIVE_BACK_AFTER": "0.5",
        }
    )
    try:
        start_worker(fleet_env, app="tests.quota_fleet_app", concurrency=1)  # one slot
        start_scheduler(fleet_env)
        client = fleet_env.client()
        waiting = client.submit(two, {"item": "a"})
        world = fleet_env.world()

        def gave_back() -> bool:
            return any(
                e.type == "StepFailed" and e.payload["error"]["causeCode"] == "quota_wait"
                for e in world.list_events(waiting)
            )

        deadline = time.monotonic() + 60
        while not gave_back():
            assert time.monotonic() < deadline, "the second call never gave its slot back"
            time.sleep(0.1)
        other = client.submit(noted, {"item": "b"})
        assert client.wait(other, timeout=60).status == "completed"
        state = client.wait(waiting, timeout=90)
        assert state.status == "completed", state.error
        assert quota.refused() == 0  # the provider never saw a call past its limit
    finally:
        quota.reset()
    events = world.list_events(waiting)
    ends = [e for e in events if e.type in ("StepFailed", "StepCompleted")
            and e.payload.get("stepPath") == "second"]  # fmt: skip
    assert [e.type for e in ends][-1] == "StepCompleted"
    given = [e for e in ends if e.type == "StepFailed"]
    assert given and all(e.payload["error"]["causeCode"] == "quota_wait" for e in given)
    # Each attempt after a give-back started no earlier than the wait recorded.
    starts = {
        e.payload["attempt"]: e
        for e in events
        if e.type == "StepAttemptStarted" and e.payload.get("stepPath") == "second"
    }
    for failed in given:
        due = epoch_ms(failed.recorded_at) + failed.payload["error"]["retryAfterMs"]  # type: ignore[operator]
        later = starts[failed.payload["attempt"] + 1]
        assert epoch_ms(later.recorded_at) >= due - 5  # type: ignore[operator]
    # The other run's step ran in the one slot while the call waited: after the give-back,
    # before the attempt that made the call.
    other_events = world.list_events(other)
    (noted_at,) = [e.recorded_at for e in other_events if e.type == "StepCompleted"]
    assert given[0].recorded_at <= noted_at <= starts[given[-1].payload["attempt"] + 1].recorded_at


def test_a_dispatch_not_to_run_yet_is_sent_with_its_delay() -> None:
    from little_dist.fleet.queue import MemoryQueue
    from little_dist.fleet.sending import send_dispatch
    from little_dist.scheduling import StepDispatch

    queue = MemoryQueue()
    later = int(time.time() * 1000) + 3000
    send_dispatch(queue, StepDispatch("run_x", "s", "s", 2, "worker", "execute_step", None, later))
    send_dispatch(queue, StepDispatch("run_x", "t", "t", 1, "worker", "execute_step"))
    delayed, at_once = queue.take()
    assert 2.5 < (queue.countdown_of(delayed) or 0) <= 3.0
    assert queue.countdown_of(at_once) is None


def test_the_celery_queue_sends_the_delay_as_celerys_countdown() -> None:
    from little_dist.fleet.queue import CeleryQueue
    from little_dist.settings import load_settings

    class App:
        def __init__(self) -> None:
            self.options: list[dict[str, Any]] = []

        def send_task(self, name: str, args: Any, queue: str, **options: Any) -> None:
            self.options.append(options)

    app = App()
    queue = CeleryQueue(app, load_settings({}))  # type: ignore[arg-type]
    queue.send("little.execute_step", ("run_x", "s", 2), "worker", countdown=2.5)
    queue.send("little.execute_step", ("run_x", "s", 3), "worker")
    assert app.options == [{"countdown": 2.5}, {}]


def test_a_call_that_gave_its_slot_back_once_waits_for_its_turn_in_place() -> None:
    # Sent when the quota was expected, it may find the calls that waited in place took the
    # room: it waits for its turn then, rather than going to the back of the line again.
    limiter = _limiter(0.5)
    limiter.max_wait = 0.3
    held = limiter.reserve(CALL, ONE)
    assert held is not None
    with pytest.raises(QuotaWaitTooLong) as waited:
        limiter.reserve(CALL, ONE, give_back=False)
    assert not isinstance(waited.value, QuotaWaitGivenBack)
