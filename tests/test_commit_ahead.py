"""A commit's round trip put to use: the in-flight hook of RedisS3World's appends, and the
fleet worker's fold and decision made while a chain step's commit is on its way.

On a real Redis: the hook is handed the events an append records as guessed, once it is
sent and before its reply is read, and told whether the reply confirmed them (not when
another writer appended in between, nor when the fence refused it); a world call the hook
makes meanwhile goes over another connection; a worker's inline chain takes each look's
decision from the fold made ahead, and a commit that recorded otherwise leaves the tracker
to read the log again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from little_dist.events import Event, EventInput
from little_dist.fleet import run_tracker
from little_dist.fleet.app_registry import AppRegistry
from little_dist.fleet.client import submit_run
from little_dist.fleet.dispatch import advance_run
from little_dist.fleet.fold_ahead import CommitAhead
from little_dist.fleet.queue import MemoryQueue
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.worker import WorkerRuntime
from little_dist.runtime import Capabilities
from little_dist.settings import load_settings
from little_dist.tools import ToolRegistry
from little_dist.world.in_flight import while_in_flight
from little_dist.world.redis_s3 import RedisS3World
from tests import workflows_for_tests as wf
from tests.conftest_services import S3Service, open_redis_s3_world

pytestmark = pytest.mark.integration


@pytest.fixture
def worlds(
    redis_url: str, redis_key_prefix: str, s3_service: S3Service
) -> Iterator[Callable[[], RedisS3World]]:
    """Opens worlds on the same keys, as separate processes have (own connections and
    run caches)."""
    name = uuid.uuid4().hex[:10]
    opened: list[RedisS3World] = []

    def another() -> RedisS3World:
        opened.append(open_redis_s3_world(redis_url, redis_key_prefix, s3_service, name))
        return opened[-1]

    yield another
    for each in opened:
        each.close()


@pytest.fixture
def world(worlds: Callable[[], RedisS3World]) -> RedisS3World:
    return worlds()


class Hook:
    """A hook that notes what it is told, and may call the world while the reply is due."""

    def __init__(self, during: Any = None) -> None:
        self.expected: list[list[Event]] = []
        self.outcomes: list[bool] = []
        self._during = during

    def sent(self, expected: Sequence[Event]) -> None:
        self.expected.append(list(expected))
        if self._during is not None:
            self._during()

    def settled(self, confirmed: bool) -> None:
        self.outcomes.append(confirmed)


def _tick(index: int) -> EventInput:
    return EventInput(type="little.test.tick", payload={"tick": index}, occurrence_id=f"t{index}")


def test_the_hook_gets_what_the_append_records_before_its_reply_and_then_a_confirmation(
    world: RedisS3World,
) -> None:
    run_id = "run_ahead_plain"
    world.append(run_id, _tick(0))  # (the run's first append takes redis-py's own path)
    hook = Hook()
    with while_in_flight(hook):
        recorded = world.append_batch(run_id, [_tick(1), _tick(2)])
    assert hook.outcomes == [True]
    [expected] = hook.expected
    assert [e.to_json() for e in expected] == [e.to_json() for e in recorded]
    assert [e.sequence for e in recorded] == [2, 3]
    assert [e.to_json() for e in world.list_events(run_id, after=1)] == [
        e.to_json() for e in recorded
    ]


def test_an_append_another_writer_got_ahead_of_is_not_confirmed(
    worlds: Callable[[], RedisS3World],
) -> None:
    ours, theirs = worlds(), worlds()
    run_id = "run_ahead_raced"
    ours.append(run_id, _tick(0))
    ours.append(run_id, _tick(1))
    theirs.append(run_id, _tick(2))  # ours still guesses sequence 3 for its next
    hook = Hook()
    with while_in_flight(hook):
        recorded = ours.append_batch(run_id, [_tick(3)])
    assert [e.sequence for e in hook.expected[0]] == [3]
    assert hook.outcomes == [False]
    assert [e.sequence for e in recorded] == [4]  # (the answer is the log's, as ever)


def test_a_fenced_append_is_not_confirmed(world: RedisS3World) -> None:
    run_id = "run_ahead_fenced"
    world.append(run_id, _tick(0))
    lease = world.acquire_lease("ahead:lease", "me", 30)
    assert lease is not None
    world.release_lease(lease)
    hook = Hook()
    with while_in_flight(hook), pytest.raises(Exception, match="no longer held"):
        world.append_batch(run_id, [_tick(1)], fence=lease.fence)
    assert hook.outcomes == [False]
    assert [e.sequence for e in world.list_events(run_id)] == [1]


def test_a_world_call_the_hook_makes_while_the_reply_is_due_goes_over_another_connection(
    world: RedisS3World,
) -> None:
    run_id, other = "run_ahead_nested", "run_ahead_nested_other"
    world.append(run_id, _tick(0))
    world.append(other, _tick(0))
    seen: list[list[Event]] = []
    hook = Hook(during=lambda: seen.append(world.list_events(other)))
    with while_in_flight(hook):
        recorded = world.append_batch(run_id, [_tick(1)])
        # (the nested append, made without the hook, answers its own call)
    assert hook.outcomes == [True]
    assert [e.sequence for e in recorded] == [2]
    assert [[e.type for e in events] for events in seen] == [["little.test.tick"]]
    assert [e.sequence for e in world.list_events(run_id)] == [1, 2]


def _runtime(world: RedisS3World) -> tuple[WorkerRuntime, MemoryQueue]:
    settings = load_settings({"LITTLE_WORKER_INLINE_STEPS": "100"})
    registry = AppRegistry(default=Capabilities(tools=ToolRegistry([wf.noop])))
    runtime = WorkerRuntime(settings, world=world, registry=registry, roles=("worker",))
    queue = MemoryQueue(sized=False)
    runtime.queue = queue
    return runtime, queue


def test_an_inline_chain_takes_each_look_s_decision_from_the_fold_made_ahead(
    world: RedisS3World, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, queue = _runtime(world)
    calls = {"decided": 0, "made ahead": 0}
    real_decided = RunTracker.decided

    def decided(self: RunTracker, state: Any, claims: Any) -> Any:
        found = real_decided(self, state, claims)
        calls["decided"] += 1
        calls["made ahead"] += found is not None
        return found

    monkeypatch.setattr(RunTracker, "decided", decided)
    run_id = submit_run(world, wf.chain_lwir(6), {}, run_id="run_ahead_chain")
    advance_run(world, queue, runtime.settings, RunTracker(world, run_id))
    [task] = queue.take()
    assert runtime.execute(*task[1], "execute_step") == "completed"
    events = world.list_events(run_id)
    assert events[-1].type == "RunCompleted"
    started = [e.payload["stepPath"] for e in events if e.type == "StepAttemptStarted"]
    assert started == [f"s{index}" for index in range(6)]
    # s0..s4 have a next step: each look after their commits took the decision made ahead
    # (s5, the last, is not folded ahead: its look decides the run's end itself).
    assert calls["made ahead"] == 5
    runtime.close()


def test_a_commit_that_recorded_otherwise_leaves_the_tracker_to_read_the_log_again(
    worlds: Callable[[], RedisS3World], monkeypatch: pytest.MonkeyPatch
) -> None:
    world, other = worlds(), worlds()
    runtime, queue = _runtime(world)
    run_id = submit_run(world, wf.chain_lwir(4), {}, run_id="run_ahead_refused")
    advance_run(world, queue, runtime.settings, RunTracker(world, run_id))
    [task] = queue.take()
    # Another writer appends as the second step's commit is sent: the commit lands one
    # sequence later than guessed, and what was folded ahead is dropped.
    real_sent = CommitAhead.sent
    raced: list[int] = []

    def sent(self: CommitAhead, expected: Sequence[Event]) -> None:
        if not raced and any(e.payload.get("stepPath") == "s1" for e in expected):
            raced.append(1)
            other.append(run_id, EventInput(type="little.test.note", payload={}))
        real_sent(self, expected)

    monkeypatch.setattr(CommitAhead, "sent", sent)
    dropped: list[bool] = []
    real_settle = run_tracker.RunTracker.settle

    def settle(self: RunTracker, confirmed: bool) -> None:
        dropped.append(not confirmed)
        real_settle(self, confirmed)

    monkeypatch.setattr(run_tracker.RunTracker, "settle", settle)
    assert runtime.execute(*task[1], "execute_step") == "completed"
    events = world.list_events(run_id)
    assert raced == [1] and True in dropped
    assert events[-1].type == "RunCompleted"
    started = [e.payload["stepPath"] for e in events if e.type == "StepAttemptStarted"]
    assert started == ["s0", "s1", "s2", "s3"]  # each once, in order
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    runtime.close()


@pytest.mark.parametrize("confirmed", [True, False])
def test_a_decision_made_ahead_is_taken_only_after_a_confirmed_commit(confirmed: bool) -> None:
    from little_dist.scheduling import Claims
    from little_dist.world.in_process import MemoryWorld

    world = MemoryWorld()
    runtime, queue = _runtime(world)  # type: ignore[arg-type]
    done = submit_run(world, wf.chain_lwir(3), {}, run_id="run_ahead_done")
    advance_run(world, queue, runtime.settings, RunTracker(world, done))
    [task] = queue.take()
    assert runtime.execute(*task[1], "execute_step") == "completed"
    runtime.close()
    log = world.list_events(done)
    # A second run of the same chain, up to s0's schedule; the first run's s0 commit (its
    # start through its completion), as this run's, is the commit folded ahead.
    run_id = submit_run(world, wf.chain_lwir(3), {}, run_id="run_ahead_next")
    advance_run(world, MemoryQueue(sized=False), runtime.settings, RunTracker(world, run_id))
    tracker = RunTracker(world, run_id)
    before = tracker.catch_up()
    scheduled = before.event_count
    assert log[scheduled - 1].type == "StepScheduled"
    completed = next(i for i, e in enumerate(log) if e.type == "StepCompleted")
    commit = [Event(**{**dict(e), "run_id": run_id}) for e in log[scheduled : completed + 1]]
    hook = CommitAhead(tracker, str(commit[-1].occurrence_id))
    hook.sent(commit)
    hook.settled(confirmed)
    state = tracker.state() if confirmed else tracker.catch_up()
    taken = tracker.decided(state, Claims())
    if confirmed:
        assert taken is not None and state.event_count == commit[-1].sequence
        assert [d.step_path for d in taken.dispatch] == ["s1"]
    else:
        # Dropped: no decision taken, and the view is the log's again (s0 not completed).
        assert taken is None
        assert state.event_count == scheduled
        assert state.steps["s0"].status != "completed"
