"""Deadlines and cancellation in process: upstream's run-level ``timeout`` and
``maxAttempts``, a run's deadline, and ``run_workflow``'s cancel handle, each ending a run
whose model call is still in flight (the call is not waited for; what it spent is recorded)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest

from little_dist import CancelToken, define_workflow, run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.errors import InvalidInputError
from little_dist.report.model import calls_usage
from little_dist.run_limits import RunLimits, run_limits
from little_dist.run_state import materialize_run_state
from little_dist.world.in_process import MemoryWorld
from tests.cancel_app import REPLY, build_script, flaky, slow, timed, two

LONG = 30.0  # a call's latency that no test waits out


@pytest.fixture(autouse=True)
def _litellm_imported() -> None:
    """litellm imported before the clock of a run's deadline starts (it takes seconds)."""
    from little_dist.harness.model_calls import import_litellm

    import_litellm()


def _failed(world: MemoryWorld, workflow: Any, **options: Any) -> RunFailedError:
    with pytest.raises(RunFailedError) as caught:
        run_workflow(workflow, {"item": "a"}, world=world, **options)
    return caught.value


def _interrupted_call(world: Any, run_id: str) -> Any:
    """The interrupted call's record: in the log, or (refused because the run had ended by
    then) in the run's late record, where ``little status`` and the report count it."""
    failed = [
        *(e for e in world.list_events(run_id) if e.type == "harness.model.failed"),
        *(e for e in world.late_events(run_id) if e.type == "harness.model.failed"),
    ]
    assert len(failed) == 1, failed
    error = failed[0].payload["error"]
    assert error["causeCode"] == "cancelled" and error["interrupted"] is True
    assert error["usage"]["inputTokens"] > 0 and error["usage"]["outputTokens"] == 0
    return failed[0]


def test_upstreams_timeout_ends_the_run_mid_call_with_cause_timeout() -> None:
    world = MemoryWorld()
    with build_script(latency=LONG).installed():
        started = time.monotonic()
        failed = _failed(world, slow, run_id="run_timeout", timeout="1s")
        took = time.monotonic() - started
    assert failed.cause_code == "timeout"
    assert took < 5  # the 30 s call was not waited for
    events = world.list_events("run_timeout")
    assert events[0].type == "OrchestrationRequested"  # (names the workflow: `little runs`)
    (limits,) = [e for e in events if e.type == "little.run.limits"]
    assert limits.payload["timeoutMs"] == 1000 and limits.payload["causeCode"] == "timeout"
    (end,) = [e for e in events if e.type == "RunFailed"]
    assert end.payload["error"] == {
        "name": "TimeoutError",
        "message": "Run exceeded its timeout of 1000 ms.",
        "causeCode": "timeout",
        "retriable": False,
    }
    call = _interrupted_call(world, "run_timeout")
    # What the interrupted call is taken to have spent is counted as the run's cost is.
    spent = calls_usage([call]) if call in world.late_events("run_timeout") else None
    state = materialize_run_state(events, run_id="run_timeout")
    tokens = spent.input_tokens if spent is not None else state.usage.input_tokens
    assert tokens == call.payload["error"]["usage"]["inputTokens"]


def test_a_workflows_own_timeout_applies_and_a_runs_wins() -> None:
    world = MemoryWorld()
    with build_script(latency=1.5).installed():
        assert _failed(world, timed, run_id="run_wf_timeout").cause_code == "timeout"
        result = run_workflow(timed, {"item": "a"}, world=world, timeout=20_000)
    assert result.output == REPLY


def test_a_deadline_ends_the_run_with_deadline_exceeded() -> None:
    world = MemoryWorld()
    at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)
    with build_script(latency=LONG).installed():
        failed = _failed(world, slow, run_id="run_deadline", deadline=at)
    assert failed.cause_code == "deadline_exceeded"
    (end,) = [e for e in world.list_events("run_deadline") if e.type == "RunFailed"]
    assert end.payload["error"]["name"] == "TimeoutError"
    assert at.isoformat(timespec="seconds")[:19] in end.payload["error"]["message"]
    _interrupted_call(world, "run_deadline")


def test_max_attempts_retries_a_step_without_a_retry_of_its_own() -> None:
    world = MemoryWorld()
    with build_script(fail_first=True).installed():
        assert _failed(world, flaky, run_id="run_once").cause_code != "timeout"
    with build_script(fail_first=True).installed():
        result = run_workflow(flaky, {"item": "a"}, world=world, max_attempts=2)
    assert result.output == REPLY
    attempts = [e for e in world.list_events(result.run_id) if e.type == "StepAttemptStarted"]
    assert len(attempts) == 2


def test_a_cancel_token_ends_the_run_while_its_call_is_in_flight() -> None:
    world = MemoryWorld()
    token = CancelToken()

    def cancel_once_called() -> None:
        while not any(e.type == "harness.model.called" for e in world.list_events("run_tok")):
            time.sleep(0.02)
        token.cancel("enough")

    canceller = threading.Thread(target=cancel_once_called)
    with build_script(latency=LONG).installed():
        canceller.start()
        started = time.monotonic()
        failed = _failed(world, slow, run_id="run_tok", cancel=token)
        took = time.monotonic() - started
    canceller.join()
    assert failed.cause_code == "cancelled"
    assert took < 5
    events = world.list_events("run_tok")
    (request,) = [e for e in events if e.type == "little.run.cancel_requested"]
    assert request.payload == {"requestedBy": "run_workflow", "reason": "enough"}
    _interrupted_call(world, "run_tok")


def test_a_threading_event_cancels_too_and_a_set_one_runs_nothing() -> None:
    world = MemoryWorld()
    event = threading.Event()
    event.set()
    script = build_script()
    with script.installed():
        assert _failed(world, slow, run_id="run_evt", cancel=event).cause_code == "cancelled"
    assert script.calls == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": "soon"}, "timeout must be a duration"),
        ({"timeout": -5}, "timeout must be a duration"),
        ({"timeout": True}, "timeout must be a duration"),
        ({"max_attempts": 0}, "max_attempts must be an integer >= 1"),
        ({"max_attempts": 1.5}, "max_attempts must be an integer >= 1"),
        ({"deadline": 30}, "deadline must be a datetime"),
        ({"deadline": "tomorrow"}, "deadline must be a duration from now"),
        ({"deadline": dt.datetime(2030, 1, 1)}, "has no time zone"),
        ({"cancel": "yes"}, "cancel must be a CancelToken"),
    ],
)
def test_bad_limits_are_refused_naming_the_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        run_workflow(slow, {"item": "a"}, world=MemoryWorld(), **options)


def test_define_workflow_checks_its_limits() -> None:
    with pytest.raises(InvalidInputError, match=r"workflow 'w': timeout must be a duration"):
        define_workflow(id="w", description="d", model="scripted/x", timeout="1 fortnight")
    with pytest.raises(InvalidInputError, match=r"workflow 'w': max_attempts must be"):
        define_workflow(id="w", description="d", model="scripted/x", max_attempts=-1)


def test_durations_and_the_earlier_limit() -> None:
    limits = run_limits("t", now=1000.0, timeout="1h30m", deadline="10m")
    assert limits == RunLimits(1000_000 + 600_000, "deadline_exceeded", 5_400_000, None)
    limits = run_limits("t", now=1000.0, timeout=1500, deadline="2h", attempts=3)
    assert limits == RunLimits(1000_000 + 1500, "timeout", 1500, 3)
    assert RunLimits.from_payload(limits.event().payload) == limits


def test_a_resumed_run_keeps_the_deadline_it_started_with() -> None:
    world = MemoryWorld()
    with build_script(latency=0.0).installed():
        run_workflow(two, {"item": "a"}, world=world, run_id="run_keep", timeout="1h")
        # Read back: the same limits event, not a second one.
        run_workflow(two, {"item": "a"}, world=world, run_id="run_keep", timeout="1s")
    limits = [e for e in world.list_events("run_keep") if e.type == "little.run.limits"]
    assert len(limits) == 1 and limits[0].payload["timeoutMs"] == 3_600_000


def test_a_cancelled_outer_loop_ends_its_current_cycle_and_asks_no_supervisor(
    tmp_path: Any, scripted_model: Any
) -> None:
    from little_dist.world.local import LocalWorld
    from tests.outer_loop_helpers import script_decisions, script_planner, simple_workflow

    world = LocalWorld(tmp_path / "data")
    script_planner(scripted_model)
    script_decisions(scripted_model, {"kind": "continue"}, {"kind": "continue"})
    token = CancelToken()
    token.cancel("stop the loop")
    with pytest.raises(RunFailedError) as caught:
        run_workflow(
            simple_workflow(), {"value": "v"}, world=world, max_outer_cycles=3, cancel=token
        )
    assert caught.value.cause_code == "cancelled"
    assert scripted_model.calls_for(step="supervisor") == []
    assert len(scripted_model.calls_for(step="planner")) == 1  # one cycle, not three
    (run_id,) = world.list_run_ids()
    (request,) = [e for e in world.list_events(run_id) if e.type == "little.run.cancel_requested"]
    assert request.payload["reason"] == "stop the loop"


def test_a_cancel_kills_the_sandboxed_command_a_step_runs() -> None:
    from little_dist.testing import ScriptedModel
    from tests.bash_fleet_app import shell

    world = MemoryWorld()
    script = ScriptedModel()
    script.on(step="shell").call_tool("bash", {"cmd": "sleep 30; echo late"}).then_reply_text(
        "done"
    )
    token = CancelToken()

    def cancel_once_running() -> None:
        while not any(
            e.type == "harness.tool_call.started" for e in world.list_events("run_bash_cancel")
        ):
            time.sleep(0.02)
        time.sleep(0.3)  # (the command is running in its sandbox)
        token.cancel()

    canceller = threading.Thread(target=cancel_once_running)
    with script.installed():
        canceller.start()
        started = time.monotonic()
        failed = _failed(world, shell, run_id="run_bash_cancel", cancel=token)
        took = time.monotonic() - started
    canceller.join()
    assert failed.cause_code == "cancelled"
    # run_workflow waits for its attempts: it returned because the command was killed, not
    # after the 30 s sleep.
    assert took < 10


def test_the_submit_task_checks_its_limits() -> None:
    from little_dist.fleet.refusals import SubmissionRefused, submit_arguments

    sent = submit_arguments(
        (), {"workflow_id": "cancel.slow", "deadline": "10m", "timeout": 5000, "max_attempts": 2}
    )
    assert sent.limits == {"deadline": "10m", "timeout": 5000, "max_attempts": 2}
    by_position = submit_arguments(
        ("cancel.slow", None, {}, None, None, "2026-01-31T18:00:00Z"), {}
    )
    assert by_position.limits == {"deadline": "2026-01-31T18:00:00Z"}
    with pytest.raises(SubmissionRefused, match=r"invalid_arguments.*deadline must be"):
        submit_arguments((), {"workflow_id": "cancel.slow", "deadline": "soonish"})
    with pytest.raises(SubmissionRefused, match=r"invalid_arguments.*max_attempts must be"):
        submit_arguments((), {"workflow_id": "cancel.slow", "max_attempts": 0})
