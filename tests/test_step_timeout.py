"""A step attempt that runs past its time limit fails with causeCode ``timeout``, on time.

A tool that blocks forever and a model provider that never answers are the two ways a step
hangs. Before the step timeout existed, both kept their run open forever: the lease
heartbeat renewed the attempt's lease for as long as the thread was stuck, and the threads
pool enforces no Celery time limit. ``timeout`` is terminal (upstream's rule), so the run
fails, and the steps after the stuck one never run.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from little_dist import RunFailedError, run_workflow
from little_dist.harness.model_calls import import_litellm
from little_dist.runtime import DEADLINE_GRACE, LeaseKeeper
from little_dist.world.base import Lease
from little_dist.world.local import LocalWorld
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.hung_app import STEP_TIMEOUT, hung_tool, silent_model, silent_script

__all__ = ["fleet_env"]

# The run fails once the keeper ends the stuck attempt; generous, never asserted on.
_WITHIN = STEP_TIMEOUT + DEADLINE_GRACE + 30


def _step_error(state: object, path: str) -> dict[str, object]:
    step = state.steps[path]  # type: ignore[attr-defined]
    error = step.attempts[-1].error
    assert isinstance(error, dict), step
    return error


@pytest.mark.timeout(60)
def test_a_tool_that_never_returns_fails_its_step_with_cause_timeout_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LITTLE_TEST_SIDE_EFFECTS", str(calls))
    world = LocalWorld(tmp_path / "world")
    with pytest.raises(RunFailedError) as raised:
        run_workflow(hung_tool, {"label": "a"}, world=world)
    assert raised.value.cause_code == "timeout"
    assert raised.value.result is not None
    state = raised.value.result.state
    error = _step_error(state, "stuck")
    assert error["causeCode"] == "timeout"
    assert "2s" in str(error["message"])
    assert "after" not in state.steps  # a timeout is terminal: nothing after it ran
    assert calls.read_text().splitlines() == ["a"]  # called once, not retried


@pytest.mark.timeout(60)
def test_a_model_that_never_answers_fails_its_step_with_cause_timeout_in_process(
    tmp_path: Path,
) -> None:
    world = LocalWorld(tmp_path / "world")
    import_litellm()  # (seconds, the first time: not the step's time)
    with silent_script().installed(), pytest.raises(RunFailedError) as raised:
        run_workflow(silent_model, {}, world=world)
    assert raised.value.result is not None
    error = _step_error(raised.value.result.state, "think")
    assert error["causeCode"] == "timeout"
    events = world.list_events(raised.value.run_id)
    # The call ended at the attempt's deadline, whichever came first: the provider's own
    # timeout (it was given what was left of the attempt) or the attempt no longer waiting
    # for it (the call abandoned to its thread); the harness recorded why.
    (failed,) = [event for event in events if event.type == "harness.model.failed"]
    error = failed.payload["error"]
    assert "request timeout" in str(failed.payload) or error.get("interrupted") is True, error
    assert events[-1].type == "RunFailed"


def test_the_keeper_stops_renewing_at_the_deadline_and_hands_over_after_the_grace() -> None:
    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

    class World:
        def __init__(self) -> None:
            self.renewed: list[float] = []

        def renew_lease(self, lease: Lease, ttl: float) -> Lease:
            self.renewed.append(clock.now)
            return lease

    clock = Clock()
    world = World()
    ended: list[Lease] = []
    fired = threading.Event()
    keeper = LeaseKeeper(world, clock=clock)  # type: ignore[arg-type]
    lease = Lease("k", "h", 1, 30.0)

    def end(lease: Lease) -> None:
        ended.append(lease)
        fired.set()

    try:
        kept = keeper.keep(lease, 30.0, deadline=25.0, on_deadline=end)
        for step in (10.0, 20.0, 25.0, 26.0, 25.0 + DEADLINE_GRACE):
            clock.now = step
            keeper.wake()
            time.sleep(0.05)
        assert fired.wait(2.0)
        assert kept.timed_out.is_set() and kept.cancelled()
        assert world.renewed == [10.0, 20.0]  # none at or after the deadline
        assert ended == [lease]
    finally:
        keeper.close()


def test_an_attempt_that_stops_in_time_is_not_ended_by_the_keeper() -> None:
    class World:
        def renew_lease(self, lease: Lease, ttl: float) -> Lease:
            return lease

    ended: list[Lease] = []
    keeper = LeaseKeeper(World())  # type: ignore[arg-type]
    try:
        soon = time.monotonic() + 0.1
        kept = keeper.keep(Lease("k", "h", 1, 30.0), 30.0, deadline=soon, on_deadline=ended.append)
        time.sleep(0.2)
        assert kept.timed_out.is_set()
        kept.stop()  # the attempt saw it and ended itself
        time.sleep(DEADLINE_GRACE + 0.3)
        assert ended == []
    finally:
        keeper.close()


@pytest.mark.integration
@pytest.mark.slow
def test_on_the_fleet_a_hung_step_fails_on_time_and_the_worker_serves_the_next_run(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    script = silent_script().save(tmp_path / "silent.json")
    env = {"LITTLE_TEST_SIDE_EFFECTS": str(calls), "LITTLE_SCRIPTED_MODEL": str(script)}
    start_worker(fleet_env, app="tests.hung_app", concurrency=2, env=env)
    start_scheduler(fleet_env)
    with fleet_env.client() as client:
        stuck = client.submit(hung_tool, {"label": "fleet"})
        silent = client.submit(silent_model, {})
        stuck_state = client.wait(stuck, timeout=_WITHIN)
        silent_state = client.wait(silent, timeout=_WITHIN)
        assert stuck_state.status == "failed"
        assert _step_error(stuck_state, "stuck")["causeCode"] == "timeout"
        assert "after" not in stuck_state.steps
        assert silent_state.status == "failed"
        assert _step_error(silent_state, "think")["causeCode"] == "timeout"
        # One slot is still stuck in `hang`; the other (the model call ended at its
        # timeout) serves the next run.
        calls.write_text("")
        again = client.submit(silent_model, {})
        assert client.wait(again, timeout=_WITHIN).status == "failed"
    assert calls.read_text().splitlines() == []  # the stuck call was never made again
