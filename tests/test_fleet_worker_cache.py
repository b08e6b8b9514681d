"""The worker's per-process run cache and the fast path's cheaper dispatch (no network).

A :class:`~little_dist.fleet.worker.WorkerRuntime` runs on a MemoryWorld; what its fast path
sends goes to a recording stand-in for the Celery app, and the test delivers those tasks
(sequentially, or from a thread pool as a threads worker does).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from little_dist.events import Event, EventInput
from little_dist.fleet.app_registry import AppRegistry
from little_dist.fleet.client import submit_run
from little_dist.fleet.dispatch import Advance, Keep, advance_run
from little_dist.fleet.fastpath import FastPath
from little_dist.fleet.queue import MemoryQueue
from little_dist.fleet.run_cache import RunCache
from little_dist.fleet.run_tracker import KEPT_EVENT_BYTES, RunTracker
from little_dist.fleet.sending import acquire_leases
from little_dist.fleet.worker import WorkerRuntime
from little_dist.run_state import RunStateBuilder
from little_dist.runtime import Capabilities
from little_dist.scheduling import Decision, StepDispatch
from little_dist.settings import Settings, load_settings
from little_dist.tools import ToolRegistry
from little_dist.tools import tool as tool_fn
from little_dist.world.base import UndecodedEvent
from little_dist.world.in_process import MemoryWorld
from little_dist.world.redis_s3 import RedisS3World
from tests import workflows_for_tests as wf
from tests.fleet_processes import FleetEnv, fleet_env
from tests.lwir_builder import workflow_doc

__all__ = ["fleet_env"]  # the fixture, imported for pytest


class CountingWorld(MemoryWorld):
    """Records every ``list_events`` read (its ``after``) and every lease acquire."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []
        self.acquires: list[str] = []

    def list_events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[Event]:
        self.reads.append(after)
        return super().list_events(run_id, after=after, limit=limit)

    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Any:
        self.acquires.append(key)
        return super().acquire_lease(key, holder, ttl_seconds)


def _settings(**env: str) -> Settings:
    return load_settings({"LITTLE_DISPATCH_RESEND_AFTER": "30", **env})


def _runtime(
    world: MemoryWorld,
    tools: ToolRegistry,
    *,
    roles: tuple[str, ...] = (),
    settings: Settings | None = None,
) -> tuple[WorkerRuntime, MemoryQueue]:
    registry = AppRegistry(default=Capabilities(tools=tools))
    runtime = WorkerRuntime(settings or _settings(), world=world, registry=registry, roles=roles)
    # (unsized: a slot whose inline budget ran out yields; tests that size it say so)
    app = MemoryQueue(sized=False)
    runtime.queue = app
    return runtime, app


def _start(world: MemoryWorld, app: MemoryQueue, doc: dict[str, Any], run_input: Any) -> str:
    run_id = submit_run(world, doc, run_input, run_id="run_cache_test")
    advance_run(world, app, _settings(), RunTracker(world, run_id))
    return run_id


def _deliver(runtime: WorkerRuntime, task: tuple[str, tuple[Any, ...]]) -> str:
    run_id, path, attempt = task[1]
    return runtime.execute(run_id, path, attempt, "execute_step")


def _deliver_while_one_advances(
    runtime: WorkerRuntime,
    tracker: RunTracker,
    monkeypatch: pytest.MonkeyPatch,
    advancing: tuple[str, tuple[Any, ...]],
    waiting: tuple[str, tuple[Any, ...]],
) -> tuple[str, str]:
    """Deliver two tasks of one run on two threads so that ``waiting``'s thread commits
    while ``advancing``'s thread advances the run (its first look waits for that), then
    waits for it; their outcomes."""
    from little_dist.fleet import fastpath as tasks

    real_advance_run = tasks.advance_run
    looks = iter([True])

    def advance_run(*args: Any, **options: Any) -> Any:
        if next(looks, False):  # the first look waits until the other thread waits for it
            deadline = time.monotonic() + 10
            while not tracker.advancing.waiting() and time.monotonic() < deadline:
                time.sleep(0.001)
        return real_advance_run(*args, **options)

    monkeypatch.setattr(tasks, "advance_run", advance_run)
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            first = pool.submit(_deliver, runtime, advancing)
            deadline = time.monotonic() + 10
            while not tracker.advancing.busy and time.monotonic() < deadline:
                time.sleep(0.001)
            second = pool.submit(_deliver, runtime, waiting)
            return first.result(timeout=30), second.result(timeout=30)
    finally:
        monkeypatch.setattr(tasks, "advance_run", real_advance_run)


def test_a_chain_reads_only_new_events_and_the_finished_run_is_forgotten() -> None:
    world = CountingWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]))
    run_id = _start(world, app, wf.chain_lwir(6), {})
    world.reads.clear()
    outcomes = []
    while tasks := app.take():
        outcomes += [_deliver(runtime, task) for task in tasks]
    reads = list(world.reads)
    assert outcomes == ["completed"] * 6
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    # The first task reads the log from the start; after that only what is new.
    assert reads[0] == 0
    assert all(after > 0 for after in reads[1:])
    assert run_id not in runtime.runs


def test_events_appended_by_another_process_are_seen_before_deciding() -> None:
    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]))
    run_id = _start(world, app, wf.chain_lwir(3), {})
    first = app.take()
    assert _deliver(runtime, first[0]) == "completed"
    assert run_id in runtime.runs  # cached, now behind whatever others append
    # Another worker process ran s1 meanwhile: delivered here too, nothing runs again.
    other, other_app = _runtime(world, ToolRegistry([wf.noop]))
    second = app.take()
    assert _deliver(other, second[0]) == "completed"
    assert _deliver(runtime, second[0]) == "already_done"
    # A cancel appended by a client is seen by the next look of the cached tracker.
    world.append(run_id, EventInput(type="little.run.cancel_requested", occurrence_id="cancel"))
    assert runtime.orchestrate(run_id) == "done"
    assert world.list_events(run_id)[-1].type == "RunFailed"
    assert run_id not in runtime.runs
    assert other_app.sent  # the other worker's fast path sent s2


def test_a_duplicate_delivery_of_a_finished_run_does_nothing() -> None:
    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]))
    run_id = _start(world, app, wf.chain_lwir(1), {})
    task = app.take()[0]
    assert _deliver(runtime, task) == "completed"
    count_before = len(world.list_events(run_id))
    assert _deliver(runtime, task) == "already_done"
    assert len(world.list_events(run_id)) == count_before
    assert run_id not in runtime.runs


@pytest.mark.parametrize("roles", [(), ("worker",)], ids=["queued", "eager"])
def test_concurrent_branches_of_one_run_share_the_tracker_and_each_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, roles: tuple[str, ...]
) -> None:
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv(wf.SIDE_EFFECTS_ENV, str(effects))
    world = CountingWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.record_branch]), roles=roles)
    doc = wf.fan_out_lwir(max_branches=64, max_concurrency=64)
    keys = [f"k{index}" for index in range(40)]
    run_id = _start(world, app, doc, {"keys": keys, "sleep": 0})
    outcomes: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        while tasks := app.take():
            # Deliver each task twice, concurrently: duplicate delivery commits once.
            for result in pool.map(lambda t: _deliver(runtime, t), tasks + tasks):
                outcomes[result] += 1
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    # Each branch completed once, by its task or as an eager continuation of another.
    completed = [e for e in world.list_events(run_id) if e.type == "StepCompleted"]
    assert len(completed) == len(keys) + 1  # and the fan
    assert outcomes["completed"] <= len(keys)
    assert sorted(effects.read_text().split()) == sorted(keys)
    # Each attempt's dispatch lease was asked for at most once by the submitter and once by
    # the worker process, not once per pending attempt per commit.
    per_attempt = Counter(key for key in world.acquires if ":dispatch:" in key)
    assert len(per_attempt) == len(keys)
    assert max(per_attempt.values()) <= 2


def test_the_fast_path_offers_an_attempt_again_only_after_resend_after() -> None:
    world = CountingWorld()
    app = MemoryQueue()
    settings = _settings()
    run_id = submit_run(
        world, wf.fan_out_lwir(max_concurrency=3), {"keys": ["a", "b", "c"], "sleep": 0}
    )
    tracker = RunTracker(world, run_id)
    assert len(advance_run(world, app, settings, tracker).sent) == 3
    world.acquires.clear()
    assert advance_run(world, app, settings, tracker).sent == ()
    assert world.acquires == []  # no lease round trip for what this tracker offered
    # A tracker of another process offers each pending attempt once; the leases refuse.
    assert advance_run(world, app, settings, RunTracker(world, run_id)).sent == ()
    assert len(world.acquires) == 3
    assert len(app.sent) == 3


def _started_steps(world: MemoryWorld, run_id: str) -> list[str]:
    return [
        e.payload["stepPath"] for e in world.list_events(run_id) if e.type == "StepAttemptStarted"
    ]


def test_a_worker_continues_a_chain_itself_without_the_broker() -> None:
    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",))
    run_id = _start(world, app, wf.chain_lwir(6), {})
    first = app.take()
    assert [task[1][1] for task in first] == ["s0"]
    # One task: s0, then s1..s5 run in this slot, each under its dispatch lease.
    assert _deliver(runtime, first[0]) == "completed"
    assert app.take() == []
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    assert _started_steps(world, run_id) == [f"s{index}" for index in range(6)]
    assert run_id not in runtime.runs


def test_eager_continuation_is_bounded_and_stops_at_shutdown() -> None:
    world = MemoryWorld()
    settings = _settings(LITTLE_WORKER_INLINE_STEPS="2")
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",), settings=settings)
    run_id = _start(world, app, wf.chain_lwir(6), {})
    # s0 and two more inline, then s3 goes to the queue.
    assert _deliver(runtime, app.take()[0]) == "completed"
    handed = app.take()
    assert [task[1][1:] for task in handed] == [("s3", 1)]
    assert _started_steps(world, run_id) == ["s0", "s1", "s2"]
    # A worker shutting down finishes its attempt and sends the next one to the queue.
    runtime.stopping.set()
    assert _deliver(runtime, handed[0]) == "completed"
    assert [task[1][1:] for task in app.take()] == [("s4", 1)]
    # Another worker's roles do not include the next step's: it is sent, not run.
    planner, planner_app = _runtime(world, ToolRegistry([wf.noop]), roles=("planner",))
    assert _deliver(planner, ("little.execute_step", (run_id, "s4", 1))) == "completed"
    last = planner_app.take()
    assert [task[1][1:] for task in last] == [("s5", 1)]
    assert _deliver(planner, last[0]) == "completed"
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    # Off (LITTLE_WORKER_INLINE_STEPS=0): every next step goes to the queue.
    off_world = MemoryWorld()
    off, off_app = _runtime(
        off_world,
        ToolRegistry([wf.noop]),
        roles=("worker",),
        settings=_settings(LITTLE_WORKER_INLINE_STEPS="0"),
    )
    off_run = _start(off_world, off_app, wf.chain_lwir(2), {})
    assert _deliver(off, off_app.take()[0]) == "completed"
    assert [task[1][1:] for task in off_app.take()] == [("s1", 1)]
    assert _started_steps(off_world, off_run) == ["s0"]


def test_a_fan_out_keeps_one_branch_and_sends_the_others() -> None:
    world = MemoryWorld()
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    runtime, app = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    run_id = _start(world, app, doc, {"keys": ["a", "b", "c", "d"], "sleep": 0})
    first = app.take()
    assert len(first) == 2
    # Each commit frees one slot of maxConcurrency 2: the worker keeps that branch.
    assert _deliver(runtime, first[0]) == "completed"
    assert app.take() == []
    assert _deliver(runtime, first[1]) == "completed"
    assert world.list_events(run_id)[-1].type == "RunCompleted"


def test_a_branch_another_process_kept_is_not_sent_by_the_next_look() -> None:
    # Process A's look keeps the branch a commit freed (to run it in a thread of its own);
    # process B looks at the run before A starts it: B must not send a task for it (the
    # task would find the branch busy or done), and neither does the scheduler's look.
    world = MemoryWorld()
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    plain, _ = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    plain.fast_path = False  # commits only: the looks below are the test's
    app = MemoryQueue()
    run_id = _start(world, app, doc, {"keys": ["a", "b", "c", "d"], "sleep": 0})
    first, _second = app.take()
    assert _deliver(plain, first) == "completed"

    settings = _settings()
    tracker_a = RunTracker(world, run_id)
    tracker_a.fold(world.list_events(run_id), own=True)  # A's own commit freed the slot
    kept_by_a = advance_run(world, MemoryQueue(), settings, tracker_a, keep=Keep(lambda _: True))
    assert kept_by_a.kept is not None and kept_by_a.kept_lease is not None
    for _ in range(2):  # a worker of process B, then a scheduler
        other = MemoryQueue()
        advance_run(world, other, settings, RunTracker(world, run_id), holder="b")
        assert [task[1][1] for task in other.take()] == []


def _branches_scheduled(world: MemoryWorld, run_id: str) -> list[str]:
    return [
        event.payload["branchPath"]
        for event in world.list_events(run_id)
        if event.type == "ParallelBranchScheduled"
    ]


def _fan_with_one_commit(keys: list[str]) -> tuple[MemoryWorld, str]:
    """A fan-out of maxConcurrency 2 whose first branch a worker committed (fast path off:
    the commit's process has not looked at the run); the second branch's task is pending."""
    world = MemoryWorld()
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    plain, _ = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    plain.fast_path = False
    app = MemoryQueue()
    run_id = _start(world, app, doc, {"keys": keys, "sleep": 0})
    first, _second = app.take()
    assert _deliver(plain, first) == "completed"
    return world, run_id


def test_a_workers_look_leaves_the_end_and_refill_of_another_processs_commit_to_it() -> None:
    # Process B's worker folds A's commit of branch a: it neither records the branch's end
    # nor schedules (nor sends) the branch that refills the freed slot; A's look, right after
    # its commit, records the end, schedules that branch and runs it itself, in the slot it
    # freed.
    world, run_id = _fan_with_one_commit(["a", "b", "c", "d"])
    settings = _settings()
    b_app = MemoryQueue()
    by_b = advance_run(
        world, b_app, settings, RunTracker(world, run_id), holder="b", keep=Keep(lambda _: True)
    )
    assert by_b.kept is None and b_app.take() == []
    assert _branches_scheduled(world, run_id) == ["fan[a]", "fan[b]"]
    assert [e.type for e in world.list_events(run_id)][-1] == "StepCompleted"

    tracker_a = RunTracker(world, run_id)
    tracker_a.fold(world.list_events(run_id), own=True)  # A's own commit
    a_app = MemoryQueue()
    by_a = advance_run(world, a_app, settings, tracker_a, holder="a", keep=Keep(lambda _: True))
    assert by_a.kept is not None and by_a.kept.step_path == "fan[c].work"
    assert a_app.take() == []
    assert [e.type for e in world.list_events(run_id)][-3:] == [
        "ParallelBranchCompleted",
        "ParallelBranchScheduled",
        "StepScheduled",
    ]


def test_the_schedulers_look_refills_every_freed_slot_whoever_committed() -> None:
    # The scheduler (no keep) leaves nothing to anyone: a worker that died between its
    # commit and its look, or one with the fast path off, is covered by it.
    world, run_id = _fan_with_one_commit(["a", "b", "c", "d"])
    advance_run(
        world, MemoryQueue(), _settings(), RunTracker(world, run_id), keep=Keep(lambda _: True)
    )  # a worker's look leaves fan[c]
    app = MemoryQueue()
    advance_run(world, app, _settings(), RunTracker(world, run_id), holder="scheduler")
    assert _branches_scheduled(world, run_id) == ["fan[a]", "fan[b]", "fan[c]"]
    assert [task[1][1] for task in app.take()] == ["fan[c].work"]


def test_a_look_refills_the_slots_its_own_commits_freed_and_leaves_the_others() -> None:
    # Two branches end at once, one committed by this process, one by another: the look
    # records its own end and schedules its refill (the next in its lane), for itself, and
    # leaves the other's end and refill to it.
    world = MemoryWorld()
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    plain, _ = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    plain.fast_path = False
    app = MemoryQueue()
    run_id = _start(world, app, doc, {"keys": ["a", "b", "c", "d"], "sleep": 0})
    first, second = app.take()
    assert _deliver(plain, first) == "completed"
    ours = len(world.list_events(run_id))
    assert _deliver(plain, second) == "completed"
    tracker = RunTracker(world, run_id)
    events = world.list_events(run_id)
    tracker.fold(events[:ours], own=True)  # branch a's commit was ours, branch b's not
    tracker.fold(events[ours:])
    sent = MemoryQueue()
    look = advance_run(world, sent, _settings(), tracker, keep=Keep(lambda _: True))
    assert look.kept is not None and look.kept.step_path == "fan[c].work"
    assert sent.take() == []
    assert _branches_scheduled(world, run_id) == ["fan[a]", "fan[b]", "fan[c]"]
    ended = [
        e.payload["branchPath"]
        for e in world.list_events(run_id)
        if e.type == "ParallelBranchCompleted"
    ]
    assert ended == ["fan[a]"]  # (fan[b]'s end and refill are the other process's)


def test_a_look_that_ends_a_branch_and_refills_its_slot_decides_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The commit of fan[a] frees a slot: the look records the branch's end and schedules
    # fan[c] in one decision, and has nothing left to decide after appending it. The last
    # branch's end completes the group, which needs another round (the step after it).
    from little_dist.fleet import dispatch

    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    run_id = _start(world, app, doc, {"keys": ["a", "b", "c"], "sleep": 0})
    first, second = app.take()
    real_decide = dispatch.decide
    decided: list[int] = []

    def decide(*args: Any, **options: Any) -> Any:
        decision = real_decide(*args, **options)
        decided.append(len(decision.events))
        return decision

    monkeypatch.setattr(dispatch, "decide", decide)
    tracker = runtime.runs.get(run_id)
    tracker.catch_up()
    look = dispatch.advance_run(
        world, app, _settings(), tracker, keep=dispatch.Keep(lambda _: True)
    )
    assert look.kept is None and decided == [0]  # nothing committed yet: nothing to do
    decided.clear()
    assert _deliver(runtime, first) == "completed"  # a, then c in the slot it freed
    # a's end and c's schedule, then c's end: one decision each, no second round
    assert decided == [3, 1]
    assert app.take() == []
    assert _deliver(runtime, second) == "completed"
    assert world.list_events(run_id)[-1].type == "RunCompleted"


class BatchRecordingWorld(MemoryWorld):
    """Records the event types of every append batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def append_batch(self, run_id: str, events: Any, **options: Any) -> Any:
        events = list(events)
        self.batches.append([event.type for event in events])
        return super().append_batch(run_id, events, **options)


def test_a_refill_the_committing_slot_runs_records_its_schedule_with_its_start() -> None:
    # fan[a]'s commit frees a slot; the look ends fan[a] and schedules fan[c], which this
    # slot runs: those events ride with fan[c]'s first append instead of their own.
    world = BatchRecordingWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    run_id = _start(world, app, doc, {"keys": ["a", "b", "c"], "sleep": 0})
    first, second = app.take()
    world.batches.clear()

    assert _deliver(runtime, first) == "completed"  # a, then c in the slot it freed

    assert app.take() == []
    assert [batch[-1] for batch in world.batches] == [
        "harness.tool_call.started",  # a
        "StepCompleted",
        "harness.tool_call.started",  # c, with a's end and its own schedule
        "StepCompleted",
        "ParallelBranchCompleted",  # c's end: the last branch in flight but b
    ]
    assert world.batches[2][:4] == [
        "ParallelBranchCompleted",
        "ParallelBranchScheduled",
        "StepScheduled",
        "StepAttemptStarted",
    ]
    assert _deliver(runtime, second) == "completed"
    events = world.list_events(run_id)
    assert events[-1].type == "RunCompleted"
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    ends = [e.payload["branchPath"] for e in events if e.type == "ParallelBranchCompleted"]
    assert sorted(ends) == ["fan[a]", "fan[b]", "fan[c]"]


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    runtime, _ = _runtime(MemoryWorld(), ToolRegistry([]))
    cache = RunCache(runtime, size=2)
    first = cache.get("run_a")
    cache.get("run_b")
    assert cache.get("run_a") is first
    cache.get("run_c")
    assert "run_b" not in cache and "run_a" in cache and len(cache) == 2


def test_the_cache_is_bounded_by_the_bytes_its_runs_hold_and_keeps_the_run_in_hand() -> None:
    world = MemoryWorld()
    runtime, _ = _runtime(world, ToolRegistry([]))
    for run_id in ("run_a", "run_b", "run_c"):
        submit_run(world, wf.chain_lwir(2), {}, run_id=run_id)  # 2 events each
    two_runs = 2 * 2 * KEPT_EVENT_BYTES
    cache = RunCache(runtime, size=100, max_bytes=two_runs)
    for run_id in ("run_a", "run_b"):
        cache.get(run_id).catch_up()
    assert cache.get("run_a").approx_bytes == 2 * KEPT_EVENT_BYTES
    cache.get("run_c").catch_up()
    cache.get("run_c")  # three runs' bytes: the least recently used (b) goes
    assert "run_b" not in cache and "run_a" in cache and len(cache) == 2
    # A run bigger than the whole budget stays while it is the one in use.
    small = RunCache(runtime, size=100, max_bytes=1)
    small.get("run_a").catch_up()
    small.get("run_a")
    assert "run_a" in small and len(small) == 1
    small.get("run_b")
    assert "run_b" in small and "run_a" not in small and len(small) == 1


def test_the_runtimes_caches_take_their_budgets_from_the_settings() -> None:
    settings = _settings(LITTLE_RUN_CACHE_BYTES="5000", LITTLE_VERSION_CACHE_BYTES="100")
    runtime, _ = _runtime(MemoryWorld(), ToolRegistry([]), settings=settings)
    assert runtime.runs.max_bytes == 5000
    assert runtime.versions.max_bytes == 100


def test_the_version_cache_is_bounded_by_the_length_of_its_lwir() -> None:
    from little_dist.compiler import compile_lwir
    from little_dist.fleet.versions import VersionCache

    world = MemoryWorld()
    versions = [compile_lwir(wf.chain_lwir(n), input={}) for n in (1, 2, 3)]
    for version in versions:
        world.register_version(version.id, version.to_json())
    budget = len(versions[0].canonical_json) + len(versions[1].canonical_json)
    cache = VersionCache(size=10, max_bytes=budget)
    assert cache.get(world, versions[0].id) == versions[0]
    cache.put(versions[1])
    assert len(cache) == 2
    # The longest: with it, both others go (the one in hand stays).
    cache.get(world, versions[2].id)
    assert versions[2].id in cache and len(cache) == 1


@pytest.mark.integration
def test_leases_are_taken_in_one_pipeline_on_redis_as_one_by_one(fleet_env: FleetEnv) -> None:
    world = fleet_env.world()
    assert isinstance(world, RedisS3World)
    keys = [f"{{run_batch}}:dispatch:s{index}:1" for index in range(5)]
    held = world.acquire_lease(keys[2], "someone-else", 30)
    assert held is not None
    calls: list[str] = []
    original = world.acquire_lease

    def one_by_one(key: str, holder: str, ttl_seconds: float) -> Any:
        calls.append(key)
        return original(key, holder, ttl_seconds)

    world.acquire_lease = one_by_one  # type: ignore[method-assign]
    leases = acquire_leases(world, keys, "me", 30)
    assert calls == []  # one pipeline, not a call per key
    assert [lease is None for lease in leases] == [False, False, True, False, False]
    for key, lease in zip(keys, leases, strict=True):
        if lease is not None:
            assert (lease.key, lease.holder) == (key, "me")
            assert lease.expires_at > 0
            # Real leases: renewable by their holder and token, and held against others.
            world.renew_lease(lease, 30)
            assert original(key, "other", 30) is None
    # Held ones are refused again; a single key is one acquire.
    assert acquire_leases(world, keys, "third", 30) == [None] * 5
    fresh = acquire_leases(world, ["{run_batch}:dispatch:solo:1"], "me", 30)
    assert calls == [] and fresh[0] is not None


def test_the_tracker_folds_only_what_continues_its_sequence() -> None:
    world = MemoryWorld()
    run_id = submit_run(world, wf.chain_lwir(2), {})
    for index in range(6):
        world.append(run_id, EventInput(type="little.note", payload={"n": index}))
    events = world.list_events(run_id)
    assert len(events) >= 7
    tracker = RunTracker(world, run_id)
    tracker.fold(events[:2])
    assert tracker.last_sequence == 2
    # An append's answer: an already-recorded event, then a new one after a gap (what
    # another process appended in between): only the contiguous part is folded.
    answer = [events[2], *events[4:]]
    tracker.fold(answer)
    assert tracker.last_sequence == 3
    # Out of order and overlapping: sorted, deduplicated, folded up to the gap-free end.
    tracker.fold([events[-1], *events[1:], events[3]])
    assert tracker.last_sequence == len(events)
    assert tracker.catch_up().event_count == len(events)


def test_threads_committing_in_one_run_advance_it_once() -> None:
    world = MemoryWorld()
    tracker = RunTracker(world, submit_run(world, wf.chain_lwir(1), {}))
    assert tracker.advancing.begin()
    assert not tracker.advancing.begin()  # another thread: leaves it to the first ...
    assert tracker.advancing.end()  # ... which looks again
    assert not tracker.advancing.end()  # and is done
    assert tracker.advancing.begin()
    assert not tracker.advancing.begin()
    assert not tracker.advancing.end(failed=True)  # a failed look leaves it to the scheduler
    assert tracker.advancing.begin()


class AppendLog(MemoryWorld):
    """Records the event types of every append (one list per round trip on Redis)."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[list[tuple[str, Any]]] = []

    def append_batch(self, run_id: str, events: Any, **options: Any) -> list[Event]:
        self.appends.append([(e.type, e.payload.get("stepPath")) for e in events])
        return super().append_batch(run_id, events, **options)


def _scheduled_before_started(world: MemoryWorld, run_id: str, path: str) -> bool:
    types = [
        e.type
        for e in world.list_events(run_id)
        if e.payload.get("stepPath") == path and e.type in ("StepScheduled", "StepAttemptStarted")
    ]
    return types == ["StepScheduled", "StepAttemptStarted"]


def test_a_kept_steps_schedule_rides_with_its_first_append() -> None:
    world = AppendLog()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",))
    run_id = _start(world, app, wf.chain_lwir(3), {})
    world.appends.clear()
    assert _deliver(runtime, app.take()[0]) == "completed"
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    for path in ("s1", "s2"):
        assert _scheduled_before_started(world, run_id, path)
        # No append of its own: the schedule and the attempt's start are one round trip.
        assert [("StepScheduled", path)] not in world.appends
        assert any(
            batch[:2] == [("StepScheduled", path), ("StepAttemptStarted", path)]
            for batch in world.appends
        )


def test_a_kept_step_sent_to_the_queue_is_scheduled_before_its_task() -> None:
    world = AppendLog()
    settings = _settings(LITTLE_WORKER_INLINE_STEPS="1")
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",), settings=settings)
    run_id = _start(world, app, wf.chain_lwir(3), {})
    assert _deliver(runtime, app.take()[0]) == "completed"  # s0, then s1 inline
    handed = app.take()
    assert [task[1][1:] for task in handed] == [("s2", 1)]
    assert [e.type for e in world.list_events(run_id) if e.payload.get("stepPath") == "s2"] == [
        "StepScheduled"
    ]
    assert _deliver(runtime, handed[0]) == "completed"
    assert _scheduled_before_started(world, run_id, "s2")
    assert world.list_events(run_id)[-1].type == "RunCompleted"


def test_looking_again_neither_sends_nor_schedules_the_kept_step_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another thread's commit asks the advancing one to look again while the kept attempt's
    # schedule is still held back for its first append.
    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",))
    run_id = _start(world, app, wf.chain_lwir(3), {})
    task = app.take()[0]
    tracker = runtime.runs.get(run_id)
    real_end = tracker.advancing.end
    asked = iter([True])

    def end_advance(*, failed: bool = False) -> bool:
        return next(asked, False) or real_end(failed=failed)

    monkeypatch.setattr(tracker.advancing, "end", end_advance)
    assert _deliver(runtime, task) == "completed"
    assert app.take() == []  # s1 was kept, not sent as well
    for path in ("s1", "s2"):
        assert _scheduled_before_started(world, run_id, path)
    assert world.list_events(run_id)[-1].type == "RunCompleted"


def _counting_noop(calls: list[int]) -> Any:
    from little_dist.tools import tool

    @tool(name="noop")
    def counted(n: int = 0) -> dict[str, Any]:
        """Count the call."""
        calls.append(n)
        return {"n": n}

    return counted


class RacingWorld(MemoryWorld):
    """Runs ``before`` once, just before the first acquire of a lease whose key ends with
    ``suffix``: whatever another process does between a decision and its lease."""

    def __init__(self, suffix: str) -> None:
        super().__init__()
        self.suffix = suffix
        self.before: Any = None

    def acquire_lease(self, key: str, holder: str, ttl_seconds: float) -> Any:
        if key.endswith(self.suffix) and self.before is not None:
            hook, self.before = self.before, None
            hook()
        return super().acquire_lease(key, holder, ttl_seconds)


def test_a_kept_step_that_another_worker_ran_meanwhile_is_not_run_again() -> None:
    # Between this worker's decision to keep s1 and its lease, a sweep scheduled s1 and
    # another worker ran it to the end: the kept attempt must give way, not repeat the tool.
    calls: list[int] = []
    world = RacingWorld(":step:s1")
    tools = ToolRegistry([_counting_noop(calls)])
    runtime, app = _runtime(world, tools, roles=("worker",))
    run_id = _start(world, app, wf.chain_lwir(3), {})
    other, other_app = _runtime(world, tools)  # no roles: it never continues inline

    def sweep_and_run_s1() -> None:
        world.before = None
        advance_run(world, other_app, _settings(), RunTracker(world, run_id))
        (task,) = other_app.take()
        assert task[1][1:] == ("s1", 1)
        assert _deliver(other, task) == "completed"

    world.before = sweep_and_run_s1
    assert _deliver(runtime, app.take()[0]) == "completed"  # s0; kept s1 gives way
    assert calls == [0, 1]
    completed = [
        e.payload["stepPath"] for e in world.list_events(run_id) if e.type == "StepCompleted"
    ]
    assert completed == ["s0", "s1"]
    for task in other_app.take():  # s2, sent by the other worker's fast path
        assert _deliver(other, task) == "completed"
    assert calls == [0, 1, 2]
    assert world.list_events(run_id)[-1].type == "RunCompleted"


def test_a_kept_step_goes_ahead_when_only_unrelated_events_came_in_between() -> None:
    calls: list[int] = []
    world = RacingWorld(":step:s1")
    runtime, app = _runtime(world, ToolRegistry([_counting_noop(calls)]), roles=("worker",))
    run_id = _start(world, app, wf.chain_lwir(3), {})
    world.before = lambda: world.append(run_id, EventInput(type="little.test.note", payload={}))
    assert _deliver(runtime, app.take()[0]) == "completed"
    assert calls == [0, 1, 2]
    assert app.take() == []  # s1 and s2 ran inline all the same
    assert _scheduled_before_started(world, run_id, "s1")
    assert world.list_events(run_id)[-1].type == "RunCompleted"


class NextLeaseLog(MemoryWorld):
    """Records which lease each commit took for the next step."""

    def __init__(self) -> None:
        super().__init__()
        self.taken: list[str] = []

    def append_batch_then_acquire(
        self, run_id: str, events: Any, lease: Any, **options: Any
    ) -> Any:
        self.taken.append(lease.key.rsplit(":", 1)[-1])
        return super().append_batch_then_acquire(run_id, events, lease, **options)


def test_a_chain_steps_commit_takes_the_next_steps_lease() -> None:
    world = NextLeaseLog()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",))
    run_id = _start(world, app, wf.chain_lwir(4), {})
    assert _deliver(runtime, app.take()[0]) == "completed"
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    assert world.taken == ["s1", "s2", "s3"]  # the last step has no next one
    for index in range(4):  # nothing is left held
        assert world.acquire_lease(f"{{{run_id}}}:step:s{index}", "other", 5) is not None


def test_a_next_lease_the_run_does_not_use_is_given_back() -> None:
    world = NextLeaseLog()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",))
    run_id = _start(world, app, wf.chain_lwir(3), {})
    task = app.take()[0]
    # A cancel comes in while s0 runs: its commit still takes s1's lease, then the run fails.
    world.append(run_id, EventInput(type="little.run.cancel_requested", occurrence_id="cancel"))
    assert _deliver(runtime, task) == "completed"
    assert world.taken == ["s1"]
    assert world.list_events(run_id)[-1].type == "RunFailed"
    assert world.acquire_lease(f"{{{run_id}}}:step:s1", "other", 5) is not None


@dataclass
class FanOfFour:
    """A fan-out of keys a..d, two at a time, started; its first two tasks not delivered."""

    effects: Path
    world: MemoryWorld
    runtime: WorkerRuntime
    app: MemoryQueue
    run_id: str
    tasks: list[tuple[str, tuple[Any, ...]]]
    tracker: RunTracker


def _fan_of_four(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FanOfFour:
    effects = tmp_path / "effects.txt"
    monkeypatch.setenv(wf.SIDE_EFFECTS_ENV, str(effects))
    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    run_id = _start(world, app, doc, {"keys": ["a", "b", "c", "d"], "sleep": 0})
    tasks = app.take()
    assert len(tasks) == 2
    return FanOfFour(effects, world, runtime, app, run_id, tasks, runtime.runs.get(run_id))


def test_an_attempt_the_advancing_thread_keeps_is_handed_to_a_waiting_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two threads commit branches of one fan-out at once: the second finds the first
    # advancing the run and waits; the look that follows keeps both newly ready branches,
    # one for each thread, so neither goes through the broker.
    fan = _fan_of_four(tmp_path, monkeypatch)
    effects, world, runtime, app, run_id = fan.effects, fan.world, fan.runtime, fan.app, fan.run_id
    (first, second), tracker = fan.tasks, fan.tracker
    outcomes = _deliver_while_one_advances(runtime, tracker, monkeypatch, first, second)
    assert outcomes == ("completed", "completed")
    assert app.take() == []  # c and d ran in the two slots, no task sent for either
    assert sorted(effects.read_text().split()) == ["a", "b", "c", "d"]
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    assert tracker.advancing.waiting() == 0


def _deliver_two_looked_at_once(
    runtime: WorkerRuntime,
    tracker: RunTracker,
    monkeypatch: pytest.MonkeyPatch,
    first: tuple[str, tuple[Any, ...]],
    second: tuple[str, tuple[Any, ...]],
    *,
    second_asks: bool,
) -> list[tuple[str, list[str]]]:
    """Deliver two tasks of one run on two threads: the first thread's look waits until the
    second thread has committed (so it folds both commits), and the second thread asks for
    its next attempt only once that look is over; the first thread asks again only once no
    spare is left. Unless ``second_asks``, neither asks again after that first look (as if
    both went back to the queue). The looks (``advance_run`` calls), in order: the thread,
    and the attempts started by then."""
    from little_dist.fleet import fastpath as tasks

    real_advance_run = tasks.advance_run
    real_advance = runtime.advance
    looks: list[tuple[str, list[str]]] = []
    committed = threading.Event()
    asked = Counter[str]()

    def advance_run(*args: Any, **options: Any) -> Any:
        if not looks:
            assert committed.wait(10)
        started = [
            e.payload["stepPath"]
            for e in tracker.world.list_events(tracker.run_id)
            if e.type == "StepAttemptStarted"
        ]
        looks.append((threading.current_thread().name, started))
        return real_advance_run(*args, **options)

    def advance(run_tracker: RunTracker, **options: Any) -> Any:
        name = threading.current_thread().name
        asked[name] += 1
        deadline = time.monotonic() + 10
        if name == "first" and asked[name] > 1:
            if not second_asks:
                return None
            while run_tracker.spares and time.monotonic() < deadline:
                time.sleep(0.001)
        if name == "second" and asked[name] == 1:
            committed.set()
            if not second_asks:
                return None
            while run_tracker.advancing.busy and time.monotonic() < deadline:
                time.sleep(0.001)
        return real_advance(run_tracker, **options)

    monkeypatch.setattr(tasks, "advance_run", advance_run)
    monkeypatch.setattr(runtime, "advance", advance)
    outcomes: list[str] = []
    threads = [
        threading.Thread(
            target=lambda task=task: outcomes.append(_deliver(runtime, task)), name=name
        )
        for name, task in (("first", first), ("second", second))
    ]
    threads[0].start()
    deadline = time.monotonic() + 10
    while not tracker.advancing.busy and time.monotonic() < deadline:
        time.sleep(0.001)
    threads[1].start()
    for thread in threads:
        thread.join(30)
    assert outcomes == ["completed", "completed"]
    return looks


def test_a_thread_that_asks_after_the_look_takes_the_attempt_the_look_kept_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One look folds two commits of this process and keeps both refills: one for the
    # looking thread, one as a spare. The other thread asks once that look is over: it
    # takes the spare without a look of its own, and nothing goes through the broker.
    from little_dist.fleet import fastpath

    # The spare waits for the asking thread as long as it takes: on a busy machine (the
    # suite's parallel workers) that thread was seen to ask after SPARE_SECONDS (0.2 s), and
    # the spare had gone to the broker. Its time running out is the next test's subject.
    monkeypatch.setattr(fastpath, "SPARE_SECONDS", 60.0)
    fan = _fan_of_four(tmp_path, monkeypatch)
    effects, world, runtime, app, run_id = fan.effects, fan.world, fan.runtime, fan.app, fan.run_id
    (first, second), tracker = fan.tasks, fan.tracker
    looks = _deliver_two_looked_at_once(
        runtime, tracker, monkeypatch, first, second, second_asks=True
    )
    assert app.take() == []  # c and d ran in the two threads
    assert sorted(effects.read_text().split()) == ["a", "b", "c", "d"]
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    started = [
        e.payload["stepPath"] for e in world.list_events(run_id) if e.type == "StepAttemptStarted"
    ]
    assert started.index("fan[d].work") > started.index("fan[c].work")
    # The second thread looked at the run only after running its spare attempt (d).
    assert looks[0] == ("first", ["fan", "fan[a].work", "fan[b].work"])
    assert [started for name, started in looks if name == "second"] == [
        ["fan", "fan[a].work", "fan[b].work", "fan[c].work", "fan[d].work"]
    ]
    assert tracker.spares.expired()[0] == []
    runtime.close()


def test_a_spare_no_thread_takes_goes_to_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The thread whose commit freed d's slot never asks: d's task is sent once the spare's
    # time is up, its step lease given back, and the delivered task runs it.
    from little_dist.fleet.spares import SPARE_SECONDS

    fan = _fan_of_four(tmp_path, monkeypatch)
    effects, world, runtime, app, run_id = fan.effects, fan.world, fan.runtime, fan.app, fan.run_id
    (first, second), tracker = fan.tasks, fan.tracker
    started = time.monotonic()
    _deliver_two_looked_at_once(runtime, tracker, monkeypatch, first, second, second_asks=False)
    sent: list[tuple[str, tuple[Any, ...]]] = []
    while not sent and time.monotonic() - started < 10:
        sent += app.take()
        time.sleep(0.005)
    assert [task[1][1] for task in sent] == ["fan[d].work"]
    assert time.monotonic() - started >= SPARE_SECONDS
    assert _deliver(runtime, sent[0]) == "completed"  # not busy: the lease was given back
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    assert sorted(effects.read_text().split()) == ["a", "b", "c", "d"]
    time.sleep(2 * SPARE_SECONDS)
    assert app.take() == []
    runtime.close()


def test_spares_are_sent_at_once_when_the_worker_stops() -> None:
    from little_dist.fleet.dispatch import Advance
    from little_dist.fleet.spares import SpareSender

    world = MemoryWorld()
    tracker = RunTracker(world, submit_run(world, wf.chain_lwir(1), {}))
    sent: list[Advance] = []
    sender = SpareSender(sent.append)
    spare = Advance(tracker.state(), None, (), 0)
    tracker.spares.stash([spare], time.monotonic() + 3600)
    sender.watch(tracker, time.monotonic() + 3600)
    assert sent == []
    sender.send_all()  # the worker started shutting down
    assert sent == [spare] and tracker.spares.take() is None
    sender.close()
    late = Advance(tracker.state(), None, (), 1)
    tracker.spares.stash([late], time.monotonic() + 3600)
    sender.watch(tracker, time.monotonic() + 3600)  # closed: sent at once
    assert sent == [spare, late]


def test_a_stashed_spare_goes_to_the_thread_that_asks_first() -> None:
    from little_dist.fleet.dispatch import Advance

    world = MemoryWorld()
    tracker = RunTracker(world, submit_run(world, wf.chain_lwir(1), {}))
    older, newer = Advance(tracker.state(), None, (), 0), Advance(tracker.state(), None, (), 1)
    now = time.monotonic()
    tracker.spares.stash([older], now + 1)
    tracker.spares.stash([newer], now + 2)
    assert tracker.spares.expired(now) == ([], now + 1)
    assert tracker.spares.take() is older
    assert tracker.spares.expired(now + 3) == ([newer], None)
    assert tracker.spares.take() is None


def test_a_spare_that_commits_nothing_leaves_no_commit_unlooked_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A spare a look kept before this thread's commit: the thread takes it instead of
    # looking, counting on the spare's own commit to look at both. A spare whose attempt
    # finds itself done commits nothing: the thread then looks, or the branch end of its
    # commit would wait for the scheduler's sweep (it did on the commit before).
    from little_dist.fleet.dispatch import Advance
    from little_dist.world.base import unique_holder
    from little_dist.world.fleet_keys import step_lease_key

    fan = _fan_of_four(tmp_path, monkeypatch)
    world, runtime, app, run_id, tracker = fan.world, fan.runtime, fan.app, fan.run_id, fan.tracker
    (first, second) = fan.tasks
    assert _deliver(runtime, first) == "completed"  # a, then its refills c and d inline
    sent = app.take()
    state = tracker.catch_up()
    done = state.steps["fan[a].work"]
    assert done.status == "completed" and sent == []
    # A spare left by an earlier look: a's attempt, which has run since.
    lease = world.acquire_lease(step_lease_key(run_id, "fan[a].work"), unique_holder("w"), 30)
    assert lease is not None
    dispatch = StepDispatch(run_id, "fan[a].work", "work", 1, "worker", "execute_step")
    stale = Advance(state, None, (), 0, kept=dispatch, kept_lease=lease)
    tracker.spares.stash([stale], time.monotonic() + 3600)
    assert _deliver(runtime, second) == "completed"  # b: its end needs a look
    assert tracker.spares.take() is None  # (the thread took the spare: a's attempt, done)
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    assert app.take() == []


def test_a_waiting_thread_gets_nothing_once_the_advance_is_over() -> None:
    world = MemoryWorld()
    tracker = RunTracker(world, submit_run(world, wf.chain_lwir(1), {}))
    assert tracker.advancing.join() is None  # advances itself
    waiter = tracker.advancing.join()
    assert waiter is not None and tracker.advancing.waiting() == 1
    assert tracker.advancing.end()  # the waiter asked for a look
    assert not tracker.advancing.end()  # nothing was handed out: it is let go
    assert waiter.is_set() and tracker.advancing.leave(waiter) is None
    assert tracker.advancing.waiting() == 0
    assert tracker.advancing.join() is None


def test_the_tracker_keeps_what_arrives_past_a_gap_until_the_gap_is_filled() -> None:
    # Threads fold their appends' answers in whatever order they come back.
    world = MemoryWorld()
    run_id = submit_run(world, wf.chain_lwir(2), {})
    for index in range(6):
        world.append(run_id, EventInput(type="little.note", payload={"n": index}))
    events = world.list_events(run_id)
    tracker = RunTracker(world, run_id)
    tracker.fold(events[:2])
    tracker.fold(events[3:])  # ahead of a gap: kept, not folded
    assert tracker.last_sequence == 2
    tracker.fold([events[2]])  # the gap filled: everything folds, nothing is read again
    assert tracker.last_sequence == len(events)
    assert tracker.state().event_count == len(events)


def test_a_delivered_task_whose_step_is_busy_stops_before_reading_the_log() -> None:
    world = CountingWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]))
    run_id = _start(world, app, wf.chain_lwir(2), {})
    task = app.take()[0]
    held = world.acquire_lease(f"{{{run_id}}}:step:s0", "another-worker", 30)
    assert held is not None
    # A worker that knows the run (its version: it checks the message's step path against
    # it before taking any lease) reads nothing more.
    runtime.runs.get(run_id).catch_up()
    world.reads.clear()
    assert _deliver(runtime, task) == "busy"
    assert world.reads == []
    world.release_lease(held)
    assert _deliver(runtime, task) == "completed"


def test_a_second_look_that_keeps_a_scheduled_attempt_sends_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The thread already has its next attempt from the first look; a later look (asked for
    # by a thread that waits) may keep an attempt scheduled earlier under its dispatch lease
    # only: that one must go to the queue, or nobody would run it until it is re-sent.
    from little_dist.fleet import fastpath as tasks
    from little_dist.fleet.dispatch import Advance
    from little_dist.scheduling import StepDispatch

    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",))
    run_id = submit_run(world, wf.chain_lwir(1), {})
    tracker = runtime.runs.get(run_id)
    mine = world.acquire_lease(f"{{{run_id}}}:step:a", "me", 30)
    assert mine is not None
    state = tracker.catch_up()

    def dispatch(path: str) -> StepDispatch:
        return StepDispatch(run_id, path, path, 1, "worker", "execute_step")

    looks = iter(
        [
            Advance(state, None, (), 0, dispatch("a"), True, mine),
            Advance(state, None, (), 0, dispatch("b")),  # kept under its dispatch lease
        ]
    )
    monkeypatch.setattr(tasks, "advance_run", lambda *a, **k: next(looks))
    asked = iter([True])
    real_end = tracker.advancing.end
    monkeypatch.setattr(
        tracker.advancing, "end", lambda *, failed=False: next(asked, False) or real_end()
    )
    advance = runtime.advance(tracker, keep=lambda d: True)
    assert advance is not None and advance.kept == dispatch("a")
    assert [task[1][1:] for task in app.take()] == [("b", 1)]


def test_offers_are_forgotten_after_resend_after_but_not_scanned_on_every_call() -> None:
    from little_dist.scheduling import StepDispatch

    world = MemoryWorld()
    tracker = RunTracker(world, submit_run(world, wf.chain_lwir(1), {}))

    def offer(index: int, resend_after: float) -> bool:
        dispatch = StepDispatch(tracker.run_id, f"s{index}", f"s{index}", 1, "worker", "x")
        return bool(tracker.offers.claim([dispatch], resend_after))

    assert all(offer(index, 0.05) for index in range(200))
    assert not offer(0, 0.05)  # offered lately
    assert len(tracker.offers) == 200  # nothing was stale: kept
    time.sleep(0.06)
    assert offer(500, 0.05)  # a scan now drops the 200 stale offers
    assert len(tracker.offers) == 1
    assert offer(0, 0.05)  # and s0 may be offered again


def _roots_and_a_successor() -> dict[str, Any]:
    """Roots ``a`` and ``b``; ``c`` needs only ``a`` (``a``'s commit takes ``c``'s lease);
    ``d`` needs ``b`` and ``c``."""
    return workflow_doc(
        "tests.roots",
        [
            wf.tool_step("a", "noop", {"n": 1}),
            wf.tool_step("b", "noop", {"n": 2}),
            wf.tool_step("c", "noop", {"n": 3}, needs=["a"]),
            wf.tool_step("d", "noop", {"n": 4}, needs=["b", "c"]),
        ],
    )


def test_a_next_lease_held_while_another_thread_advances_does_not_strand_the_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a and b commit at once in one process. a's commit takes c's step lease (c needs only
    # a), but b's thread is advancing the run, so a's thread waits for it instead. b's look
    # finds c ready and cannot lease it (a's thread holds it); a's thread then gets nothing
    # and gives the lease back. c must still run (here, or sent to the queue), not wait for
    # a resend or a sweep.
    world = MemoryWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",))
    run_id = _start(world, app, _roots_and_a_successor(), {})
    deliveries = {task[1][1]: task for task in app.take()}
    assert sorted(deliveries) == ["a", "b"]
    tracker = runtime.runs.get(run_id)
    outcomes = _deliver_while_one_advances(
        runtime, tracker, monkeypatch, deliveries["b"], deliveries["a"]
    )
    assert outcomes == ("completed", "completed")
    while sent := app.take():
        for task in sent:
            _deliver(runtime, task)
    events = world.list_events(run_id)
    assert events[-1].type == "RunCompleted"
    completed = Counter(e.payload["stepPath"] for e in events if e.type == "StepCompleted")
    assert completed == {"a": 1, "b": 1, "c": 1, "d": 1}


class PartlyDecodingWorld(MemoryWorld):
    """Hands back events of types outside ``decode`` undecoded, as Redis does, and counts
    the ones decoded later."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded: list[int] = []

    def list_events_partly(
        self, run_id: str, *, after: int, decode: frozenset[str], skip: Any = ()
    ) -> list[Event | UndecodedEvent]:
        out: list[Event | UndecodedEvent] = []
        for event in self.list_events(run_id, after=after):
            if event.sequence in skip:
                continue
            if event.type in decode:
                out.append(event)
            else:

                def decoder(event: Event = event) -> Event:
                    self.decoded.append(event.sequence)
                    return event

                out.append(
                    UndecodedEvent(run_id, event.sequence, event.type, event.recorded_at, decoder)
                )
        return out


def test_traces_read_undecoded_are_decoded_only_for_a_step_that_started_an_attempt() -> None:
    # Another process ran branch a: its traces are read undecoded and folded. A step that
    # started an attempt (one to retry or resume here) gets all its events, decoded and in
    # order (the memo's source); a branch that never started needs no decoding at all.
    world = PartlyDecodingWorld()
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    plain, app = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    plain.fast_path = False
    run_id = _start(world, app, doc, {"keys": ["a", "b"], "sleep": 0})
    assert _deliver(plain, app.take()[0]) == "completed"  # branch a, all of it
    tracker = RunTracker(world, run_id, keep_step_events=True)
    state = tracker.catch_up()
    assert state.steps["fan[a].work"].status == "completed"
    _, fresh = tracker.catch_up_step("fan[b].work")
    assert [e.type for e in fresh] == ["StepScheduled"] and world.decoded == []
    _, started = tracker.catch_up_step("fan[a].work")
    assert world.decoded == []  # not until they are looked at
    everything = [
        e for e in world.list_events(run_id) if e.payload.get("stepPath") == "fan[a].work"
    ]
    assert list(started) == everything
    assert any(e.type == "harness.tool_call.succeeded" for e in started)
    assert world.decoded  # the traces were decoded now, once
    decoded = list(world.decoded)
    assert list(tracker.step_view("fan[a].work")[1]) == everything and world.decoded == decoded


# -- an inline budget that runs out -------------------------------------------------------


def _waiting(run_id: str, count: int, role: str = "worker") -> tuple[StepDispatch, ...]:
    return tuple(
        StepDispatch(run_id, f"fan[k{index}].work", "work", 1, role, "execute_step")  # type: ignore[arg-type]
        for index in range(count)
    )


def _kept(run_id: str, waiting: int) -> Advance:
    dispatch = _waiting(run_id, waiting)
    decision = Decision(events=(), dispatch=dispatch, done=False)
    return Advance(RunStateBuilder(run_id).snapshot(), decision, (), 0, kept=dispatch[0])


def test_a_budget_that_runs_out_yields_only_to_other_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime, _ = _runtime(MemoryWorld(), ToolRegistry([wf.noop]), roles=("worker",))
    queued: list[int | None] = []
    monkeypatch.setattr(runtime, "queued_tasks", lambda role: queued[-1])
    now = [1000.0]
    fast = FastPath(runtime, clock=lambda: now[0])
    kept = _kept("run_budget", waiting=10)
    queued.append(None)  # the queue cannot be sized: yield, as always
    assert fast.yields(kept)
    queued.append(0)  # nothing waits: the slot would take the same attempt back
    assert not fast.yields(kept)
    queued.append(11)  # more than this run's waiting attempts: another run's task waits
    assert fast.yields(kept)
    # No more than this run's own window: one slot of the process yields per
    # worker_inline_seconds (in case another run's task hides among them), the others not.
    queued.append(10)
    assert not fast.yields(kept)
    now[0] += runtime.settings.worker_inline_seconds
    assert fast.yields(kept)
    assert not fast.yields(kept)
    assert not fast.yields(kept)


def test_a_chain_keeps_its_slot_past_the_budget_when_the_queue_is_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = MemoryWorld()
    settings = _settings(LITTLE_WORKER_INLINE_STEPS="2")
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",), settings=settings)
    monkeypatch.setattr(runtime, "queued_tasks", lambda role: 0)
    run_id = _start(world, app, wf.chain_lwir(6), {})
    assert _deliver(runtime, app.take()[0]) == "completed"
    assert app.take() == []  # every step ran in the one slot: nothing was sent
    assert _started_steps(world, run_id) == [f"s{index}" for index in range(6)]
    assert world.list_events(run_id)[-1].type == "RunCompleted"


def test_a_task_stops_continuing_after_its_inline_maximum_even_with_an_empty_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    world = MemoryWorld()
    settings = _settings(LITTLE_WORKER_INLINE_MAX_SECONDS="0.000001")
    runtime, app = _runtime(world, ToolRegistry([wf.noop]), roles=("worker",), settings=settings)
    monkeypatch.setattr(runtime, "queued_tasks", lambda role: 0)
    run_id = _start(world, app, wf.chain_lwir(3), {})
    assert _deliver(runtime, app.take()[0]) == "completed"
    # Its own attempt ran; the one it kept next went to the queue (nothing else waits there).
    (sent,) = app.take()
    assert _started_steps(world, run_id) == ["s0"]
    assert _deliver(runtime, sent) == "completed"
    assert _started_steps(world, run_id) == ["s0", "s1"]


def test_the_queue_is_sized_through_the_broker(fleet_env: FleetEnv) -> None:
    from little_dist.fleet.app import make_celery_app
    from little_dist.fleet.queue import CeleryQueue

    settings = fleet_env.settings()
    app = make_celery_app(settings)
    runtime = WorkerRuntime(settings, roles=("worker",))
    runtime.queue = CeleryQueue(app, settings)
    try:
        assert runtime.queued_tasks("worker") == 0  # no list in Redis yet
        for index in range(3):
            app.send_task("little.execute_step", args=("run_sized", f"s{index}", 1))
        assert runtime.queued_tasks("worker") == 3
        assert runtime.queued_tasks("fixer") == 0
    finally:
        app.close()
        runtime.close()


def test_a_tracker_claims_the_ends_of_the_branches_its_process_committed_until_folded() -> None:
    # The claims a worker's look decides with (which refills it may take: see
    # tests/test_scheduling_claims.py) come from its own commits: the branches in which this
    # process recorded a StepCompleted, until their ends are folded.
    world = MemoryWorld()
    world.append("run_x", EventInput(type="StepCompleted", payload={"stepPath": "fan[b].work"}))
    tracker = RunTracker(world, "run_x")
    tracker.fold(world.list_events("run_x"))
    assert tracker.own_ends() == frozenset()  # (another process's commit)
    world.append("run_x", EventInput(type="StepCompleted", payload={"stepPath": "fan[a].work"}))
    tracker.fold(world.list_events("run_x", after=1), own=True)
    assert tracker.own_ends() == {"fan[a]"}
    world.append(
        "run_x",
        EventInput(type="ParallelBranchCompleted", payload={"branchPath": "fan[a]"}),
    )
    tracker.catch_up()
    assert tracker.own_ends() == frozenset()


def test_a_tracker_adopts_an_end_another_process_left_unrecorded_for_half_a_second() -> None:
    # Another process's commit completed fan[b]; its look should record the end and refill
    # the lane. If no end comes within ADOPT_AFTER_S (that process died, or its look
    # failed), this process's looks take the end over; a new commit in the branch (a step
    # after it) starts the wait again, and an end folded ends it.
    from little_dist.fleet.run_tracker import ADOPT_AFTER_S

    now = [100.0]
    world = MemoryWorld()
    world.append("run_x", EventInput(type="StepCompleted", payload={"stepPath": "fan[b].s1"}))
    tracker = RunTracker(world, "run_x", clock=lambda: now[0])
    tracker.catch_up()
    assert tracker.own_ends() == frozenset()
    now[0] += ADOPT_AFTER_S - 0.01
    assert tracker.own_ends() == frozenset()
    world.append("run_x", EventInput(type="StepCompleted", payload={"stepPath": "fan[b].s2"}))
    now[0] += 0.02
    tracker.catch_up()
    assert tracker.own_ends() == frozenset()  # (folded just now)
    now[0] += ADOPT_AFTER_S
    assert tracker.own_ends() == {"fan[b]"}
    world.append(
        "run_x", EventInput(type="ParallelBranchCompleted", payload={"branchPath": "fan[b]"})
    )
    tracker.catch_up()
    assert tracker.own_ends() == frozenset()


def test_a_workers_look_takes_over_an_end_its_owner_left_unrecorded() -> None:
    # A committed fan[a] and never looked (fast path off, as if it died right after its
    # commit). B's look leaves the end to A at first; half a second on, it records it and
    # refills its lane itself, without waiting for the scheduler's sweep.
    from little_dist.fleet.run_tracker import ADOPT_AFTER_S

    world, run_id = _fan_with_one_commit(["a", "b", "c", "d"])
    now = [50.0]
    tracker = RunTracker(world, run_id, clock=lambda: now[0])

    def look() -> Advance:
        return advance_run(
            world, MemoryQueue(), _settings(), tracker, holder="b", keep=Keep(lambda _: True)
        )

    assert look().kept is None
    assert _branches_scheduled(world, run_id) == ["fan[a]", "fan[b]"]
    now[0] += ADOPT_AFTER_S
    adopted = look()
    assert adopted.kept is not None and adopted.kept.step_path == "fan[c].work"
    ended = [e for e in world.list_events(run_id) if e.type == "ParallelBranchCompleted"]
    assert [e.payload["branchPath"] for e in ended] == ["fan[a]"]


def test_refills_in_lanes_meet_nobody_and_a_refill_another_holds_goes_to_its_queue() -> None:
    # Window 3: a, b, c in flight. Process Q commits b and looks on a log with only b's end:
    # b's lane goes on with e, which Q keeps. Process P commits a and c and looks on a log
    # with all three ends: it records a's and c's, whose lanes go on with d and f; b's is
    # Q's. Nothing meets, nothing goes through the broker. Then a refill whose step lease
    # another holder has (a look that saw another window, say) is recorded, not kept under
    # a step lease: whoever holds the lease runs it or gives it back.
    from little_dist.runtime import execute_step_attempt
    from little_dist.world.base import unique_holder
    from little_dist.world.fleet_keys import step_lease_key

    world = MemoryWorld()
    settings = _settings()
    app = MemoryQueue()
    doc = wf.fan_out_lwir(max_branches=10, max_concurrency=3)
    run_id = _start(world, app, doc, {"keys": list("abcdefgh"), "sleep": 0})
    assert [task[1][1] for task in app.take()] == ["fan[a].work", "fan[b].work", "fan[c].work"]
    caps = Capabilities(tools=ToolRegistry([wf.record_branch]))

    def commit(tracker: RunTracker, branch: str) -> None:
        tracker.catch_up()
        ctx = tracker.context
        assert ctx is not None
        step = StepDispatch(run_id, f"fan[{branch}].work", "work", 1, "worker", "execute_step")
        execute_step_attempt(
            world,
            step,
            version=ctx.version,
            capabilities=caps,
            on_recorded=lambda events: tracker.fold(events, own=True),
        )

    def look(tracker: RunTracker, holder: str) -> Advance:
        return advance_run(
            world,
            app,
            settings,
            tracker,
            holder=holder,
            keep=Keep(lambda _: True, defer=True, want=3),
        )

    def kept(advance: Advance) -> list[str]:
        assert advance.kept is not None
        return sorted([advance.kept.step_path, *(item.dispatch.step_path for item in advance.also)])

    q = RunTracker(world, run_id, keep_step_events=True)
    commit(q, "b")
    q_look = look(q, "q")
    assert kept(q_look) == ["fan[e].work"]
    assert q_look.deferred  # b's end and e's schedule ride with e's first append

    p = RunTracker(world, run_id, keep_step_events=True)
    commit(p, "a")
    commit(p, "c")
    p_look = look(p, "p")
    assert kept(p_look) == ["fan[d].work", "fan[f].work"]
    assert app.take() == []

    # P commits d (its step lease given back: the attempt here runs without one); g, the
    # next in d's lane, is leased by another holder.
    assert p_look.kept_lease is not None
    world.release_lease(p_look.kept_lease)
    held = world.acquire_lease(step_lease_key(run_id, "fan[g].work"), unique_holder("o"), 30)
    assert held is not None
    commit(p, "d")
    p_look = look(p, "p")
    assert "fan[g]" in _branches_scheduled(world, run_id)
    # Not kept under a step lease of P's: offered, as a task sent would be (P holds its
    # dispatch lease), and its attempt finds the step busy while the other holder has it.
    assert p_look.kept is not None and p_look.kept.step_path == "fan[g].work"
    assert p_look.kept_lease is None and p_look.also == ()


class CommitRecordingWorld(MemoryWorld):
    """Records the artifacts written with an append, and the ones put on their own."""

    def __init__(self) -> None:
        super().__init__()
        self.with_commit: list[tuple[str, list[str]]] = []
        self.alone: list[str] = []
        self._inside = False

    def append_batch_with_artifacts(
        self, run_id: str, events: Any, artifacts: Any, **kw: Any
    ) -> Any:
        self.with_commit.append((events[-1].type, [a.step_path for a in artifacts]))
        self._inside = True
        try:
            return super().append_batch_with_artifacts(run_id, events, artifacts, **kw)
        finally:
            self._inside = False

    def put_artifact(self, artifact: Any) -> Any:
        if not self._inside:
            self.alone.append(artifact.step_path)
        return super().put_artifact(artifact)


def test_a_branch_commit_writes_its_output_artifact_with_the_completion() -> None:
    world = CommitRecordingWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.record_branch]), roles=("worker",))
    doc = wf.fan_out_lwir(max_branches=8, max_concurrency=2)
    run_id = _start(world, app, doc, {"keys": ["a", "b"], "sleep": 0})
    for task in app.take():
        assert _deliver(runtime, task) == "completed"
    assert world.list_events(run_id)[-1].type == "RunCompleted"
    assert sorted(world.with_commit) == [
        ("StepCompleted", ["fan[a].work"]),
        ("StepCompleted", ["fan[b].work"]),
    ]
    assert world.alone == []
    created = [
        e.payload["artifactRef"] for e in world.list_events(run_id) if e.type == "ArtifactCreated"
    ]
    assert [world.get_artifact(ref).manifest.step_path for ref in created] == [
        "fan[a].work",
        "fan[b].work",
    ]


# -- stale or forged messages ------------------------------------------------------------------


@pytest.mark.integration
def test_a_message_for_a_step_the_run_does_not_have_writes_nothing_to_redis(
    fleet_env: FleetEnv,
) -> None:
    import redis

    world = fleet_env.world()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]))  # type: ignore[arg-type]
    run_id = _start(world, app, wf.chain_lwir(2), {})  # type: ignore[arg-type]
    client = redis.Redis.from_url(fleet_env.redis_url)
    try:

        def keys() -> set[bytes]:
            return set(client.scan_iter(match=f"{fleet_env.key_prefix}*", count=1000))

        before = keys()
        for path in ("nope", "s0[x].y", "s0.extra", "s" * 5000):
            assert runtime.execute(run_id, path, 1, "execute_step") == "invalid"
        assert runtime.execute(run_id, "s0", 0, "execute_step") == "invalid"
        assert runtime.execute("run_never_submitted", "s0", 1, "execute_step") == "not_started"
        assert keys() == before  # no lease key, no counter, nothing
        assert "run_never_submitted" not in runtime.runs
    finally:
        client.close()


def test_a_message_for_an_attempt_that_is_not_due_runs_nothing() -> None:
    world = MemoryWorld()
    calls: list[dict[str, Any]] = []

    @tool_fn
    def explode(message: str = "boom") -> dict[str, Any]:
        """Record the call, then fail."""
        calls.append({"message": message})
        raise RuntimeError(message)

    runtime, app = _runtime(world, ToolRegistry([explode, wf.noop]))
    run_id = _start(world, app, wf.single_tool_lwir("explode", {"message": "x"}), {})
    (task,) = app.take()
    before = len(world.list_events(run_id))
    # Attempts above any due one, and a fixer attempt for a step without a fixer.
    assert runtime.execute(run_id, "only", 2, "execute_step") == "not_due"
    assert runtime.execute(run_id, "only", 7, "execute_step") == "not_due"
    assert runtime.execute(run_id, "only", 1, "fix_step") == "not_due"
    assert len(world.list_events(run_id)) == before and calls == []
    # The real one runs (and fails: one attempt is the default budget); a second attempt
    # is still not due, since the policy gives up.
    assert _deliver(runtime, task) == "failed"
    assert len(calls) == 1
    assert runtime.execute(run_id, "only", 2, "execute_step") in {"not_due", "already_done"}
    assert len(calls) == 1


class _WritesWorld(MemoryWorld):
    """Records the calls made to it: appends (with whether each releases its fence) and
    releases (not the one an append that releases makes inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self._appending = False

    def append_batch(self, run_id: str, events: Any, **options: Any) -> list[Event]:
        self.writes.append("append+release" if options.get("release") else "append")
        self._appending = True
        try:
            return super().append_batch(run_id, events, **options)
        finally:
            self._appending = False

    def release_lease(self, lease: Any) -> None:
        if not self._appending:
            self.writes.append("release")
        super().release_lease(lease)


@pytest.mark.parametrize("lapsed", [False, True])
def test_a_handed_off_attempt_s_schedule_and_lease_go_back_in_one_write(lapsed: bool) -> None:
    # A kept attempt sent to its queue: its schedule is appended and the step lease taken
    # for it given back in one round trip (a fenced append that releases). A lease that is
    # no longer held (it lapsed, or was given back) leaves the append unfenced.
    from little_dist.world.base import unique_holder
    from little_dist.world.fleet_keys import step_lease_key

    world = _WritesWorld()
    runtime, app = _runtime(world, ToolRegistry([wf.noop]))
    run_id = _start(world, app, wf.chain_lwir(2), {})
    app.take()
    key = step_lease_key(run_id, "s1")
    lease = world.acquire_lease(key, unique_holder("w"), 30)
    assert lease is not None
    if lapsed:
        world.release_lease(lease)
    dispatch = StepDispatch(run_id, "s1", "s1", 1, "worker", "execute_step")
    scheduled = EventInput(
        type="StepScheduled",
        payload={"stepId": "s1", "stepPath": "s1", "uses": "tool.call"},
        occurrence_id="sched:s1:1",
    )
    state = RunTracker(world, run_id).catch_up()
    world.writes.clear()
    runtime.fastpath.hand_off(
        Advance(state, None, (), 0, kept=dispatch, kept_lease=lease, deferred=(scheduled,))
    )
    assert world.writes == (["append+release", "append"] if lapsed else ["append+release"])
    assert world.list_events(run_id)[-1].occurrence_id == "sched:s1:1"
    assert world.acquire_lease(key, "another-worker", 30) is not None  # given back
    assert [sent.args for sent in app.take()] == [(run_id, "s1", 1)]
