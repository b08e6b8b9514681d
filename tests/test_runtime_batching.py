"""How an attempt batches its writes: write-ahead before side effects, durable results,
one commit; LocalWorld's event ids; stale state after taking the lease; the runner folding
what attempts hand over; the lease keeper not woken per lease."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from little_dist.compiler import compile_lwir
from little_dist.events import Event, EventInput
from little_dist.harness.recorder import EventRecorder
from little_dist.ids import event_id_for
from little_dist.local_runner import run_version
from little_dist.local_runner.runner import _held_for_a_while
from little_dist.run_state import materialize_run_state
from little_dist.runtime import AttemptOutcome, Capabilities, execute_step_attempt
from little_dist.runtime.heartbeat import LeaseKeeper
from little_dist.tools import ToolRegistry, tool
from little_dist.world.base import Lease
from little_dist.world.fleet_keys import step_lease_key
from little_dist.world.local import LocalWorld
from tests.test_runtime import RUN, dispatch, started
from tests.workflows_for_tests import chain_lwir, single_tool_lwir
from tests.workflows_for_tests import tools as test_tools

_WRITES = (
    "append",
    "append_batch",
    "append_batch_then_acquire",
    "acquire_lease",
    "renew_lease",
    "release_lease",
)


class CountingWorld:
    """A LocalWorld that counts its write calls and the events its reads return."""

    def __init__(self, inner: LocalWorld) -> None:
        self.inner = inner
        self.writes: list[str] = []
        self.events_read = 0

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name in _WRITES:

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.writes.append(name)
                return found(*args, **kwargs)

            return counted
        if name == "list_events":

            def read(*args: Any, **kwargs: Any) -> list[Event]:
                events: list[Event] = found(*args, **kwargs)
                self.events_read += len(events)
                return events

            return read
        return found


def _adder(on_call: Callable[[], None] | None = None) -> tuple[ToolRegistry, list[int]]:
    calls: list[int] = []

    @tool
    def add(a: int, b: int) -> dict[str, Any]:
        """Add, counting calls."""
        calls.append(1)
        if on_call is not None:
            on_call()
        return {"sum": a + b}

    return ToolRegistry([add]), calls


# -- event ids ----------------------------------------------------------------------------


def test_recorded_events_carry_the_canonical_event_id(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    try:
        world.append_batch(
            RUN,
            [
                EventInput(type="A", payload={"x": 1.5, "é": [1, 2]}, occurrence_id="a"),
                EventInput(type="B", payload={}),
            ],
        )
        for event in world.list_events(RUN):
            assert event.event_id == event_id_for(
                RUN, event.sequence, event.type, event.payload, event.occurrence_id
            )
    finally:
        world.close()


# -- the deferred recorder ------------------------------------------------------------------


def test_deferred_recorder_holds_events_until_a_write_ahead_point(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    sunk: list[Event] = []
    try:
        recorder = EventRecorder(world, RUN, "draft", 1, deferred=True, sink=sunk.extend)
        assert (
            recorder.session_started(role="worker", task_kind="execute_step", manifest={}) is None
        )
        assert recorder.pending_count == 1
        assert world.list_events(RUN) == []
        called = recorder.model_called(1, {"model": "m", "messages": [], "tools": []})
        assert called is not None and called.type == "harness.model.called"
        assert [e.type for e in world.list_events(RUN)] == [
            "harness.session.started",
            "harness.model.called",
        ]
        responded = recorder.model_responded(
            1, {"text": "hi", "usage": {"inputTokens": 1}}, model={}, duration_ms=1.0
        )
        assert responded is not None  # a result is durable when recorded
        assert recorder.session_completed({"output": "hi"}) is None
        pending = recorder.take_pending()
        assert [e.type for e in pending] == ["harness.session.completed"]
        assert [e.type for e in sunk] == [e.type for e in world.list_events(RUN)]
    finally:
        world.close()


def test_write_through_recorder_appends_at_once(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    try:
        recorder = EventRecorder(world, RUN, "draft", 1)
        event = recorder.session_started(role="worker", task_kind="execute_step", manifest={})
        assert event is not None and world.list_events(RUN) == [event]
        assert recorder.pending_count == 0
    finally:
        world.close()


# -- one attempt ----------------------------------------------------------------------------


def test_a_tool_step_costs_three_writes_in_log_order(tmp_path: Path) -> None:
    inner = LocalWorld(tmp_path)
    world = CountingWorld(inner)
    seen_during_call: list[str] = []
    tools, calls = _adder(lambda: seen_during_call.extend(e.type for e in inner.list_events(RUN)))
    version = compile_lwir(single_tool_lwir(), input={})
    started(inner, version, {})
    recorded: list[Event] = []
    keeper = LeaseKeeper(inner)
    try:
        outcome = execute_step_attempt(
            world,
            dispatch(),
            version=version,
            capabilities=Capabilities(tools=tools),
            keeper=keeper,
            on_recorded=recorded.extend,
        )
    finally:
        keeper.close()
    assert outcome is AttemptOutcome.completed and calls == [1]
    assert world.writes == [
        "acquire_lease",
        "append_batch",  # write-ahead: started .. tool_call.started
        # the commit, with the tool's result (the step's output: one record, as an
        # activity's result and completion), releasing the step lease in the same call
        "append_batch",
    ]
    # Released: another worker takes the step lease at once, not at its expiry.
    assert inner.acquire_lease(step_lease_key(RUN, "only"), "next", 5.0) is not None
    # Write-ahead: the attempt and the call were in the log while the tool ran.
    assert seen_during_call[2:] == [
        "StepAttemptStarted",
        "harness.session.started",
        "harness.execute_step.started",
        "harness.tool_call.started",
    ]
    log = inner.list_events(RUN)
    assert [e.type for e in log[2:]] == [
        "StepAttemptStarted",
        "harness.session.started",
        "harness.execute_step.started",
        "harness.tool_call.started",
        "harness.tool_call.succeeded",
        "harness.execute_step.succeeded",
        "harness.session.completed",
        "StepOutputValidated",
        "StepCompleted",
    ]
    assert recorded == log[2:]  # handed over exactly what was appended, in order
    assert materialize_run_state(log).steps["only"].status == "completed"
    inner.close()


def test_a_failing_tool_commits_the_pending_events_with_step_failed(tmp_path: Path) -> None:
    inner = LocalWorld(tmp_path)
    world = CountingWorld(inner)

    def fail() -> None:
        raise RuntimeError("boom")

    tools, calls = _adder(fail)
    version = compile_lwir(single_tool_lwir(), input={})
    started(inner, version, {})
    try:
        outcome = execute_step_attempt(
            world,
            dispatch(),
            version=version,
            capabilities=Capabilities(tools=tools),
        )
        assert outcome is AttemptOutcome.failed and calls == [1]
        # lease, write-ahead, commit + release (a failed call is not memoized: no result write)
        assert world.writes == ["acquire_lease", "append_batch", "append_batch"]
        assert _types(inner.list_events(RUN)[6:]) == [
            "harness.tool_call.failed",
            "harness.session.failed",
            "StepFailed",
        ]
    finally:
        inner.close()


def test_state_folded_before_the_lease_is_checked_again(tmp_path: Path) -> None:
    """A duplicate delivery that read the log before the first worker committed and got the
    lease after it released finds the attempt over instead of running the tool again."""
    world = LocalWorld(tmp_path)
    tools, calls = _adder()
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})
    stale_events = world.list_events(RUN)
    stale_state = materialize_run_state(stale_events)
    caps = Capabilities(tools=tools)
    try:
        first = execute_step_attempt(world, dispatch(), version=version, capabilities=caps)
        assert first is AttemptOutcome.completed
        from little_dist.scheduling import RunContext

        context = RunContext(version=version, run_input={}, run_id=RUN)
        second = execute_step_attempt(
            world,
            dispatch(),
            version=version,
            capabilities=caps,
            state=stale_state,
            context=context,
            prior_events=stale_events,
        )
        assert second is AttemptOutcome.already_done
        assert calls == [1]
    finally:
        world.close()


# -- the runner -----------------------------------------------------------------------------


def test_the_runner_folds_what_attempts_hand_over(tmp_path: Path) -> None:
    inner = LocalWorld(tmp_path)
    world = CountingWorld(inner)
    version = compile_lwir(chain_lwir(5), input={})
    try:
        state = run_version(
            world,
            version,
            {},
            capabilities=Capabilities(tools=test_tools),
        )
        assert state.status == "completed"
        assert state.event_count == len(inner.list_events(state.run_id))
        # Nothing written by this runner or its attempts was read back from the log.
        assert world.events_read == 0
        # Per step: the write-ahead (with the step's schedule) and the commit, which
        # releases the step's lease and takes the next link's: the only leases taken on
        # their own are the runner lock and the first step's.
        assert world.writes.count("acquire_lease") == 1 + 1
        assert world.writes.count("append_batch_then_acquire") == 5 - 1
        assert world.writes.count("release_lease") == 1  # the runner lock
        assert _held_leases(inner) == []
    finally:
        inner.close()


def _held_leases(world: LocalWorld) -> list[str]:
    rows = world._db.read("SELECT key FROM leases WHERE holder IS NOT NULL", ())
    return [key for (key,) in rows]


def test_a_next_step_lease_the_run_does_not_use_is_released(tmp_path: Path) -> None:
    # s1's commit takes s2's lease; the cancel request set during s1's call ends the run
    # before s2 runs: the lease is released, not left to expire (a resumed run would wait).
    handle = threading.Event()

    @tool
    def noop(n: int = 0) -> dict[str, Any]:
        """Ask for the run's cancel at s1."""
        if n == 1:
            handle.set()
        return {"n": n}

    inner = LocalWorld(tmp_path)
    world = CountingWorld(inner)
    version = compile_lwir(chain_lwir(4), input={})
    try:
        state = run_version(
            world,
            version,
            {},
            capabilities=Capabilities(tools=ToolRegistry([noop])),
            cancel=handle,
        )
        assert state.status == "failed"
        ended = inner.list_events(state.run_id)[-1]
        assert (ended.type, ended.payload["error"]["causeCode"]) == ("RunFailed", "cancelled")
        assert [s for s, step in sorted(state.steps.items()) if step.status == "completed"] == [
            "s0",
            "s1",
        ]
        assert world.writes.count("append_batch_then_acquire") == 2  # s0's and s1's commits
        assert _held_leases(inner) == []
    finally:
        inner.close()


def test_a_chain_step_s_schedule_rides_with_its_first_append(tmp_path: Path) -> None:
    # The runner's decision to run the next step of a chain (its StepScheduled) is recorded
    # with that step's first append, not on its own: per step, the first append and the
    # commit. The log holds the same events in the same order.
    inner = LocalWorld(tmp_path)
    world = CountingWorld(inner)
    steps = 6
    version = compile_lwir(chain_lwir(steps), input={})
    try:
        state = run_version(world, version, {}, capabilities=Capabilities(tools=test_tools))
        assert state.status == "completed"
        events = inner.list_events(state.run_id)
        # Each step's schedule comes right before its attempt starts, in one append with it.
        for index, event in enumerate(events):
            if event.type == "StepAttemptStarted":
                scheduled = events[index - 1]
                assert scheduled.type == "StepScheduled"
                assert scheduled.payload["stepPath"] == event.payload["stepPath"]
        appends = sum(
            world.writes.count(name)
            for name in ("append_batch", "append", "append_batch_then_acquire")
        )
        # The run's start; two appends per step (the non-read-only tool's write-ahead, which
        # carries the step's schedule, and the commit); the run's end. (Three per step when
        # each schedule was appended on its own.)
        assert appends == 1 + 2 * steps + 1, world.writes
    finally:
        inner.close()


def test_a_decision_rides_only_while_the_runner_lease_is_surely_held() -> None:
    # A ridden decision is fenced by the attempt's step lease, not the runner's: a runner
    # that stalled past its lease (another may have taken the run over and run the step)
    # appends its decision on its own, where the runner lease's fence refuses it.
    def lock(left: float) -> Lease:
        return Lease("run_x:runner", "me", 1, time.time() + left)

    assert _held_for_a_while(lock(14.0), 15.0)  # just renewed
    assert _held_for_a_while(lock(9.0), 15.0)  # due for its next renewal
    assert not _held_for_a_while(lock(4.0), 15.0)  # a renewal was missed
    assert not _held_for_a_while(lock(-30.0), 15.0)  # the process stalled past it


@pytest.mark.parametrize("ttl", [15.0])
def test_the_keeper_renews_without_being_woken_for_each_lease(ttl: float) -> None:
    class Renewals:
        def __init__(self) -> None:
            self.renewed: list[str] = []

        def renew_lease(self, lease: Lease, ttl_seconds: float) -> Lease:
            self.renewed.append(lease.key)
            return Lease(lease.key, lease.holder, lease.token, lease.expires_at + ttl_seconds)

    now = [0.0]
    world = Renewals()
    keeper = LeaseKeeper(world, clock=lambda: now[0])  # type: ignore[arg-type]
    try:
        first = keeper.keep(Lease("a", "h", 1, ttl), ttl)
        first.stop()
        # The thread idles until one renewal period from now; a lease kept later is due
        # later still, so keep() does not need to wake it (no notify): nothing is renewed.
        now[0] = 1.0
        second = keeper.keep(Lease("b", "h", 1, ttl), ttl)
        assert keeper.next_look <= second.due
        assert world.renewed == []
        second.stop()
    finally:
        keeper.close()


def _types(events: Sequence[Event]) -> list[str]:
    return [event.type for event in events]
