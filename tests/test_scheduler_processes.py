"""Real ``little scheduler`` and ``little worker`` processes: sharing, crashes, lost tasks.

Each test gets its own fleet namespace (:mod:`tests.fleet_processes`: key prefix, signal
stream and group, queues, S3 prefix) and short timeouts: step lease 2 s, resend 2 s, signal
claim idle 2 s. Workers run with ``--no-fast-path`` where the test is about what the
*scheduler* sends, so every step after the first is dispatched by a scheduler.

What was sent is counted without Flower: ``tests.fleet_app`` (loaded in the workers)
increments ``{prefix}delivery:{run}:{path}:{attempt}`` in Redis for every
``little.execute_step`` a worker starts.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from little_dist.fleet.client import Client
from little_dist.world.base import World
from tests.fleet_app import DELIVERY_PREFIX_ENV
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.workflows_for_tests import SIDE_EFFECTS_ENV, chain_lwir, fan_out_lwir

__all__ = ["fleet_env"]  # the fixture, imported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

APPS = ("tests.workflows_for_tests", "tests.fleet_app")
READY = "scheduler-started"
SHORT = {
    "LITTLE_LEASE_TTL": "2",
    "LITTLE_HEARTBEAT_INTERVAL": "0.5",
    "LITTLE_DISPATCH_RESEND_AFTER": "2",
    "LITTLE_SIGNAL_CLAIM_IDLE": "2",
}


def configure(fleet: FleetEnv, tmp_path: Path) -> tuple[str, Path]:
    """Short timeouts, the delivery probe and the side-effect file; (probe prefix, file)."""
    probe = f"{fleet.key_prefix}probe:"
    effects = tmp_path / "effects.txt"
    fleet.env.update(SHORT)
    fleet.env[DELIVERY_PREFIX_ENV] = probe
    fleet.env[SIDE_EFFECTS_ENV] = str(effects)
    return probe, effects


def deliveries(fleet: FleetEnv, probe: str) -> dict[str, int]:
    """``{run}:{path}:{attempt}`` -> how many times a worker started that task."""
    client = redis.Redis.from_url(fleet.redis_url, decode_responses=True)
    try:
        keys = list(client.scan_iter(match=f"{probe}delivery:*", count=1000))
        return {key[len(f"{probe}delivery:") :]: int(client.get(key) or 0) for key in keys}
    finally:
        client.close()


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


def final_types(world: World, run_ids: list[str]) -> dict[str, str]:
    return {run_id: world.list_events(run_id)[-1].type for run_id in run_ids}


def wait_all_done(world: World, run_ids: list[str], timeout: float) -> None:
    def done() -> bool:
        return all(t in ("RunCompleted", "RunFailed") for t in final_types(world, run_ids).values())

    wait_for(done, timeout, "every run to end")
    assert set(final_types(world, run_ids).values()) == {"RunCompleted"}


def pending_of(fleet: FleetEnv) -> dict[str, int]:
    client = redis.Redis.from_url(fleet.redis_url, decode_responses=True)
    try:
        group = fleet.env["LITTLE_SIGNAL_GROUP"]
        consumers: Any = client.xinfo_consumers(fleet.signal_stream, group)
        return {c["name"]: int(c["pending"]) for c in consumers}
    finally:
        client.close()


def blocked_stream_readers(fleet: FleetEnv) -> int:
    """Redis clients blocked in XREADGROUP now (the test's only scheduler, waiting)."""
    client = redis.Redis.from_url(fleet.redis_url, decode_responses=True)
    try:
        return sum(
            1 for c in client.client_list() if c.get("cmd") == "xreadgroup" and "b" in c["flags"]
        )
    finally:
        client.close()


def test_two_schedulers_never_dispatch_a_step_twice(fleet_env: FleetEnv, tmp_path: Path) -> None:
    probe, effects = configure(fleet_env, tmp_path)
    # Resends would be legitimate re-dispatches; keep them out of this count.
    fleet_env.env["LITTLE_DISPATCH_RESEND_AFTER"] = "60"
    schedulers = [
        start_scheduler(fleet_env, name=name, ready_pattern=READY)
        for name in ("sched-a", "sched-b")
    ]
    start_worker(fleet_env, app=APPS, concurrency=8, extra_args=["--no-fast-path"])
    client: Client = fleet_env.client()
    keys = [f"k{i}" for i in range(6)]
    runs = [
        client.submit(fan_out_lwir(max_concurrency=3), {"keys": keys, "sleep": 0}) for _ in range(4)
    ] + [client.submit(chain_lwir(5), {}) for _ in range(4)]
    world = fleet_env.world()
    wait_all_done(world, runs, timeout=60)

    sent = deliveries(fleet_env, probe)
    expected = {f"{run}:fan[{key}].work:1" for run in runs[:4] for key in keys} | {
        f"{run}:s{i}:1" for run in runs[4:] for i in range(5)
    }
    assert set(sent) == expected
    assert {count for count in sent.values()} == {1}, {k: v for k, v in sent.items() if v != 1}
    # Both schedulers took part (the group split the signals between them).
    for scheduler in schedulers:
        assert '"event":"decision"' in scheduler.output(), scheduler.output()[-2000:]
    assert sorted(effects.read_text().split()) == sorted(keys * 4)


def test_a_killed_schedulers_pending_signals_are_claimed_by_another(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    configure(fleet_env, tmp_path)
    start_worker(fleet_env, app=APPS, concurrency=4, extra_args=["--no-fast-path"])
    # Its schedule ticks looked at rarely: a look every second (the default) bounds its wait
    # in XREADGROUP to a second, and Redis ends a frozen reader's wait when that passes, so
    # the runs submitted after the freeze (slow on a busy machine) reached nobody.
    doomed = start_scheduler(
        fleet_env, name="sched-doomed", ready_pattern=READY, env={"LITTLE_SCHEDULE_POLL": "60"}
    )
    # Frozen while blocked in XREADGROUP: entries are delivered to it, never handled. (A
    # fixed sleep was not always enough under load: frozen elsewhere, it gets nothing.)
    wait_for(lambda: blocked_stream_readers(fleet_env) > 0, 10, "the scheduler to block")
    os.kill(doomed.pid, signal.SIGSTOP)
    client: Client = fleet_env.client()
    runs = [client.submit(chain_lwir(3), {}) for _ in range(5)]
    wait_for(lambda: pending_of(fleet_env).get("sched-doomed", 0) > 0, 10, "pending entries")
    doomed.kill()
    assert pending_of(fleet_env)["sched-doomed"] > 0

    start_scheduler(fleet_env, name="sched-heir", ready_pattern=READY)
    world = fleet_env.world()
    wait_all_done(world, runs, timeout=45)
    # The dead scheduler's entries were claimed and acknowledged.
    wait_for(lambda: pending_of(fleet_env).get("sched-doomed", 0) == 0, 10, "the claim")


def test_a_worker_killed_mid_step_is_failed_by_the_sweeper_and_retried(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    _, effects = configure(fleet_env, tmp_path)
    start_scheduler(fleet_env, name="sched", ready_pattern=READY)
    victim = start_worker(fleet_env, app=APPS, concurrency=2)
    client: Client = fleet_env.client()
    run_id = client.submit(fan_out_lwir(max_concurrency=2), {"keys": ["slow"], "sleep": 4})
    world = fleet_env.world()
    # The tool has started (its side effect is written before it sleeps): kill the worker.
    wait_for(lambda: effects.exists() and "slow" in effects.read_text(), 20, "the tool to run")
    victim.kill()
    start_worker(fleet_env, app=APPS, concurrency=2)
    wait_all_done(world, [run_id], timeout=45)

    events = world.list_events(run_id)
    failed = [e for e in events if e.type == "StepFailed"]
    assert [e.occurrence_id for e in failed] == ["end:fan[slow].work:1"]
    assert failed[0].payload["error"]["causeCode"] == "lease_expired"
    completed = [
        e.payload["attempt"]
        for e in events
        if e.type == "StepCompleted" and e.payload["stepPath"] == "fan[slow].work"
    ]
    assert completed == [2]


def test_tasks_lost_before_start_are_sent_again(fleet_env: FleetEnv, tmp_path: Path) -> None:
    from little_dist.fleet.app import make_celery_app

    probe, _ = configure(fleet_env, tmp_path)
    queue = fleet_env.queues["worker"]
    # The worker is ready before the message is lost, but does not take from the queue until
    # then: started only after the loss, it was seen to take seconds on a busy machine, and
    # the scheduler had sent the attempt twice by then (both copies ran).
    node = "worker-lost@test"
    start_worker(fleet_env, app=APPS, concurrency=2, name=node.split("@")[0])
    control = make_celery_app(fleet_env.settings()).control
    assert control.cancel_consumer(queue, destination=[node], reply=True, timeout=10)
    start_scheduler(fleet_env, name="sched", ready_pattern=READY)
    client: Client = fleet_env.client()
    run_id = client.submit(chain_lwir(2), {})
    broker = redis.Redis.from_url(fleet_env.redis_url)
    try:
        wait_for(lambda: broker.llen(queue) > 0, 10, "the first task on the queue")
        lost_at = time.monotonic()
        broker.delete(queue)  # the message is lost before any worker took it
    finally:
        broker.close()
    assert control.add_consumer(queue, destination=[node], reply=True, timeout=10)
    world = fleet_env.world()
    wait_all_done(world, [run_id], timeout=45)
    assert time.monotonic() - lost_at >= 2.0  # not before dispatch_resend_after
    sent = deliveries(fleet_env, probe)
    # The lost message never ran; the re-sent one ran once; the attempt number is unchanged.
    # s1 ran in the same slot (eager continuation) unless the scheduler sent it first.
    assert sent.pop(f"{run_id}:s0:1") == 1
    assert sent in ({}, {f"{run_id}:s1:1": 1})
    assert [e.type for e in world.list_events(run_id)].count("StepFailed") == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_scheduler_cleanly(fleet_env: FleetEnv, sig: int) -> None:
    scheduler = start_scheduler(fleet_env, name="sched", ready_pattern=READY)
    time.sleep(0.3)
    started = time.monotonic()
    os.kill(scheduler.pid, sig)
    assert scheduler.popen.wait(timeout=10) == 0
    assert time.monotonic() - started < 5
    assert '"event":"scheduler-stopped"' in scheduler.output()
    assert "Traceback" not in scheduler.output()
