"""The scheduler driven in-process against a real RedisS3World (Redis db 15 + weed mini).

The Celery app is a capture stub (``send_task`` records what would be sent); "workers" are
simulated by calling :func:`~little_dist.runtime.execute_step_attempt` on captured tasks, or
by writing what a dying worker leaves behind. Every test has its own key prefix, signal
stream and group, and short timeouts (lease 2 s, resend 2 s, claim idle 1 s).

Process-level tests (real ``little scheduler`` and ``little worker`` processes) are in
``tests/test_scheduler_processes.py``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from little_dist.compiler import WorkflowVersion, compile_lwir
from little_dist.errors import LittleError
from little_dist.event_types.engine import CANCEL_EVENT_TYPE
from little_dist.events import EventInput
from little_dist.fleet.queue import MemoryQueue, SentTask
from little_dist.fleet.run_tracker import EVENT_BYTES
from little_dist.fleet.scheduler import Scheduler
from little_dist.fleet.sending import dispatch_lease_key
from little_dist.fleet.signals import SignalReader
from little_dist.run_state import materialize_run_state
from little_dist.runtime import (
    AttemptOutcome,
    Capabilities,
    Continuation,
    execute_step_attempt,
    step_lease_key,
)
from little_dist.scheduling import StepDispatch
from little_dist.settings import Settings
from little_dist.tools import ToolRegistry
from little_dist.world.fleet_keys import active_runs_key
from little_dist.world.redis_s3 import RedisS3World, RunSealedError
from tests.fleet_processes import FleetEnv, fleet_env
from tests.lwir_builder import workflow_doc as lwir_doc
from tests.workflows_for_tests import (
    add,
    big_text,
    chain_lwir,
    fan_out_lwir,
    noop,
    record_branch,
    tool_step,
)

__all__ = ["fleet_env"]  # the fixture, imported for pytest

pytestmark = pytest.mark.integration

CAPABILITIES = Capabilities(tools=ToolRegistry([record_branch, noop, add, big_text]))


@dataclass
class Fleet:
    settings: Settings
    env: dict[str, str]
    world: RedisS3World
    redis: redis.Redis
    schedulers: list[Scheduler] = field(default_factory=list)

    def scheduler(self, app: MemoryQueue, name: str | None = None, **options: Any) -> Scheduler:
        scheduler = Scheduler(
            self.settings,
            world=self.world,
            queue=app,
            redis_client=self.redis,
            name=name or f"test-{uuid.uuid4().hex[:6]}",
            block_ms=options.pop("block_ms", 100),
            **options,
        )
        self.schedulers.append(scheduler)
        return scheduler


# Short timeouts keep every test well under a minute.
SHORT = {
    "LITTLE_SIGNAL_CLAIM_IDLE": "1",
    "LITTLE_LEASE_TTL": "2",
    "LITTLE_HEARTBEAT_INTERVAL": "0.5",
    "LITTLE_DISPATCH_RESEND_AFTER": "2",
}


@pytest.fixture
def fleet(fleet_env: FleetEnv) -> Iterator[Fleet]:
    """The test's fleet namespace (:mod:`tests.fleet_processes`) with short timeouts."""
    fleet_env.env.update(SHORT)
    world = fleet_env.world()
    assert isinstance(world, RedisS3World)
    client = redis.Redis.from_url(fleet_env.redis_url, decode_responses=True, socket_timeout=10)
    handle = Fleet(fleet_env.settings(), dict(fleet_env.env), world, client)
    yield handle
    for scheduler in handle.schedulers:
        scheduler.close()
    client.close()


def start_run(
    world: RedisS3World, lwir: dict[str, Any], run_input: Any
) -> tuple[str, WorkflowVersion]:
    """What a client does: register the version, append WorkflowVersionRegistered + RunStarted."""
    version = compile_lwir(lwir, input=run_input)
    run_id = f"run_{uuid.uuid4().hex}"
    world.register_version(version.id, version.to_json())
    world.append_batch(
        run_id,
        [
            EventInput(
                type="WorkflowVersionRegistered",
                occurrence_id="version-registered",
                payload={"workflowVersionId": version.id, "workflowVersionHash": version.hash},
            ),
            EventInput(
                type="RunStarted",
                occurrence_id="run-start",
                payload={"workflowVersionId": version.id, "input": run_input},
            ),
        ],
    )
    return run_id, version


def execute(
    world: RedisS3World,
    version: WorkflowVersion,
    task: SentTask,
    *,
    signal: bool = True,
    preamble: Sequence[EventInput] = (),
) -> AttemptOutcome:
    """Run one captured task the way a worker would (``signal=False``: a fast-path worker,
    whose commit does not wake the scheduler; ``preamble``: its decision's events, riding
    with the attempt's first append)."""
    dispatch = StepDispatch(
        run_id=task.run_id,
        step_path=task.step_path,
        step_id=task.step_path.rsplit(".", 1)[-1].split("[", 1)[0],
        attempt=task.attempt,
        role="worker",
        kind="execute_step",
    )
    return execute_step_attempt(
        world,
        dispatch,
        version=version,
        capabilities=CAPABILITIES,
        lease_ttl=2.0,
        continuation=Continuation(signal=signal, preamble=preamble),
    )


def events_of(world: RedisS3World, run_id: str) -> list[Any]:
    return world.list_events(run_id)


def types_at(world: RedisS3World, run_id: str, type_: str) -> list[str]:
    return [e.occurrence_id or "" for e in events_of(world, run_id) if e.type == type_]


def pending_count(fleet: Fleet) -> int:
    info: Any = fleet.redis.xpending(fleet.settings.signal_stream, fleet.settings.signal_group)
    return int(info["pending"])


def started_scheduler(fleet: Fleet) -> tuple[MemoryQueue, Scheduler]:
    """A started scheduler of ``fleet`` and the app that captures what it sends."""
    app = MemoryQueue()
    scheduler = fleet.scheduler(app)
    scheduler.start()
    return app, scheduler


def spin(scheduler: Scheduler, until: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "condition not reached in time"
        scheduler.run_once(block_ms=50)


# -- signals in, one decision appended, one task out --------------------------------------------


def test_a_chain_runs_signal_by_signal_and_is_archived(fleet: Fleet) -> None:
    app = MemoryQueue()
    scheduler = fleet.scheduler(app)
    run_id, version = start_run(fleet.world, chain_lwir(3), {})
    scheduler.start()

    for index in range(3):
        spin(scheduler, lambda: bool(app.sent))
        (task,) = app.take()
        assert (task.name, task.run_id, task.step_path, task.attempt) == (
            "little.execute_step",
            run_id,
            f"s{index}",
            1,
        )
        assert task.role == "worker"
        # More looks (a sweep, another signal) find the attempt sent: nothing is re-sent.
        for _ in range(3):
            scheduler.run_once(block_ms=20)
        assert app.sent == []
        assert execute(fleet.world, version, task) is AttemptOutcome.completed

    spin(
        scheduler,
        lambda: (
            run_id not in scheduler.runs
            and not fleet.redis.sismember(active_runs_key(fleet.settings.signal_stream), run_id)
        ),
    )
    events = events_of(fleet.world, run_id)
    assert events[-1].type == "RunCompleted"
    # Each decision was appended once: one StepScheduled per step, one run end.
    assert types_at(fleet.world, run_id, "StepScheduled") == [f"sched:s{i}:1" for i in range(3)]
    assert types_at(fleet.world, run_id, "RunCompleted") == ["run-end"]
    # The run is archived: its log is sealed.
    with pytest.raises(RunSealedError):
        fleet.world.append(run_id, EventInput(type="little.test.late", payload={}))
    # Every signal was acknowledged.
    assert pending_count(fleet) == 0


def test_the_run_cache_is_bounded_by_the_bytes_of_its_runs_and_runs_still_finish(
    fleet: Fleet,
) -> None:
    # Room for about one run's folded state: a look at another drops the least recently
    # looked at, which is read from its log again when it comes back. (The run looked at
    # last is weighed as it is once the next is looked at: at most two stay.)
    fleet.settings = fleet.settings.model_copy(update={"run_cache_bytes": 4 * EVENT_BYTES})
    app = MemoryQueue()
    scheduler = fleet.scheduler(app)
    runs = [start_run(fleet.world, chain_lwir(2), {}) for _ in range(3)]
    versions = dict(runs)
    scheduler.start()
    spin(scheduler, lambda: len(app.sent) == 3)
    assert len(scheduler.runs) == 2
    while not all(events_of(fleet.world, run_id)[-1].type == "RunCompleted" for run_id in versions):
        for task in app.take():
            assert execute(fleet.world, versions[task.run_id], task) is AttemptOutcome.completed
        scheduler.run_once(block_ms=50)
        assert len(scheduler.runs) <= 2
    for run_id in versions:
        assert types_at(fleet.world, run_id, "StepScheduled") == ["sched:s0:1", "sched:s1:1"]


def test_a_finished_run_is_archived_after_the_archive_delay(fleet: Fleet) -> None:
    settings = fleet.settings.model_copy(update={"archive_delay": 0.6})
    app = MemoryQueue()
    scheduler = Scheduler(
        settings,
        world=fleet.world,
        queue=app,
        redis_client=fleet.redis,
        name=f"test-{uuid.uuid4().hex[:6]}",
        block_ms=100,
    )
    fleet.schedulers.append(scheduler)
    runs = [start_run(fleet.world, chain_lwir(1), {}) for _ in range(2)]
    scheduler.start()
    versions = dict(runs)
    spin(scheduler, lambda: len(app.sent) == 2)
    for task in app.take():
        assert execute(fleet.world, versions[task.run_id], task) is AttemptOutcome.completed
    active = active_runs_key(settings.signal_stream)
    first, second = (run_id for run_id, _ in runs)
    spin(scheduler, lambda: events_of(fleet.world, second)[-1].type == "RunCompleted")
    spin(scheduler, lambda: first not in scheduler.runs and second not in scheduler.runs)
    ended = time.monotonic()
    # Finished, not archived yet: no seal marker, the run is still active.
    assert not fleet.redis.exists(fleet.world._keys.run(first).archived)
    assert fleet.redis.sismember(active, first)
    spin(scheduler, lambda: not fleet.redis.sismember(active, first))
    assert time.monotonic() - ended >= 0.3
    with pytest.raises(RunSealedError):
        fleet.world.append(first, EventInput(type="little.test.later", payload={}))
    # Closing starts what is still waiting rather than leaving it to the next sweep.
    scheduler.close()
    fleet.schedulers.remove(scheduler)
    assert not fleet.redis.sismember(active, second)
    with pytest.raises(RunSealedError):
        fleet.world.append(second, EventInput(type="little.test.later", payload={}))


def test_a_run_that_ended_far_ahead_of_the_scheduler_is_finished_without_folding(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Workers ran the run to its end on the fast path (quiet commits); the end's signal is
    # the first the scheduler hears of it: it reads the last event, not the whole log.
    app, scheduler = started_scheduler(fleet)
    run_id, _ = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: len(app.take()) == 1)  # its first step's task, sent
    filler = [EventInput(type="little.test.filler", payload={"n": n}) for n in range(300)]
    fleet.world.append_batch(run_id, filler, signal=False)
    fleet.world.append(run_id, EventInput(type="RunCompleted", payload={"output": {}}))
    reads: list[int] = []
    for name in ("list_events", "list_events_partly"):
        real = getattr(fleet.world, name)

        def reading(run: str, *args: Any, _real: Any = real, **options: Any) -> Any:
            reads.append(options.get("after", 0))
            return _real(run, *args, **options)

        monkeypatch.setattr(fleet.world, name, reading)

    spin(scheduler, lambda: run_id in scheduler.finished)

    assert reads == [303]  # the end alone (the scheduler had folded up to s0 scheduled)
    assert run_id not in scheduler.runs
    # A run the signals show is close to folded costs no peek: it is looked at as usual.
    second, _ = start_run(fleet.world, chain_lwir(1), {})
    reads.clear()
    spin(scheduler, lambda: len(app.sent) == 1)
    assert app.sent[0].run_id == second
    assert reads and all(after < 2 for after in reads)


def test_a_fast_path_worker_that_dies_after_its_commit_is_covered_by_the_sweep(
    fleet: Fleet,
) -> None:
    app = MemoryQueue()
    scheduler = fleet.scheduler(app)
    run_id, version = start_run(fleet.world, chain_lwir(2), {})
    scheduler.start()
    spin(scheduler, lambda: bool(app.sent))
    (first,) = app.take()
    # A fast-path worker commits quietly, then dies before advancing the run itself.
    assert execute(fleet.world, version, first, signal=False) is AttemptOutcome.completed
    for _ in range(3):
        scheduler.run_once(block_ms=20)
    assert app.sent == []  # no signal: the scheduler did not look
    swept = scheduler.sweep_all()
    assert swept.get(run_id) == []  # nothing to fail: s0 ended, s1 is sent
    (second,) = app.take()
    assert (second.step_path, second.attempt) == ("s1", 1)
    assert execute(fleet.world, version, second) is AttemptOutcome.completed
    spin(scheduler, lambda: events_of(fleet.world, run_id)[-1].type == "RunCompleted")


@pytest.mark.parametrize("fast", [True, False])
def test_a_fast_path_attempt_carrying_its_decision_wakes_no_scheduler(
    fleet: Fleet, fast: bool
) -> None:
    # A fan-out's refill carries the look's decision (branch ends: events that wake the
    # scheduler) in its first append; the worker acts on that decision itself.
    app, scheduler = started_scheduler(fleet)
    _, version = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    (task,) = app.take()
    before = fleet.redis.xlen(fleet.settings.signal_stream)
    decided = EventInput(type="little.test.decided", occurrence_id="decided", payload={})
    outcome = execute(fleet.world, version, task, signal=not fast, preamble=[decided])
    assert outcome is AttemptOutcome.completed
    added = fleet.redis.xlen(fleet.settings.signal_stream) - before
    # Without the fast path the first append and the commit each wake the scheduler.
    assert added == (0 if fast else 2)


def test_a_client_start_is_announced_not_signalled_and_a_sweep_covers_a_client_that_died(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A client that sends the first tasks itself records the start quietly (the scheduler
    # would only decide the same thing at the same moment) and adds the run to the active
    # runs first. This one dies before its first decision: the next sweep moves the run on.
    from little_dist.fleet import submission as client_module
    from little_dist.fleet.client import submit_run
    from little_dist.fleet.sweeper import ActiveRuns

    app, scheduler = started_scheduler(fleet)
    signals_before = fleet.redis.xlen(fleet.settings.signal_stream)

    def dies(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the client died")

    monkeypatch.setattr(client_module, "advance_run", dies)
    active = ActiveRuns(fleet.redis, active_runs_key(fleet.settings.signal_stream))
    with pytest.raises(RuntimeError, match="died"):
        submit_run(
            fleet.world,
            chain_lwir(1),
            {},
            run_id="run_quiet_start",
            queue=app,
            settings=fleet.settings,
            announce=active.add,
        )
    assert [e.type for e in events_of(fleet.world, "run_quiet_start")][-1] == "RunStarted"
    assert fleet.redis.xlen(fleet.settings.signal_stream) == signals_before
    assert "run_quiet_start" in active.members()
    for _ in range(3):
        scheduler.run_once(block_ms=20)
    assert app.sent == []  # no signal: the scheduler has not looked
    scheduler.sweep_all()
    (task,) = app.take()
    assert (task.run_id, task.step_path) == ("run_quiet_start", "s0")


def test_the_loop_sweep_leaves_a_moving_run_once_then_looks(fleet: Fleet) -> None:
    # A run whose log grew since the last sweep is being moved on by workers: the loop's
    # sweep leaves it (no fold of a wide run in the middle of it), but never twice in a row.
    app = MemoryQueue()
    scheduler = fleet.scheduler(app)
    run_id, version = start_run(fleet.world, chain_lwir(2), {})
    scheduler.start()
    spin(scheduler, lambda: bool(app.sent))
    (first,) = app.take()
    assert execute(fleet.world, version, first, signal=False) is AttemptOutcome.completed
    scheduler.runs.forget(run_id)  # as if this scheduler had never swept the run
    looks: list[str] = []
    real_advance = scheduler.advance

    def counting(run: str, *args: Any, **kwargs: Any) -> Any:
        looks.append(run)
        return real_advance(run, *args, **kwargs)

    scheduler.advance = counting  # type: ignore[method-assign]
    assert scheduler.sweep_run(run_id, leave_moving=True) == []
    assert looks == [] and app.sent == []  # new to its sweeps: left to the workers
    assert scheduler.sweep_run(run_id, leave_moving=True) == []
    assert looks == [run_id]  # never twice in a row: s1 goes out
    (second,) = app.take()
    assert (second.step_path, second.attempt) == ("s1", 1)
    # Its log grew since (s1 ran): the next sweep leaves it, the one after looks.
    assert execute(fleet.world, version, second, signal=False) is AttemptOutcome.completed
    scheduler.sweep_run(run_id, leave_moving=True)
    assert looks == [run_id]
    scheduler.sweep_run(run_id, leave_moving=True)
    assert looks == [run_id, run_id]
    assert events_of(fleet.world, run_id)[-1].type == "RunCompleted"


def test_decisions_are_appended_once_by_two_schedulers_racing(fleet: Fleet) -> None:
    apps = [MemoryQueue(), MemoryQueue()]
    first, second = fleet.scheduler(apps[0]), fleet.scheduler(apps[1])
    first.start()
    second.start()
    run_ids = [
        start_run(
            fleet.world, fan_out_lwir(max_concurrency=5), {"keys": ["a", "b", "c", "d"], "sleep": 0}
        )[0]
        for _ in range(3)
    ]
    # Both look at every run (as happens when a signal is claimed while being handled).
    for run_id in run_ids:
        first.advance(run_id)
        second.advance(run_id)
        first.advance(run_id)
    for run_id in run_ids:
        scheduled = types_at(fleet.world, run_id, "StepScheduled")
        assert len(scheduled) == len(set(scheduled)) == 5  # fan + 4 branch steps
    sent = [(t.run_id, t.step_path, t.attempt) for app in apps for t in app.sent]
    assert len(sent) == len(set(sent)) == 12  # every branch step of every run, once


def test_cancel_requested_fails_the_run(fleet: Fleet) -> None:
    app, scheduler = started_scheduler(fleet)
    run_id, _ = start_run(fleet.world, chain_lwir(2), {})
    spin(scheduler, lambda: bool(app.sent))
    fleet.world.append(
        run_id, EventInput(type=CANCEL_EVENT_TYPE, occurrence_id="cancel", payload={})
    )
    spin(scheduler, lambda: events_of(fleet.world, run_id)[-1].type == "RunFailed")
    final = events_of(fleet.world, run_id)[-1]
    assert final.payload["error"]["causeCode"] == "cancelled"


def test_large_outputs_are_read_back_for_decide(fleet: Fleet) -> None:
    # big's output (100 KB) is stored by reference; the decision reads it inline, so the
    # scheduler must read it back: without it the route would take the default ("low").
    lwir = lwir_doc(
        "tests.big",
        [
            tool_step("big", "big_text", {"size": 100_000}, output={"mode": "text"}),
            {
                "id": "route",
                "uses": "decision",
                "needs": ["big"],
                "with": {
                    "cases": [{"when": "{{ steps.big.output }}", "to": "high"}],
                    "default": "low",
                },
            },
            tool_step("high", "add", {"a": 1, "b": 1}),
            tool_step("low", "add", {"a": 0, "b": 0}),
        ],
    )
    app, scheduler = started_scheduler(fleet)
    run_id, version = start_run(fleet.world, lwir, {})
    ran = []
    for _ in range(2):
        spin(scheduler, lambda: bool(app.sent))
        (task,) = app.take()
        ran.append(task.step_path)
        assert execute(fleet.world, version, task) is AttemptOutcome.completed
    assert ran == ["big", "high"]
    spin(scheduler, lambda: events_of(fleet.world, run_id)[-1].type == "RunCompleted")
    big = next(e for e in events_of(fleet.world, run_id) if e.type == "StepCompleted")
    assert "outputRef" in big.payload and "output" not in big.payload
    assert events_of(fleet.world, run_id)[-1].payload["output"] == {"sum": 2}


# -- a dead scheduler's signals -------------------------------------------------------------------


def test_a_dead_schedulers_pending_signals_are_claimed(fleet: Fleet) -> None:
    # "dead" reads the run's signals and never acknowledges them (killed before handling).
    dead = SignalReader(
        fleet.redis,
        fleet.settings.signal_stream,
        fleet.settings.signal_group,
        "dead-scheduler",
        claim_idle=fleet.settings.signal_claim_idle,
    )
    dead.ensure_group()
    # The active set is built already: only the signals can tell the live one about the run.
    fleet.redis.set(f"{active_runs_key(fleet.settings.signal_stream)}:built", "1")
    run_id, _ = start_run(fleet.world, chain_lwir(2), {})
    taken = dead.read(count=100, block_ms=100)
    assert {s.run_id for s in taken} == {run_id}

    app = MemoryQueue()
    live = fleet.scheduler(app, sweep_interval=3600)
    live.start()
    live.sweeps.skip(time.monotonic())  # no sweep: the claim alone must find the run
    started = time.monotonic()
    spin(live, lambda: bool(app.sent), timeout=10)
    assert time.monotonic() - started >= fleet.settings.signal_claim_idle * 0.5
    assert [t.step_path for t in app.sent] == ["s0"]
    assert pending_count(fleet) == 0


def test_a_restarted_scheduler_handles_its_own_pending_signals(fleet: Fleet) -> None:
    fleet.redis.set(f"{active_runs_key(fleet.settings.signal_stream)}:built", "1")
    before = SignalReader(
        fleet.redis,
        fleet.settings.signal_stream,
        fleet.settings.signal_group,
        "scheduler-a",
        claim_idle=3600,
    )
    before.ensure_group()
    run_id, _ = start_run(fleet.world, chain_lwir(1), {})
    assert before.read(count=10, block_ms=100)

    app = MemoryQueue()
    again = fleet.scheduler(app, name="scheduler-a", sweep_interval=3600)
    again.start()  # reads its own pending entries first
    assert [(t.run_id, t.step_path) for t in app.sent] == [(run_id, "s0")]
    assert pending_count(fleet) == 0


def test_the_active_set_is_rebuilt_from_the_run_index(fleet: Fleet) -> None:
    run_id, _ = start_run(fleet.world, chain_lwir(1), {})
    fleet.redis.delete(fleet.settings.signal_stream)  # the signal is lost
    app = MemoryQueue()
    scheduler = fleet.scheduler(app, sweep_interval=0.2)
    scheduler.start()
    assert fleet.redis.sismember(active_runs_key(fleet.settings.signal_stream), run_id)
    spin(scheduler, lambda: bool(app.sent))
    assert [t.step_path for t in app.sent] == ["s0"]


# -- the sweeper ----------------------------------------------------------------------------------


def test_lost_tasks_are_sent_again_after_dispatch_resend_after(fleet: Fleet) -> None:
    app = MemoryQueue()
    scheduler = fleet.scheduler(app, sweep_interval=0.2)
    scheduler.start()
    run_id, version = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    first_sent = time.monotonic()
    (lost,) = app.take()  # the message never reaches a worker

    spin(scheduler, lambda: bool(app.sent), timeout=10)
    waited = time.monotonic() - first_sent
    assert waited >= fleet.settings.dispatch_resend_after * 0.9
    (again,) = app.take()
    assert (again.run_id, again.step_path, again.attempt) == (lost.run_id, lost.step_path, 1)
    assert execute(fleet.world, version, again) is AttemptOutcome.completed
    spin(scheduler, lambda: events_of(fleet.world, run_id)[-1].type == "RunCompleted")
    # A started attempt is never sent again.
    assert app.sent == []


def test_a_dead_workers_attempt_fails_with_lease_expired_and_is_retried(fleet: Fleet) -> None:
    app = MemoryQueue()
    scheduler = fleet.scheduler(app, sweep_interval=0.2)
    scheduler.start()
    run_id, version = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    app.take()
    # A worker takes the step lease, records the start, and dies (the lease is not renewed).
    lease = fleet.world.acquire_lease(step_lease_key(run_id, "s0"), "doomed-worker", 1.0)
    assert lease is not None
    fleet.world.append(
        run_id,
        EventInput(
            type="StepAttemptStarted",
            occurrence_id="start:s0:1",
            payload={"stepPath": "s0", "stepId": "s0", "attempt": 1, "attemptId": "attempt_1"},
        ),
        fence=lease.fence,
    )
    spin(scheduler, lambda: bool(app.sent), timeout=10)
    (retry,) = app.take()
    assert (retry.step_path, retry.attempt) == ("s0", 2)
    failed = [e for e in events_of(fleet.world, run_id) if e.type == "StepFailed"]
    assert [e.occurrence_id for e in failed] == ["end:s0:1"]
    assert failed[0].payload["error"]["causeCode"] == "lease_expired"
    assert failed[0].payload["error"]["retriable"] is True
    assert execute(fleet.world, version, retry) is AttemptOutcome.completed
    spin(scheduler, lambda: events_of(fleet.world, run_id)[-1].type == "RunCompleted")
    state = materialize_run_state(events_of(fleet.world, run_id))
    assert state.steps["s0"].status == "completed"


def test_a_live_workers_attempt_is_left_alone(fleet: Fleet) -> None:
    app = MemoryQueue()
    scheduler = fleet.scheduler(app, sweep_interval=0.1)
    scheduler.start()
    run_id, _ = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    app.take()
    lease = fleet.world.acquire_lease(step_lease_key(run_id, "s0"), "busy-worker", 30.0)
    assert lease is not None
    fleet.world.append(
        run_id,
        EventInput(
            type="StepAttemptStarted",
            occurrence_id="start:s0:1",
            payload={"stepPath": "s0", "stepId": "s0", "attempt": 1, "attemptId": "attempt_1"},
        ),
        fence=lease.fence,
    )
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        scheduler.run_once(block_ms=50)
    assert types_at(fleet.world, run_id, "StepFailed") == []
    assert app.sent == []
    assert scheduler.sweep_all() == {run_id: []}


def test_the_dispatch_lease_stops_a_second_sender(fleet: Fleet) -> None:
    run_id, _ = start_run(fleet.world, chain_lwir(1), {})
    # Someone else (the worker fast path, another scheduler) holds the dispatch lease.
    dispatch = StepDispatch(run_id, "s0", "s0", 1, "worker", "execute_step")
    held = fleet.world.acquire_lease(dispatch_lease_key(dispatch), "other", 30.0)
    assert held is not None
    app, scheduler = started_scheduler(fleet)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        scheduler.run_once(block_ms=50)
    assert types_at(fleet.world, run_id, "StepScheduled") == ["sched:s0:1"]
    assert app.sent == []


# -- logging --------------------------------------------------------------------------------------


def test_one_structured_log_line_per_decision(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    app, scheduler = started_scheduler(fleet)
    caplog.set_level(logging.INFO, logger="little.scheduler")
    run_id, _ = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "little.scheduler"]
    decisions = [line for line in lines if line["event"] == "decision"]
    assert len(decisions) == 1
    (line,) = decisions
    assert line["run"] == run_id
    assert line["appended"] == 1 and line["sent"] == 1
    assert line["tasks"] == ["s0#1"]
    assert isinstance(line["ms"], float)


def test_a_broken_run_does_not_stop_the_others(fleet: Fleet) -> None:
    app, scheduler = started_scheduler(fleet)
    # A run whose version was never registered: looking at it fails.
    broken = f"run_{uuid.uuid4().hex}"
    fleet.world.append(
        broken,
        EventInput(
            type="RunStarted",
            occurrence_id="run-start",
            payload={"workflowVersionId": "wfver_0000000000000000", "input": {}},
        ),
    )
    run_id, _ = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    assert [t.run_id for t in app.sent] == [run_id]
    assert pending_count(fleet) == 0
    with pytest.raises(LittleError):
        scheduler.advance(broken)


def test_a_run_whose_look_keeps_raising_is_failed_as_internal_after_a_few_looks(
    fleet: Fleet, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from little_dist.fleet import dispatch as dispatch_module  # (every look decides there)

    app, scheduler = started_scheduler(fleet)
    caplog.set_level(logging.INFO, logger="little.scheduler")
    poisoned, _ = start_run(fleet.world, chain_lwir(2), {})
    healthy, _ = start_run(fleet.world, chain_lwir(1), {})
    real_decide = dispatch_module.decide

    def decide(ctx: Any, state: Any) -> Any:
        if ctx.run_id == poisoned:
            raise ZeroDivisionError("a bug in decide")
        return real_decide(ctx, state)

    monkeypatch.setattr(dispatch_module, "decide", decide)
    for look in range(1, 4):
        assert scheduler.sweep_run(poisoned) == []
        ended = events_of(fleet.world, poisoned)[-1]
        assert (ended.type == "RunFailed") == (look == 3)
    error = ended.payload["error"]
    assert error["causeCode"] == "internal" and error["retriable"] is False
    assert "ZeroDivisionError: a bug in decide" in error["message"]
    assert "Traceback" not in json.dumps(ended.payload)
    failures = [
        r for r in caplog.records if r.name == "little.scheduler" and "run-error" in r.getMessage()
    ]
    assert len(failures) == 3
    # the traceback is in the log: exc_info, or exc_text once the redaction filter scrubbed it
    formatted = [logging.Formatter().format(r) for r in failures]
    assert all("Traceback (most recent call last)" in text for text in formatted)
    # Over: further looks do nothing, and other runs were served all along.
    assert scheduler.sweep_run(poisoned) == []
    assert events_of(fleet.world, poisoned)[-1].sequence == ended.sequence
    spin(scheduler, lambda: any(t.run_id == healthy for t in app.sent))
