"""The fleet end to end: real ``little scheduler`` and ``little worker`` processes, real Redis,
real S3 (``weed mini``), real SIGKILLs, and Flower against the broker.

Every test gets its own namespace from :mod:`tests.fleet_processes` (``fleet_env``: Redis key
prefix, signal stream and group, role queues) and its own processes, each in its own process
group and killed at teardown. Workers install the scripted model (``LITTLE_SCRIPTED_MODEL``)
and import :mod:`tests.fleet_app`, whose ``effect`` tool counts every real execution with a
Redis ``INCR`` per (run, step path) and whose Celery ``task_prerun`` probe counts every
``little.execute_step`` a worker starts per (run, step path, attempt). So "no side effect
repeated" and "never dispatched twice" are counted, not inferred.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fleet_app import (
    DELIVERY_PREFIX_ENV,
    FX_PREFIX_ENV,
    FX_REDIS_ENV,
    SUMMARY,
    build_script,
    effect_key,
    running_key,
    screening,
    screening_paths,
    slow_chain,
    wide_fan,
)
from tests.fleet_processes import (
    FleetEnv,
    FleetProcess,
    fleet_env,
    start_scheduler,
    start_worker,
)

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

FlowerAuth = tuple[str, str]
# Short leases and delays, so a dead process is noticed within seconds.
FAST_FAILOVER = {
    "LITTLE_LEASE_TTL": "2",
    "LITTLE_HEARTBEAT_INTERVAL": "0.5",
    "LITTLE_DISPATCH_RESEND_AFTER": "5",
    "LITTLE_SIGNAL_CLAIM_IDLE": "1",
    "LITTLE_SOFT_SHUTDOWN_TIMEOUT": "0",
}


def free_port() -> int:
    from tests.ports import reserve_port

    return reserve_port()


def wait_until(
    check: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    every: float = 0.1,
    alive: Callable[[], None] | None = None,
) -> Any:
    """Call ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if alive is not None:
            alive()
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Fleet:
    """One test's fleet: ``fleet_env`` plus the probes of :mod:`tests.fleet_app`."""

    def __init__(self, env: FleetEnv, script: Path, overrides: dict[str, str]) -> None:
        import redis

        self.fleet_env = env
        self.prefix = env.key_prefix
        env.env.update(
            {
                "LITTLE_APP": "tests.fleet_app",
                "LITTLE_SCRIPTED_MODEL": str(script),
                FX_REDIS_ENV: env.redis_url,
                FX_PREFIX_ENV: self.prefix,
                DELIVERY_PREFIX_ENV: self.prefix,
                **FAST_FAILOVER,
                **overrides,
            }
        )
        self.settings = env.settings()
        self.world = env.world()
        self.client = env.client(world=self.world)
        self.redis = redis.Redis.from_url(env.redis_url, socket_timeout=10)
        self._app: Any = None

    @property
    def processes(self) -> list[FleetProcess]:
        return self.fleet_env.processes

    @property
    def app(self) -> Any:
        """A Celery app on the test's broker and queues (to send tasks by name)."""
        if self._app is None:
            from little_dist.fleet.app import make_celery_app

            self._app = make_celery_app(self.settings)
        return self._app

    def close(self) -> None:
        for process in self.processes:
            if process.name == "flower":
                process.kill()  # nothing to shut down cleanly; SIGTERM takes it seconds
        if self._app is not None:
            self._app.close()
        self.redis.close()

    # -- processes ------------------------------------------------------------------------
    def start_scheduler(self, name: str) -> FleetProcess:
        return start_scheduler(self.fleet_env, name=f"{self.prefix}{name}")

    def start_worker(self, name: str, extra: Sequence[str] = ()) -> FleetProcess:
        return start_worker(
            self.fleet_env,
            roles=("worker", "fixer"),
            app="tests.fleet_app",
            concurrency=4,
            extra_args=extra,
            name=name,
        )

    def start_flower(self, port: int, auth: str) -> FleetProcess:
        # Celery's own command line, as compose and deploy/ run it (FleetEnv.start runs
        # `little ...` only), with the broker and the login in the environment as there; the
        # process joins the fleet's list, so teardown stops it.
        argv = [sys.executable, "-m", "celery", "flower", f"--port={port}", "--address=127.0.0.1"]
        env = {k: v for k, v in self.fleet_env.env.items() if k != "FLOWER_UNAUTHENTICATED_API"}
        env |= {"CELERY_BROKER_URL": self.settings.broker_url, "FLOWER_BASIC_AUTH": auth}
        log = self.fleet_env.tmp / "flower.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, stopped at teardown
            )
        flower = FleetProcess("flower", argv, popen, log)
        self.fleet_env.processes.append(flower)
        return flower

    def check_alive(self, *procs: FleetProcess) -> None:
        for proc in procs or tuple(self.processes):
            if not proc.alive():
                pytest.fail(
                    f"{proc.name} exited with {proc.popen.returncode}:\n{proc.output()[-4000:]}"
                )

    def worker_hosts(self, count: int, *, timeout: float = 30.0) -> list[str]:
        """The node names of the ``count`` workers consuming the test's worker queue."""
        queue = self.settings.queue_for("worker")

        def consuming() -> list[str]:
            replies = self.app.control.inspect(timeout=0.5).active_queues() or {}
            hosts = [h for h, qs in replies.items() if any(q.get("name") == queue for q in qs)]
            return hosts if len(hosts) >= count else []

        found: list[str] = wait_until(
            consuming, timeout=timeout, what=f"{count} workers on {queue}", every=0.2
        )
        return found

    # -- runs --------------------------------------------------------------------------------
    def submit(self, workflow: Any, run_input: Any, run_id: str) -> str:
        return str(self.client.submit(workflow, run_input, run_id=run_id))

    def events(self, run_id: str) -> list[Any]:
        return list(self.world.list_events(run_id))

    def status_of(self, run_id: str) -> str:
        from little_dist.run_state import materialize_run_state

        events = self.events(run_id)
        return materialize_run_state(events).status if events else "unknown"

    def wait_runs(self, run_ids: Iterable[str], *, timeout: float) -> dict[str, str]:
        """Until every run ended (completed or failed); run id -> final status."""
        pending = set(run_ids)
        done: dict[str, str] = {}

        def all_ended() -> bool:
            for run_id in sorted(pending):
                status = self.status_of(run_id)
                if status in ("completed", "failed"):
                    done[run_id] = status
                    pending.discard(run_id)
            return not pending

        wait_until(
            all_ended,
            timeout=timeout,
            what=f"runs to end (pending: {sorted(pending)[:5]})",
            every=0.25,
            alive=self.check_alive,
        )
        return done

    def effect_count(self, run_id: str, step_path: str) -> int:
        value = self.redis.get(effect_key(self.prefix, run_id, step_path))
        return int(value) if value is not None else 0

    def delivery_counts(self) -> dict[str, int]:
        """``run:path:attempt`` -> how many times a worker started that task."""
        marker = f"{self.prefix}delivery:"
        return {
            key.decode()[len(marker) :]: int(self.redis.get(key) or 0)
            for key in self.redis.scan_iter(match=f"{marker}*", count=1000)
        }


@pytest.fixture(scope="module")
def script_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path: Path = build_script(think_latency=0.0).save(
        tmp_path_factory.mktemp("fleet-script") / "script.json"
    )
    return path


@pytest.fixture
def make_fleet(fleet_env: FleetEnv, script_file: Path) -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def make(**overrides: str) -> Fleet:
        assert not made, "one fleet per test"
        fleet = Fleet(fleet_env, script_file, overrides)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.close()


# -- checks shared by the tests ----------------------------------------------------------------


def run_ids(tag: str, count: int) -> list[str]:
    return [f"run_{tag}_{index:02d}" for index in range(count)]


def screening_input(run_id: str, items: Sequence[str], sleep: float) -> dict[str, Any]:
    return {"run": run_id, "items": list(items), "sleep": sleep}


def tool_paths(items: Sequence[str]) -> list[str]:
    return [p for p in screening_paths(list(items)) if p == "prepare" or p.endswith(".work")]


def assert_completed_once(fleet: Fleet, run_id: str, items: Sequence[str]) -> list[Any]:
    """The run completed with the summary and exactly one StepCompleted per step path."""
    events = fleet.events(run_id)
    types = Counter(e.type for e in events)
    assert types["RunCompleted"] == 1, (run_id, types)
    end = next(e for e in events if e.type == "RunCompleted")
    assert end.payload["output"] == SUMMARY
    completed = Counter(e.payload["stepPath"] for e in events if e.type == "StepCompleted")
    assert set(completed) == set(screening_paths(list(items))), (run_id, completed)
    assert all(count == 1 for count in completed.values()), (run_id, completed)
    sequences = [e.sequence for e in events]
    assert sequences == list(range(1, len(events) + 1))
    return events


def assert_side_effects_exact(
    fleet: Fleet, run_id: str, items: Sequence[str], events: Sequence[Any]
) -> int:
    """Every tool ran for real, and a call recorded as succeeded never ran again.

    Per tool step path: exactly one real ``harness.tool_call.succeeded`` (later attempts
    replay it from the memo); no ``harness.tool_call.started`` after it; the Redis counter
    (real executions) is at least 1 and at most the number of recorded starts, and exactly 1
    unless an attempt of that path died with its worker (``lease_expired``). Returns how many
    paths re-ran a call that was in flight when its worker died.
    """
    reruns = 0
    for path in tool_paths(items):
        mine = [e for e in events if e.payload.get("stepPath") == path]
        succeeded = [e for e in mine if e.type == "harness.tool_call.succeeded"]
        assert len(succeeded) == 1, (run_id, path, [e.type for e in mine])
        started = [e for e in mine if e.type == "harness.tool_call.started"]
        assert all(e.sequence < succeeded[0].sequence for e in started), (run_id, path)
        count = fleet.effect_count(run_id, path)
        assert 1 <= count <= len(started), (run_id, path, count, len(started))
        crashed = [
            e
            for e in mine
            if e.type == "StepFailed" and e.payload["error"].get("causeCode") == "lease_expired"
        ]
        if not crashed:
            assert count == 1, (run_id, path, count)
        reruns += count - 1
    return reruns


def start_fleet(
    fleet: Fleet,
    *,
    schedulers: Sequence[str] = ("a",),
    workers: int = 2,
    worker_args: Sequence[str] = (),
) -> None:
    for name in schedulers:
        fleet.start_scheduler(name)
    for index in range(workers):
        fleet.start_worker(f"w{index}-{fleet.prefix.split(':')[1]}", extra=worker_args)


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_worker_asked_to_stop_finishes_its_step_and_hands_the_chain_on(
    make_fleet: Callable[..., Fleet],
) -> None:
    # A budget that would let one task run the whole chain: only the shutdown stops it.
    fleet = make_fleet(LITTLE_WORKER_INLINE_SECONDS="60")
    start_fleet(fleet)
    run_id = "run_handoff_00"
    fleet.submit(slow_chain, {"run": run_id, "sleep": 0.4}, run_id)
    workers = [p for p in fleet.processes if p.name.startswith(("w0-", "w1-"))]

    def busy() -> FleetProcess | None:
        completed = [e for e in fleet.events(run_id) if e.type == "StepCompleted"]
        inside = [w for w in workers if fleet.redis.scard(running_key(fleet.prefix, w.pid))]
        return inside[0] if completed and inside else None

    wait_until(lambda: busy() is not None, timeout=60, what="a step in flight after a commit")
    victim = busy()
    assert victim is not None
    os.kill(victim.pid, signal.SIGTERM)  # Celery's warm shutdown
    assert victim.popen.wait(timeout=30) == 0
    fleet.processes.remove(victim)

    assert fleet.wait_runs([run_id], timeout=60) == {run_id: "completed"}
    events = fleet.events(run_id)
    done = [e for e in events if e.type == "StepCompleted"]
    assert [e.payload["stepPath"] for e in done] == [f"s{index}" for index in range(8)]
    assert not [e for e in events if e.type == "StepFailed"]  # nothing was abandoned
    assert [fleet.effect_count(run_id, f"s{index}") for index in range(8)] == [1] * 8
    # The victim finished the step it was in; the rest of the chain ran on the other worker.
    pids = [e.payload["output"]["pid"] for e in done]
    last = max(index for index, pid in enumerate(pids) if pid == victim.pid)
    assert last < 7 and set(pids[last + 1 :]) == {w.pid for w in workers if w is not victim}


@pytest.mark.slow
def test_twenty_runs_with_a_parallel_step_all_complete(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet()
    start_fleet(fleet)
    items = ["alpha", "beta", "gamma"]
    ids = run_ids("twenty", 20)
    for run_id in ids:
        fleet.submit(screening, screening_input(run_id, items, 0.0), run_id)

    assert fleet.wait_runs(ids, timeout=90) == dict.fromkeys(ids, "completed")
    pids: set[int] = set()
    for run_id in ids:
        events = assert_completed_once(fleet, run_id, items)
        assert assert_side_effects_exact(fleet, run_id, items, events) == 0
        pids |= {
            e.payload["output"]["pid"]
            for e in events
            if e.type == "StepCompleted" and e.payload["stepPath"] in tool_paths(items)
        }
    # Both worker processes took steps.
    workers = {p.pid for p in fleet.processes if p.name.startswith(("w0-", "w1-"))}
    assert pids == workers


def test_a_fan_out_wider_than_the_fleet_keeps_its_slots_busy_and_reports_the_rest(
    make_fleet: Callable[..., Fleet],
) -> None:
    from little_dist.fleet.worker_slots import FleetSlots
    from little_dist.world.fleet_keys import backlog_key, backlog_list, slots_key

    fleet = make_fleet()
    start_fleet(fleet)  # two workers of 4 slots: a window of 8, the workflow allows 20
    fleet.worker_hosts(2)
    queue = fleet.settings.queue_for("worker")
    slots = FleetSlots(fleet.redis, slots_key(fleet.settings.signal_stream), cache=0)
    wait_until(lambda: slots.slots(queue) == 8, timeout=10, what="8 registered slots")
    items = [f"i{index:02d}" for index in range(24)]
    run_id = "run_wide_fan"
    fleet.submit(wide_fan, {"run": run_id, "items": items, "sleep": 0.2}, run_id)

    backlog_seen: list[int] = []

    def ended() -> bool:
        backlog_seen.append(int(fleet.redis.llen(backlog_list(queue))))
        return fleet.status_of(run_id) in ("completed", "failed")

    wait_until(ended, timeout=60, what="the wide fan-out to end", every=0.02)
    events = fleet.events(run_id)
    assert fleet.status_of(run_id) == "completed"
    in_flight = peak = 0
    for event in events:
        if event.type == "ParallelBranchScheduled":
            in_flight += 1
            peak = max(peak, in_flight)
        elif event.type in ("ParallelBranchCompleted", "ParallelBranchFailed"):
            in_flight -= 1
    assert peak == 8  # the fleet's slots, not the workflow's 20
    # What the window held back was on the backlog list (maxConcurrency 20 - 8 at most),
    # and nothing is left there once every branch was scheduled.
    assert 0 < max(backlog_seen) <= 12
    wait_until(
        lambda: (
            fleet.redis.llen(backlog_list(queue)) == 0
            and not fleet.redis.hexists(backlog_key(fleet.settings.signal_stream, queue), run_id)
        ),
        timeout=10,
        what="the run's backlog to be cleared",
    )
    for item in items:
        assert fleet.effect_count(run_id, f"fan[{item}].work") == 1


@pytest.mark.slow
def test_sigkill_of_a_worker_mid_steps_repeats_no_committed_side_effect(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    start_fleet(fleet)
    items = ["a", "b", "c", "d"]
    ids = run_ids("wkill", 6)
    for run_id in ids:
        fleet.submit(screening, screening_input(run_id, items, 0.8), run_id)
    victim = next(p for p in fleet.processes if p.name.startswith("w0-"))

    def in_flight_on_victim() -> bool:
        # The victim sleeps inside at least two tool calls (counted, not yet recorded as
        # succeeded), and some steps already committed: the kill lands mid-steps.
        busy = fleet.redis.scard(running_key(fleet.prefix, victim.pid))
        done = sum(
            1 for r in ids for e in fleet.events(r) if e.type == "harness.tool_call.succeeded"
        )
        return busy >= 2 and done >= 6

    wait_until(
        in_flight_on_victim, timeout=60, what="steps in flight", every=0.05, alive=fleet.check_alive
    )
    victim.kill()
    assert victim.popen.returncode == -signal.SIGKILL
    fleet.processes.remove(victim)  # no longer part of the live fleet

    assert fleet.wait_runs(ids, timeout=90) == dict.fromkeys(ids, "completed")
    lease_expired = 0
    reruns = 0
    for run_id in ids:
        events = assert_completed_once(fleet, run_id, items)
        reruns += assert_side_effects_exact(fleet, run_id, items, events)
        lease_expired += sum(
            1
            for e in events
            if e.type == "StepFailed" and e.payload["error"].get("causeCode") == "lease_expired"
        )
    # The kill really caught attempts in flight; they were failed and retried.
    assert lease_expired >= 1, {
        run_id: [
            (e.type, e.payload.get("stepPath"), e.payload.get("attempt"))
            for e in fleet.events(run_id)
            if e.type.startswith(("Step", "harness.tool_call"))
        ]
        for run_id in ids
    }
    assert reruns <= lease_expired


@pytest.mark.slow
def test_sigkill_of_the_scheduler_then_a_restart_continues_every_run(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet()
    # Without the worker fast path every step after the first needs the scheduler.
    start_fleet(fleet, worker_args=["--no-fast-path"])
    scheduler = next(p for p in fleet.processes if p.name == f"{fleet.prefix}a")
    items = ["a", "b", "c"]
    first = run_ids("skill1", 5)
    for run_id in first:
        fleet.submit(screening, screening_input(run_id, items, 0.2), run_id)

    def some_progress() -> bool:
        return sum(1 for r in first for e in fleet.events(r) if e.type == "StepCompleted") >= 5

    wait_until(some_progress, timeout=60, what="steps to complete", alive=fleet.check_alive)
    scheduler.kill()
    fleet.processes.remove(scheduler)
    second = run_ids("skill2", 3)
    for run_id in second:
        fleet.submit(screening, screening_input(run_id, items, 0.2), run_id)
    time.sleep(1.5)
    # With the scheduler dead, the runs stall: nobody schedules what became ready.
    stalled = [r for r in first + second if fleet.status_of(r) != "completed"]
    assert stalled, "every run completed without a scheduler: the test proves nothing"

    fleet.start_scheduler("a")  # the same consumer name: it resumes its pending signals
    ids = first + second
    assert fleet.wait_runs(ids, timeout=90) == dict.fromkeys(ids, "completed")
    for run_id in ids:
        events = assert_completed_once(fleet, run_id, items)
        assert assert_side_effects_exact(fleet, run_id, items, events) == 0


@pytest.mark.slow
def test_a_task_delivered_twice_commits_once(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet()
    start_fleet(fleet)
    items = ["x"]
    run_id = "run_twice_00"
    fleet.submit(screening, screening_input(run_id, items, 1.0), run_id)
    queue = fleet.settings.queue_for("worker")
    # The client already sent prepare#1 (it advances the run on submit); send it twice more.
    for _ in range(2):
        fleet.app.send_task("little.execute_step", args=(run_id, "prepare", 1), queue=queue)

    assert fleet.wait_runs([run_id], timeout=60) == {run_id: "completed"}
    deliveries = fleet.delivery_counts()
    assert deliveries[f"{run_id}:prepare:1"] == 3  # three deliveries reached workers ...
    events = assert_completed_once(fleet, run_id, items)
    starts = [
        e for e in events if e.type == "StepAttemptStarted" and e.payload["stepPath"] == "prepare"
    ]
    assert len(starts) == 1  # ... one attempt started and committed
    assert assert_side_effects_exact(fleet, run_id, items, events) == 0

    # Delivered again after the run ended: nothing is written.
    last = events[-1].sequence
    # The branch came as a task of its own, or ran in the slot that committed the fan's
    # start (eager continuation): count the two late deliveries on top of either.
    before = deliveries.get(f"{run_id}:fan[x].work:1", 0)
    for _ in range(2):
        fleet.app.send_task("little.execute_step", args=(run_id, "fan[x].work", 1), queue=queue)
    wait_until(
        lambda: fleet.delivery_counts().get(f"{run_id}:fan[x].work:1") == before + 2,
        timeout=30,
        what="the late deliveries",
        alive=fleet.check_alive,
    )
    time.sleep(0.3)
    assert fleet.events(run_id)[-1].sequence == last
    assert fleet.effect_count(run_id, "fan[x].work") == 1


@pytest.mark.slow
def test_two_schedulers_never_dispatch_a_step_twice(make_fleet: Callable[..., Fleet]) -> None:
    # Resend only after a minute: any second delivery within the test is a double dispatch.
    fleet = make_fleet(LITTLE_DISPATCH_RESEND_AFTER="60", LITTLE_SIGNAL_CLAIM_IDLE="0.5")
    start_fleet(fleet, schedulers=("a", "b"), worker_args=["--no-fast-path"])
    items = ["a", "b", "c", "d"]
    ids = run_ids("twosched", 10)
    for run_id in ids:
        fleet.submit(screening, screening_input(run_id, items, 0.05), run_id)

    assert fleet.wait_runs(ids, timeout=90) == dict.fromkeys(ids, "completed")
    deliveries = fleet.delivery_counts()
    for run_id in ids:
        events = assert_completed_once(fleet, run_id, items)
        assert assert_side_effects_exact(fleet, run_id, items, events) == 0
        worker_paths = [p for p in screening_paths(items) if p != "fan"]
        for path in worker_paths:
            assert deliveries.get(f"{run_id}:{path}:1") == 1, (run_id, path, deliveries)
    assert all(count == 1 for count in deliveries.values()), deliveries
    # Both schedulers read the signal stream as members of the one group.
    consumers = fleet.redis.xinfo_consumers(
        fleet.settings.signal_stream, fleet.settings.signal_group
    )
    names = {c["name"].decode() if isinstance(c["name"], bytes) else c["name"] for c in consumers}
    assert {f"{fleet.prefix}a", f"{fleet.prefix}b"} <= names


def _flower_get(port: int, path: str, auth: FlowerAuth | None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None


def _flower_online_workers(port: int, auth: FlowerAuth) -> set[str]:
    """The workers Flower's metrics say are online: set from their events, not an inspect."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return set()
    return set(re.findall(r'^flower_worker_online\{worker="([^"]+)"\} 1\.0$', text, re.M))


@pytest.mark.slow
def test_flower_lists_the_workers_and_the_step_tasks(make_fleet: Callable[..., Fleet]) -> None:
    # Every step through the broker: with eager continuation a step that follows a commit in
    # the same worker slot is not a task of its own (see docs/operations.md).
    fleet = make_fleet(LITTLE_WORKER_INLINE_STEPS="0")
    port = free_port()
    auth = ("little", "flower-test-password")
    fleet.start_flower(port, f"{auth[0]}:{auth[1]}")
    start_fleet(fleet)
    # Flower keeps only what it saw: be sure it listens before the tasks run.
    wait_until(
        lambda: _flower_get(port, "/api/workers", auth)[0] == 200,
        timeout=60,
        what="Flower to answer",
        every=0.3,
        alive=fleet.check_alive,
    )
    assert _flower_get(port, "/api/workers", None)[0] == 401  # the API needs the login
    worker_hosts = set(fleet.worker_hosts(2))
    # The web server answering does not mean Flower's event receiver is bound: a receiver that
    # binds late (it retries with a growing back-off) misses the tasks. A heartbeat of each
    # worker in its metrics proves events from both reach it.
    wait_until(
        lambda: worker_hosts <= _flower_online_workers(port, auth),
        timeout=60,
        what="Flower to receive both workers' heartbeats",
        every=0.5,
        alive=fleet.check_alive,
    )

    items = ["p", "q"]
    run_id = "run_flower_00"
    fleet.submit(screening, screening_input(run_id, items, 0.0), run_id)
    assert fleet.wait_runs([run_id], timeout=60) == {run_id: "completed"}

    def workers_listed() -> bool:
        status, body = _flower_get(port, "/api/workers?refresh=1", auth)
        return status == 200 and worker_hosts <= set(body or {})

    wait_until(workers_listed, timeout=30, what="Flower to list both workers", every=0.5)

    expected = {(path, 1) for path in tool_paths(items)} | {("summarize", 1)}

    def step_tasks() -> set[tuple[str, int]]:
        status, body = _flower_get(port, "/api/tasks?limit=1000", auth)
        seen: set[tuple[str, int]] = set()
        for task in (body or {}).values() if status == 200 else ():
            if task.get("name") != "little.execute_step" or run_id not in str(task.get("args")):
                continue
            for path, attempt in expected:
                if repr(path) in str(task["args"]) and str(task["args"]).rstrip(")]").endswith(
                    f", {attempt}"
                ):
                    seen.add((path, attempt))
        return seen

    wait_until(
        lambda: step_tasks() == expected,
        timeout=30,
        what=f"Flower to list the tasks {sorted(expected)}",
        every=0.5,
    )
