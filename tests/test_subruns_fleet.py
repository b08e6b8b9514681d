"""Sub-runs on the fleet: a parent's step suspends while its children run, holding no slot,
and is resumed by the scheduler when they end (real ``little worker`` / ``little scheduler``
processes, Redis and S3). The app is :mod:`tests.subrun_fleet_app`: a scripted boss model
calls the ``sub.kid`` workflow as a tool; each kid's two steps count their real calls.

Every test checks the same invariants at the end: each child has one ``RunStarted`` and is
linked to the parent, and every child's end reached the parent's tool call."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import redis

from little_dist.events import Event
from little_dist.subruns import SUB_RUN_ENDED, SUB_RUN_STARTED
from little_dist.subruns.links import STEP_SUSPENDED
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.subrun_fleet_app import DONE, FX_PREFIX_ENV, SCRIPT_ENV, kid_key, slow_key

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

APP = "tests.subrun_fleet_app"


def _configure(fleet: FleetEnv) -> None:
    fleet.env.update({SCRIPT_ENV: "1", FX_PREFIX_ENV: fleet.key_prefix, "LITTLE_APP": APP})


def _types(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def _children(fleet: FleetEnv, parent: str) -> dict[str, list[Event]]:
    world = fleet.world()
    started = _types(world.list_events(parent), SUB_RUN_STARTED)
    return {e.payload["childRunId"]: world.list_events(e.payload["childRunId"]) for e in started}


def _wait_until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _count(fleet: FleetEnv, key: str) -> int:
    client = redis.Redis.from_url(fleet.redis_url)
    try:
        value = client.get(key)
    finally:
        client.close()
    return int(value) if value is not None else 0


def _check_children(fleet: FleetEnv, parent: str, expected: int) -> dict[str, list[Event]]:
    """Each child started once, linked to the parent; returns the children's logs."""
    children = _children(fleet, parent)
    assert len(children) == expected
    for child, events in children.items():
        assert child.startswith("run_sub_")
        (started,) = _types(events, "RunStarted")
        assert started.payload["parentRunId"] == parent
        assert started.payload["parentStepPath"] == "boss"
    return children


def _submit(fleet: FleetEnv, scenario: str) -> str:
    from tests.subrun_fleet_app import boss

    return fleet.client().submit(boss, {"scenario": scenario})


def test_a_parent_suspends_while_its_child_runs_and_resumes_with_its_result(
    fleet_env: FleetEnv,
) -> None:
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2)
    parent = _submit(fleet_env, "one")
    state = fleet_env.client().wait(parent, timeout=90)
    assert state.status == "completed", state.error
    assert state.output == DONE
    events = fleet_env.world().list_events(parent)
    kinds = [e.type for e in events]
    # suspended -> (the child ends) -> resumed as attempt 2, which completes the step
    suspended = kinds.index(STEP_SUSPENDED)
    ended = kinds.index(SUB_RUN_ENDED)
    attempts = [e.payload["attempt"] for e in _types(events, "StepAttemptStarted")]
    assert attempts == [1, 2]
    resumed = next(
        i
        for i, e in enumerate(events)
        if e.type == "StepAttemptStarted" and e.payload["attempt"] == 2
    )
    assert suspended < ended < resumed < kinds.index("StepCompleted")
    (children,) = [list(_check_children(fleet_env, parent, 1))]
    assert events[suspended].payload["waitingFor"] == children
    # the child's result is the call's result, taken by the resumed attempt
    (call,) = _types(events, "harness.tool_call.succeeded")
    assert call.payload["attempt"] == 2
    assert call.payload["result"]["status"] == "completed"
    assert json.loads(call.payload["result"]["outputSummary"]) == {
        "n": 1,
        "step": "second",
        "value": 2,
    }
    # the model's first turn was not asked again: two model calls in all
    assert len(_types(events, "harness.model.responded")) == 2
    for step in ("first", "second"):
        assert _count(fleet_env, kid_key(fleet_env.key_prefix, 1, step)) == 1


def _completed(fleet: FleetEnv, parent: str, timeout: float = 150) -> list[Event]:
    state = fleet.client().wait(parent, timeout=timeout)
    assert state.status == "completed", state.error
    assert state.output == DONE
    return fleet.world().list_events(parent)


def _ended_runs(fleet: FleetEnv, runs: list[str]) -> bool:
    world = fleet.world()
    for run in runs:
        events = world.list_events(run, after=max(0, world.last_sequence(run) - 1))
        if not events or events[-1].type not in ("RunCompleted", "RunFailed"):
            return False
    return True


def _every_call_answered(events: list[Event], calls: int) -> None:
    """Each child's result reached its tool call, once."""
    succeeded = _types(events, "harness.tool_call.succeeded")
    kids = [e for e in succeeded if e.payload["toolName"] == "sub.kid"]
    assert len(kids) == calls
    assert len({e.payload["result"]["runId"] for e in kids}) == calls
    for event in kids:
        n = event.payload["args"]["n"]
        summary = json.loads(event.payload["result"]["outputSummary"])
        assert summary == {"n": n, "step": "second", "value": 2 * n}


def _suspended_and_children_running(fleet: FleetEnv, parent: str) -> Callable[[], bool]:
    def check() -> bool:
        world = fleet.world()
        if not _types(world.list_events(parent), STEP_SUSPENDED):
            return False
        children = _children(fleet, parent)
        return bool(children) and all(
            _types(events, "StepAttemptStarted") for events in children.values()
        )

    return check


def test_two_slots_complete_two_parents_that_each_wait_on_ten_children(
    fleet_env: FleetEnv,
) -> None:
    # One worker, two slots, two parents: were a waiting parent to hold its slot, the two
    # would hold both and their twenty children could never run.
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2)
    parents = [_submit(fleet_env, "ten"), _submit(fleet_env, "ten")]
    for parent in parents:
        events = _completed(fleet_env, parent)
        (suspended,) = _types(events, STEP_SUSPENDED)
        # the ten calls of one model turn started their children, then the attempt
        # suspended once for all of them
        children = _check_children(fleet_env, parent, 10)
        assert suspended.payload["waitingFor"] == list(children)
        _every_call_answered(events, 10)
        for child_events in children.values():
            assert len(_types(child_events, "StepCompleted")) == 2
    for n in range(1, 11):
        for step in ("first", "second"):
            assert _count(fleet_env, kid_key(fleet_env.key_prefix, n, step)) == 2


def test_sigkill_of_the_worker_running_the_children_loses_no_result_and_starts_none_twice(
    fleet_env: FleetEnv,
) -> None:
    # The one worker ran the parent's attempt (suspended) and runs its children: killed
    # while they run, a new worker finishes them and the parent resumes.
    _configure(fleet_env)
    start_scheduler(fleet_env)
    worker = start_worker(fleet_env, app=APP, concurrency=4)
    parent = _submit(fleet_env, "slow")
    _wait_until("children running", _suspended_and_children_running(fleet_env, parent))
    worker.kill()
    start_worker(fleet_env, app=APP, concurrency=4)
    events = _completed(fleet_env, parent)
    children = _check_children(fleet_env, parent, 3)
    _every_call_answered(events, 3)
    for child_events in children.values():
        # the killed attempt was swept and retried: each step completed once
        completed = [e.payload["stepPath"] for e in _types(child_events, "StepCompleted")]
        assert completed == ["first", "second"]
    assert len(_types(events, STEP_SUSPENDED)) == 1


def test_sigkill_of_the_parents_worker_before_its_suspension_commits(
    fleet_env: FleetEnv,
) -> None:
    # The parent's model turn starts a child, then calls a slow tool: the worker dies in that
    # call, the attempt's suspension never committed. The sweeper fails the attempt; its
    # retry replays the turn, finds the started child (the same id) and starts no other.
    _configure(fleet_env)
    start_scheduler(fleet_env)
    worker = start_worker(fleet_env, app=APP, concurrency=4)
    parent = _submit(fleet_env, "before-suspend")

    def in_slow_tool() -> bool:
        if _count(fleet_env, slow_key(fleet_env.key_prefix)) < 1:
            return False  # (its write-ahead record comes before the call itself)
        events = fleet_env.world().list_events(parent)
        return any(
            e.type == "harness.tool_call.started" and e.payload.get("toolName") == "slow_tool"
            for e in events
        )

    _wait_until("the slow tool running", in_slow_tool)
    worker.kill()
    start_worker(fleet_env, app=APP, concurrency=4)
    events = _completed(fleet_env, parent)
    _check_children(fleet_env, parent, 1)
    _every_call_answered(events, 1)
    failed = _types(events, "StepFailed")
    assert [e.payload["error"]["causeCode"] for e in failed] == ["lease_expired"]
    assert len(_types(events, SUB_RUN_STARTED)) == 1
    assert _count(fleet_env, slow_key(fleet_env.key_prefix)) == 2  # killed in it, then again


def test_a_scheduler_killed_before_it_noticed_the_childrens_end_leaves_it_to_the_next(
    fleet_env: FleetEnv,
) -> None:
    _configure(fleet_env)
    scheduler = start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=4)
    parent = _submit(fleet_env, "slow")
    _wait_until("children running", _suspended_and_children_running(fleet_env, parent))
    scheduler.kill()
    children = list(_children(fleet_env, parent))
    # The workers run the children to their ends without a scheduler; nobody tells the
    # parent meanwhile.
    _wait_until("the children's ends", lambda: _ended_runs(fleet_env, children), timeout=90)
    time.sleep(1.0)
    assert _types(fleet_env.world().list_events(parent), SUB_RUN_ENDED) == []
    start_scheduler(fleet_env)
    events = _completed(fleet_env, parent)
    assert len(_types(events, SUB_RUN_ENDED)) == 3
    _check_children(fleet_env, parent, 3)
    _every_call_answered(events, 3)


def test_cancelling_a_parent_cancels_its_running_children(fleet_env: FleetEnv) -> None:
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=4)
    parent = _submit(fleet_env, "slow")
    _wait_until("children running", _suspended_and_children_running(fleet_env, parent))
    client = fleet_env.client()
    assert client.cancel(parent, reason="enough")
    state = client.wait(parent, timeout=60)
    assert state.status == "failed"
    assert state.error["causeCode"] == "cancelled"
    children = list(_check_children(fleet_env, parent, 3))
    _wait_until("the children's ends", lambda: _ended_runs(fleet_env, children), timeout=60)
    for child, events in _children(fleet_env, parent).items():
        (cancel,) = _types(events, "little.run.cancel_requested")
        assert cancel.payload["parentRunId"] == parent
        (end,) = _types(events, "RunFailed")
        assert end.payload["error"]["causeCode"] == "cancelled", child
    for n in range(1, 4):  # cancelled in their first steps: no second step ever ran
        assert _count(fleet_env, kid_key(fleet_env.key_prefix, n, "second")) == 0


def test_a_child_that_fails_is_its_tool_calls_result_envelope(fleet_env: FleetEnv) -> None:
    # Upstream hands the calling model a failed child as a result envelope (this test pinned
    # a tool error before): the model reads the child's run id, cause and failed step.
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=4)
    parent = _submit(fleet_env, "fail")
    events = _completed(fleet_env, parent)
    children = _check_children(fleet_env, parent, 2)
    assert _types(events, "harness.tool_call.failed") == []
    called = {
        e.payload["args"]["n"]: e.payload
        for e in _types(events, "harness.tool_call.succeeded")
        if e.payload["toolName"] == "sub.kid"
    }
    (bad,) = [c for c, ev in children.items() if _types(ev, "RunFailed")]
    envelope = called[-1]["result"]
    assert envelope["status"] == "failed" and envelope["runId"] == bad
    assert envelope["causeCode"] == "workflow_failed"
    assert envelope["outputSummary"].startswith("Failed at step 'first' (")
    assert json.loads(called[1]["result"]["outputSummary"])["value"] == 2
    ends = {e.payload["childRunId"]: e.payload["status"] for e in _types(events, SUB_RUN_ENDED)}
    assert ends[bad] == "failed"


def test_a_paced_workflow_tool_runs_one_child_at_a_time_and_refuses_past_its_queue(
    fleet_env: FleetEnv,
) -> None:
    # Upstream's workflowBudgets on a fleet: one turn calls sub.kid_paced three times (one
    # run at a time, one waiting): the first starts, the second waits for it, the third
    # would queue past the budget and is refused with upstream's envelope.
    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=4)
    parent = _submit(fleet_env, "paced")
    events = _completed(fleet_env, parent)
    children = _check_children(fleet_env, parent, 2)
    called = {
        e.payload["args"]["n"]: e.payload["result"]
        for e in _types(events, "harness.tool_call.succeeded")
        if e.payload["toolName"] == "sub.kid_paced"
    }
    assert json.loads(called[1]["outputSummary"])["value"] == 2
    assert json.loads(called[2]["outputSummary"])["value"] == 4
    assert called[3]["status"] == "failed"
    assert called[3]["causeCode"] == "max_queued_workflow_runs"
    assert "maxQueuedWorkflowRuns is 1 and 1 workflow runs" in called[3]["message"]
    assert called[3]["runId"] not in children  # never started
    assert _count(fleet_env, kid_key(fleet_env.key_prefix, 3, "first")) == 0
    # One at a time: the second child started after the first had ended.
    first, second = called[1]["runId"], called[2]["runId"]
    (first_end,) = _types(children[first], "RunCompleted")
    (second_start,) = _types(children[second], "RunStarted")
    assert second_start.recorded_at >= first_end.recorded_at


def test_a_code_run_program_calls_a_workflow_tool_suspending_at_each_call(
    fleet_env: FleetEnv,
) -> None:
    # A program's workflow tool call on the fleet starts its child and suspends the step (the
    # program is stopped, the slot given back); the resumed attempt runs the program again,
    # its earlier calls answered from the log, until it completes: one attempt per child + 1.
    from tests.subrun_fleet_app import coder, kid

    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2)
    parent = fleet_env.client().submit(coder, {})
    state = fleet_env.client().wait(parent, timeout=120)
    assert state.status == "completed", state.error
    assert state.output == {"status": "completed", "value": 6, "failed": ["workflow_failed", True]}
    events = fleet_env.world().list_events(parent)
    children = _check_children(fleet_env, parent, 2)
    assert [e.payload["attempt"] for e in _types(events, "StepAttemptStarted")] == [1, 2, 3]
    suspended = _types(events, STEP_SUSPENDED)
    assert [e.payload["waitingFor"] for e in suspended] == [[child] for child in children]
    ends = {e.payload["childRunId"]: e.payload["status"] for e in _types(events, SUB_RUN_ENDED)}
    assert sorted(ends.values()) == ["completed", "failed"]
    # each call recorded once, with caller code: the child's whole execution, or its failure
    (ok,) = _types(events, "harness.tool_call.succeeded")
    assert ok.payload["caller"] == "code" and ok.payload["result"]["protocolVersion"] == 1
    assert ok.payload["result"]["output"] == {"n": 3, "step": "second", "value": 6}
    (failed,) = _types(events, "harness.tool_call.failed")
    assert failed.payload["caller"] == "code"
    assert failed.payload["error"]["name"] == "SubRunFailedError"
    # each child's steps ran once, though the program ran three times
    assert _count(fleet_env, kid_key(fleet_env.key_prefix, 3, "first")) == 1
    assert _count(fleet_env, kid_key(fleet_env.key_prefix, -1, "first")) == 1
    started = _types(events, SUB_RUN_STARTED)
    assert {e.payload["executionMode"] for e in started} == {"inline"}
    assert {e.payload["definitionIdentity"] for e in started} == {kid.definition_hash()}
