"""execute_step_attempt: fencing, duplicate delivery, superseded attempts, heartbeats, outputs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.compiler import WorkflowVersion, compile_lwir
from little_dist.errors import LeaseLostError
from little_dist.events import Event, EventInput
from little_dist.harness.types import ExecuteStepResult, HarnessContext, HarnessTask
from little_dist.run_state import materialize_run_state
from little_dist.runtime import (
    PLAIN,
    AttemptOutcome,
    Capabilities,
    LeaseHeartbeat,
    execute_step_attempt,
    hydrate_events,
    step_lease_key,
    sweep_dead_attempts,
)
from little_dist.scheduling import RunContext, StepDispatch
from little_dist.tools import ToolRegistry, tool
from little_dist.world.base import World
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.workflows_for_tests import single_tool_lwir
from tests.workflows_for_tests import tools as test_tools

RUN = "run_runtime_test"


class FakeClock:
    """A settable clock for world leases (seconds)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


@pytest.fixture(params=["memory", "local"])
def clocked_world(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[World, FakeClock]]:
    clock = FakeClock()
    world: World = (
        MemoryWorld(clock=clock) if request.param == "memory" else LocalWorld(tmp_path, clock=clock)
    )
    yield world, clock
    world.close()


def started(world: World, version: WorkflowVersion, run_input: Any, path: str = "only") -> None:
    """Register, start the run and schedule attempt 1 of ``path`` (what decide would do)."""
    world.register_version(version.id, version.to_json())
    world.append_batch(
        RUN,
        [
            EventInput(
                type="RunStarted",
                occurrence_id="run-start",
                payload={"workflowVersionId": version.id, "input": run_input},
            ),
            EventInput(
                type="StepScheduled",
                occurrence_id=f"sched:{path}:1",
                payload={"stepPath": path, "stepId": path, "uses": "tool.call"},
            ),
        ],
    )


def dispatch(path: str = "only", attempt: int = 1) -> StepDispatch:
    return StepDispatch(RUN, path, path, attempt, "worker", "execute_step")


def types_of(world: World) -> list[str]:
    return [event.type for event in world.list_events(RUN)]


def ends(world: World, path: str = "only") -> list[Event]:
    return [
        event
        for event in world.list_events(RUN)
        if event.type in ("StepCompleted", "StepFailed") and event.payload["stepPath"] == path
    ]


def counting_tool(calls: list[int], body: Callable[[], Any] | None = None) -> Any:
    @tool
    def add(a: int, b: int) -> dict[str, Any]:
        """Add, counting calls."""
        calls.append(1)
        if body is not None:
            body()
        return {"sum": a + b}

    return add


def test_happy_path_records_the_attempt_sequence(clocked_world: tuple[World, FakeClock]) -> None:
    world, _ = clocked_world
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})
    caps = Capabilities(tools=test_tools)

    outcome = execute_step_attempt(world, dispatch(), version=version, capabilities=caps)

    assert outcome is AttemptOutcome.completed
    kinds = types_of(world)
    assert kinds[:3] == ["RunStarted", "StepScheduled", "StepAttemptStarted"]
    assert "harness.tool_call.succeeded" in kinds
    assert kinds[-2:] == ["StepOutputValidated", "StepCompleted"]
    completed = world.list_events(RUN)[-1]
    assert completed.occurrence_id == "end:only:1"
    assert completed.payload["output"] == {"sum": 3}
    assert completed.payload["attemptId"] == "attempt_1"
    assert "outputRef" not in completed.payload  # small output: inline, no artifact
    assert "ArtifactCreated" not in kinds
    state = materialize_run_state(world.list_events(RUN))
    assert state.steps["only"].status == "completed"
    # The lease is released: someone else can take it at once.
    assert world.acquire_lease(step_lease_key(RUN, "only"), "someone", 5) is not None


def test_duplicate_delivery_after_completion_commits_once(
    clocked_world: tuple[World, FakeClock],
) -> None:
    world, _ = clocked_world
    calls: list[int] = []
    caps = Capabilities(tools=ToolRegistry([counting_tool(calls)]))
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})

    first = execute_step_attempt(world, dispatch(), version=version, capabilities=caps)
    second = execute_step_attempt(world, dispatch(), version=version, capabilities=caps)

    assert (first, second) == (AttemptOutcome.completed, AttemptOutcome.already_done)
    assert len(calls) == 1
    assert len(ends(world)) == 1


class _Untouchable(list[Event]):
    """Prior events the attempt must not look at (iterating them would decode them)."""

    def __iter__(self) -> Iterator[Event]:
        raise AssertionError("the prior events were read")


def test_an_attempt_the_callers_state_shows_over_reads_nothing(
    clocked_world: tuple[World, FakeClock],
) -> None:
    # A fleet worker's hand-out may name an attempt that another worker finished meanwhile:
    # when the state it folded already shows the end, the attempt stops there, without a
    # read of the log and without looking at the step's earlier events.
    world, _ = clocked_world
    calls: list[int] = []
    caps = Capabilities(tools=ToolRegistry([counting_tool(calls)]))
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})
    assert execute_step_attempt(world, dispatch(), version=version, capabilities=caps) is (
        AttemptOutcome.completed
    )
    events = world.list_events(RUN)
    reads: list[int] = []
    original = world.list_events

    def counted(run_id: str, **kwargs: Any) -> list[Event]:
        reads.append(1)
        return original(run_id, **kwargs)

    world.list_events = counted  # type: ignore[method-assign]

    outcome = execute_step_attempt(
        world,
        dispatch(),
        version=version,
        capabilities=caps,
        state=materialize_run_state(events),
        context=RunContext(version=version, run_input={}, run_id=RUN),
        prior_events=_Untouchable(events),
        continuation=PLAIN,
    )

    assert outcome is AttemptOutcome.already_done
    assert reads == []
    assert len(calls) == 1
    assert len(ends(world)) == 1


def test_concurrent_duplicate_delivery_runs_the_tool_once(
    clocked_world: tuple[World, FakeClock],
) -> None:
    world, _ = clocked_world
    calls: list[int] = []
    inside = threading.Event()
    release = threading.Event()

    def hold() -> None:
        inside.set()
        assert release.wait(10)

    caps = Capabilities(tools=ToolRegistry([counting_tool(calls, hold)]))
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})
    outcomes: list[AttemptOutcome] = []
    worker = threading.Thread(
        target=lambda: outcomes.append(
            execute_step_attempt(world, dispatch(), version=version, capabilities=caps)
        )
    )
    worker.start()
    assert inside.wait(10)
    # The same dispatch delivered again while the first delivery runs: the lease is held.
    duplicate = execute_step_attempt(world, dispatch(), version=version, capabilities=caps)
    release.set()
    worker.join(10)

    assert duplicate is AttemptOutcome.busy
    assert outcomes == [AttemptOutcome.completed]
    assert len(calls) == 1
    assert len(ends(world)) == 1


def test_superseded_attempt_writes_nothing_more(clocked_world: tuple[World, FakeClock]) -> None:
    world, clock = clocked_world
    taken: list[Any] = []

    def stall_then_lose_the_lease() -> None:
        # The worker stalls past its lease; the lease expires and another holder takes it.
        clock.advance(120)
        taken.append(world.acquire_lease(step_lease_key(RUN, "only"), "newer-worker", 60))

    calls: list[int] = []
    caps = Capabilities(tools=ToolRegistry([counting_tool(calls, stall_then_lose_the_lease)]))
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})
    before = len(world.list_events(RUN))

    outcome = execute_step_attempt(
        world, dispatch(), version=version, capabilities=caps, lease_ttl=30
    )

    assert outcome is AttemptOutcome.superseded
    assert taken and taken[0] is not None and taken[0].holder == "newer-worker"
    new_types = [event.type for event in world.list_events(RUN)[before:]]
    assert "StepCompleted" not in new_types and "StepFailed" not in new_types
    assert "harness.tool_call.succeeded" not in new_types  # its fenced record was refused
    # The newer holder still owns the lease: the superseded attempt did not release it.
    assert world.acquire_lease(step_lease_key(RUN, "only"), "third", 5) is None


def test_fenced_commit_refused_after_takeover(clocked_world: tuple[World, FakeClock]) -> None:
    world, clock = clocked_world
    key = step_lease_key(RUN, "only")
    old = world.acquire_lease(key, "old", 10)
    assert old is not None
    clock.advance(11)
    new = world.acquire_lease(key, "new", 10)
    assert new is not None and new.token > old.token
    with pytest.raises(LeaseLostError):
        world.append(
            RUN, EventInput(type="StepCompleted", payload={"stepPath": "x"}), fence=old.fence
        )


class WaitForCancel:
    """A harness that waits until ``ctx.cancelled()`` turns true (or 10 s)."""

    harness_id = "tests.wait-for-cancel"

    def __init__(self) -> None:
        self.saw_cancel = False

    def run(self, task: HarnessTask, ctx: HarnessContext) -> ExecuteStepResult:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if ctx.cancelled():
                self.saw_cancel = True
                break
            time.sleep(0.01)
        return ExecuteStepResult({"sum": 0})


def test_heartbeat_loss_cancels_the_harness(clocked_world: tuple[World, FakeClock]) -> None:
    world, clock = clocked_world
    harness = WaitForCancel()
    caps = Capabilities(tools=test_tools, harnesses={"worker.tool-call": harness})
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})

    def take_over() -> None:
        time.sleep(0.2)
        clock.advance(10)
        assert world.acquire_lease(step_lease_key(RUN, "only"), "thief", 60) is not None

    thief = threading.Thread(target=take_over)
    thief.start()
    outcome = execute_step_attempt(
        world, dispatch(), version=version, capabilities=caps, lease_ttl=0.3
    )
    thief.join()

    assert harness.saw_cancel
    assert outcome is AttemptOutcome.superseded
    assert ends(world) == []


def test_heartbeat_renews_a_lease_that_outlives_its_ttl(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)  # the real clock: renewals must keep the lease alive

    def slow() -> None:
        time.sleep(1.0)

    calls: list[int] = []
    caps = Capabilities(tools=ToolRegistry([counting_tool(calls, slow)]))
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})

    outcome = execute_step_attempt(
        world, dispatch(), version=version, capabilities=caps, lease_ttl=0.3
    )

    assert outcome is AttemptOutcome.completed  # 1 s of work under a 0.3 s lease
    assert len(ends(world)) == 1
    world.close()


def test_lease_heartbeat_unit(clocked_world: tuple[World, FakeClock]) -> None:
    world, clock = clocked_world
    lease = world.acquire_lease("{run_x}:thing", "me", 10)
    assert lease is not None
    lost: list[bool] = []
    with LeaseHeartbeat(world, lease, 10, interval=0.02, on_lost=lambda: lost.append(True)) as beat:
        time.sleep(0.1)
        renewed = beat.lease
        assert renewed.token == lease.token and not beat.cancelled()
        clock.advance(11)
        assert world.acquire_lease("{run_x}:thing", "other", 10) is not None
        deadline = time.monotonic() + 5
        while not beat.cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert beat.cancelled()
    assert lost == [True]


def test_large_output_goes_to_an_artifact(clocked_world: tuple[World, FakeClock]) -> None:
    world, _ = clocked_world
    doc = single_tool_lwir("big_text", {"size": 5000}, output={"mode": "text"})
    version = compile_lwir(doc, input={})
    started(world, version, {})

    outcome = execute_step_attempt(
        world,
        dispatch(),
        version=version,
        capabilities=Capabilities(tools=test_tools),
        inline_limit=1000,
    )

    assert outcome is AttemptOutcome.completed
    events = world.list_events(RUN)
    created = [event for event in events if event.type == "ArtifactCreated"]
    completed = events[-1]
    assert len(created) == 1
    ref = created[0].payload["artifactRef"]
    assert completed.payload["outputRef"] == ref and "output" not in completed.payload
    assert completed.payload["artifactRefs"][0] == ref
    assert world.get_artifact(ref).payload == "x" * 5000
    state = materialize_run_state(hydrate_events(world, events))
    assert state.steps["only"].output == "x" * 5000
    # Envelopes (what a fold-only read hands over) are read back in too, without a copy of
    # the ones that need nothing.
    envelopes = [event.to_json() for event in events]
    hydrated = hydrate_events(world, envelopes)
    assert hydrated[:-1] == envelopes[:-1] and hydrated[0] is envelopes[0]
    assert hydrated[-1]["payload"]["output"] == "x" * 5000
    assert "output" not in envelopes[-1]["payload"]  # the envelope read is left as it was
    assert materialize_run_state(hydrated).steps["only"].output == "x" * 5000


def test_output_at_the_limit_stays_inline(clocked_world: tuple[World, FakeClock]) -> None:
    world, _ = clocked_world
    doc = single_tool_lwir("big_text", {"size": 998}, output={"mode": "text"})
    version = compile_lwir(doc, input={})
    started(world, version, {})
    execute_step_attempt(
        world,
        dispatch(),
        version=version,
        capabilities=Capabilities(tools=test_tools),
        inline_limit=1000,  # canonical JSON of a 998-char string is 1000 bytes
    )
    completed = world.list_events(RUN)[-1]
    assert completed.payload["output"] == "x" * 998
    assert "outputRef" not in completed.payload


def test_output_contract_mismatch_fails_with_step_schema_error(
    clocked_world: tuple[World, FakeClock],
) -> None:
    world, _ = clocked_world
    doc = single_tool_lwir(
        output={
            "mode": "object",
            "schema": {
                "type": "object",
                "required": ["missing"],
                "properties": {"missing": {"type": "string"}},
            },
        }
    )
    version = compile_lwir(doc, input={})
    started(world, version, {})
    outcome = execute_step_attempt(
        world, dispatch(), version=version, capabilities=Capabilities(tools=test_tools)
    )
    assert outcome is AttemptOutcome.failed
    (failed,) = ends(world)
    assert failed.type == "StepFailed"
    assert failed.occurrence_id == "end:only:1"
    assert failed.payload["error"]["causeCode"] == "step_schema_error"
    assert failed.payload["error"]["retriable"] is False


def test_tool_error_fails_the_attempt_retriably(clocked_world: tuple[World, FakeClock]) -> None:
    world, _ = clocked_world
    version = compile_lwir(single_tool_lwir("explode", {"message": "kaput"}), input={})
    started(world, version, {})
    outcome = execute_step_attempt(
        world, dispatch(), version=version, capabilities=Capabilities(tools=test_tools)
    )
    assert outcome is AttemptOutcome.failed
    (failed,) = ends(world)
    error = failed.payload["error"]
    assert "kaput" in error["message"]
    assert error["retriable"] is True
    assert set(error) >= {"name", "message", "causeCode", "retriable"}


def test_unregistered_tool_is_a_runtime_config_error(
    clocked_world: tuple[World, FakeClock],
) -> None:
    world, _ = clocked_world
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})
    outcome = execute_step_attempt(world, dispatch(), version=version, capabilities=Capabilities())
    assert outcome is AttemptOutcome.failed
    (failed,) = ends(world)
    assert failed.payload["error"]["causeCode"] == "runtime_config_error"
    assert failed.payload["error"]["retriable"] is False


def test_retry_reuses_the_memoized_tool_result(clocked_world: tuple[World, FakeClock]) -> None:
    """Attempt 1 dies after its tool call's success is in the log; attempt 2 does not call
    the tool again. (A ``tool.call`` step appends the success with its commit, so here the
    log is cut right after it: a log an attempt left that recorded the result apart.)"""
    world, clock = clocked_world
    calls: list[int] = []

    class Die(BaseException):
        """Stands in for the process dying right after the tool call was recorded."""

    @tool
    def add(a: int, b: int) -> dict[str, Any]:
        """Add, counting calls."""
        calls.append(1)
        return {"sum": a + b}

    caps = Capabilities(tools=ToolRegistry([add]))
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})

    original = world.append_batch

    def dying_append_batch(run_id: str, events: Any, **kwargs: Any) -> Any:
        types = [event.type for event in events]
        if "StepOutputValidated" in types:
            kept = types.index("harness.tool_call.succeeded") + 1
            original(run_id, list(events)[:kept], **kwargs)
            raise Die()
        return original(run_id, events, **kwargs)

    world.append_batch = dying_append_batch  # type: ignore[method-assign]
    with pytest.raises(Die):
        execute_step_attempt(world, dispatch(), version=version, capabilities=caps, lease_ttl=5)
    world.append_batch = original  # type: ignore[method-assign]
    assert len(calls) == 1
    # The lease of the dead attempt was released by the finally; make it a real crash anyway:
    # the sweep finds the attempt running with a free lease and fails it.
    clock.advance(10)
    state = materialize_run_state(world.list_events(RUN))
    result = sweep_dead_attempts(world, state, version=version, holder="sweeper")
    assert result.failed == [("only", 1)]
    (failed,) = ends(world)
    assert failed.payload["error"]["causeCode"] == "lease_expired"
    assert failed.payload["error"]["retriable"] is True

    world.append(
        RUN,
        EventInput(
            type="StepScheduled",
            occurrence_id="sched:only:2",
            payload={"stepPath": "only", "stepId": "only", "uses": "tool.call"},
        ),
    )
    outcome = execute_step_attempt(world, dispatch(attempt=2), version=version, capabilities=caps)

    assert outcome is AttemptOutcome.completed
    assert len(calls) == 1  # memoized: the side effect did not happen twice
    kinds = types_of(world)
    assert "little.harness.tool_call.memoized" in kinds
    assert world.list_events(RUN)[-1].payload["output"] == {"sum": 3}


def _running_attempt(world: World) -> WorkflowVersion:
    """A started single-step run whose step ``only`` has attempt 1 running; its version."""
    version = compile_lwir(single_tool_lwir(), input={})
    started(world, version, {})
    world.append(
        RUN,
        EventInput(
            type="StepAttemptStarted",
            occurrence_id="start:only:1",
            payload={"stepPath": "only", "stepId": "only", "attempt": 1},
        ),
    )
    return version


def test_sweep_leaves_attempts_whose_lease_is_held(clocked_world: tuple[World, FakeClock]) -> None:
    world, _ = clocked_world
    version = _running_attempt(world)
    assert world.acquire_lease(step_lease_key(RUN, "only"), "live-worker", 30) is not None
    state = materialize_run_state(world.list_events(RUN))

    result = sweep_dead_attempts(world, state, version=version, holder="sweeper")

    assert result.failed == [] and result.held == [("only", 1)]
    assert ends(world) == []


def test_sweep_of_an_attempt_that_committed_since_its_look_fails_nothing(
    clocked_world: tuple[World, FakeClock],
) -> None:
    # The sweep saw the attempt running; its worker committed (and freed the lease) before
    # the sweep took the lease: the commit stands and the sweep reports no failure.
    world, _ = clocked_world
    version = _running_attempt(world)
    state = materialize_run_state(world.list_events(RUN))
    world.append(
        RUN,
        EventInput(
            type="StepCompleted",
            occurrence_id="end:only:1",
            payload={"stepPath": "only", "stepId": "only", "attempt": 1, "output": {}},
        ),
    )

    result = sweep_dead_attempts(world, state, version=version, holder="sweeper")

    assert result.failed == [] and result.ended == [("only", 1)]
    assert [e.type for e in ends(world)] == ["StepCompleted"]
