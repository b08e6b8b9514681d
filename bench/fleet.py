"""The fleet against raw Celery: same broker, same number of worker processes, same pool.

Run from the repository root (Redis on 127.0.0.1:6379 by default; db 15, keys under a
unique prefix, deleted at the end)::

    .venv/bin/python bench/fleet.py [--concurrency 16] [--only a,b,c,d] [--profile PY_SPY]

It starts everything it measures and stops it at the end: ``weed mini`` (S3, from
``tests/s3_server.py``), then two raw Celery workers (``celery -A bench.fleet:raw_app
worker``) for the baselines, then one ``little scheduler`` and two ``little worker``
processes (``--app tests.fleet_app``, scripted model), each in its own process group.

Figures, each with its baseline and the ratio:

(a) a 100-step chain of no-op ``tool.call`` steps: engine ms per step (submit to the run's
    completion seen by the client, / 100) vs a raw Celery ``chain`` of 100 no-op tasks
    (``apply_async`` to the last task's signal, / 100). Target: no slower than raw Celery.
    Median of ``--chain-runs`` runs; with the worker fast path on (default: the worker that
    commits a step runs the next one in the same slot, no broker hop) and off
    (``little worker --no-fast-path``: every step waits for the scheduler and the broker).
(b) a 1000-branch parallel step of no-op tools (the LWIR declares ``maxBranches: 100``; the
    engine cap ``LITTLE_MAX_BRANCHES_CAP=1000`` lifts it): branch steps per second vs a raw
    Celery ``group`` of 1000 no-op tasks. Target: at least as fast. The step declares
    ``maxConcurrency: 100``; the two workers register 2 x ``--concurrency`` slots, so the
    engine keeps that many branches in flight (``--branch-window declared``: 100, the
    window before :mod:`little_dist.fleet.worker_slots`).
(c) 500 parallel ``ai.generate`` steps whose scripted model takes 1 s, on the two workers:
    wall time vs the ideal ``500 x 1 s / (2 x concurrency)``. Target: within 1.5x.
(d) from one step's commit to the next step's start in the chains of (a): ``recordedAt`` of
    ``StepCompleted`` of ``s{i}`` to ``StepAttemptStarted`` of ``s{i+1}``, p50 and p99
    (milliseconds; ``recordedAt`` has millisecond resolution). Target: p99 under 10 ms.

(b) also prints how many branches came through the broker (Celery's own task counters) and
the CPU time per branch of each process (the workers, the scheduler, Redis when it runs on
this machine, and this process, which submits and waits), beside the same for the raw group.
Both sides warm up first with 50 branches (the engine's registers the fan's version then).
``--fan-runs N`` measures (b) N times and reports the median; each engine fan follows a raw
group run (the raw workers stay up meanwhile, idle), so that both see the machine in the
same state: its speed drifts by tens of percent within minutes. Each measurement, raw or
engine, starts once the previous engine run's archive is due (``archive_delay`` after its
end) and the engine's processes are idle, so that archive does not land in it.

``--profile PY_SPY`` samples the engine processes with py-spy (``pip install py-spy``; give
the binary's path; ``--gil``: only the thread holding the interpreter lock, so the samples
are where the CPU goes) while the fast-path chains of (a) run and while the fan of (b) runs
(the workers and the scheduler), and prints the self and inclusive samples per function;
``--profile-dir DIR`` keeps the raw samples (collapsed stacks). ``--keep-logs DIR`` keeps
every process's log.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from celery import Celery, chain, group

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

REDIS_URL_ENV = "LITTLE_BENCH_REDIS_URL"
RAW_QUEUE_ENV = "LITTLE_BENCH_RAW_QUEUE"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
WORKERS = 2
CHAIN_STEPS = 100
GROUP_TASKS = 1000
MODEL_STEPS = 500
MODEL_LATENCY_S = 1.0

# -- the raw Celery baseline -------------------------------------------------------------------
# Configured like the engine's app where it matters for speed (late acks, prefetch 1, task
# events on, no result backend), so the comparison is engine work vs no engine work.
raw_app = Celery("little-bench-raw", broker=os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL))
raw_app.conf.update(
    task_default_queue=os.environ.get(RAW_QUEUE_ENV, "little-bench-raw"),
    task_ignore_result=True,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_send_task_events=True,
    task_send_sent_event=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
_raw_redis: Any = None


def _redis_of_app() -> Any:
    global _raw_redis
    if _raw_redis is None:
        import redis

        _raw_redis = redis.Redis.from_url(str(raw_app.conf.broker_url))
    return _raw_redis


@raw_app.task(name="bench.noop")  # type: ignore[untyped-decorator]
def raw_noop() -> None:
    """A no-op task."""


@raw_app.task(name="bench.signal")  # type: ignore[untyped-decorator]
def raw_signal(key: str) -> None:
    """The chain's last task: tell the bench it ran."""
    _redis_of_app().rpush(key, "done")


@raw_app.task(name="bench.tick")  # type: ignore[untyped-decorator]
def raw_tick(key: str, total: int) -> None:
    """A group member: count; the last one tells the bench."""
    if int(_redis_of_app().incr(key)) == total:
        _redis_of_app().rpush(key + ":done", "done")


# -- processes ----------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, size: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""


@dataclass
class Procs:
    logs: Path
    running: list[Proc] = field(default_factory=list)

    def spawn(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> Proc:
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                list(argv),
                cwd=ROOT,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: killed whole at the end
            )
        proc = Proc(name, popen, log)
        self.running.append(proc)
        return proc

    def stop(self, proc: Proc, *, grace: float = 10.0) -> None:
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait(5)
        if proc in self.running:
            self.running.remove(proc)

    def stop_all(self) -> None:
        for proc in list(reversed(self.running)):
            self.stop(proc)

    def check_alive(self) -> None:
        for proc in self.running:
            if proc.popen.poll() is not None:
                raise RuntimeError(
                    f"{proc.name} exited with {proc.popen.returncode}:\n{proc.tail()}"
                )


def wait_for_consumers(app: Celery, queue: str, count: int, procs: Procs, timeout: float) -> None:
    """Until ``count`` workers consume ``queue`` (asked over Celery's remote control)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        procs.check_alive()
        replies = app.control.inspect(timeout=1.0).active_queues() or {}
        consuming = [
            host for host, queues in replies.items() if any(q.get("name") == queue for q in queues)
        ]
        if len(consuming) >= count:
            return
        time.sleep(0.2)
    raise RuntimeError(f"fewer than {count} workers consume {queue} after {timeout}s")


# -- figures --------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def cpu_spent(pids: Mapping[str, int]) -> Iterator[dict[str, float]]:
    """CPU seconds each named process spends inside the block (filled in at its end)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    spent: dict[str, float] = {}
    try:
        yield spent
    finally:
        spent.update({name: cpu_seconds(pid) - before[name] for name, pid in pids.items()})


def wait_idle(
    pids: Mapping[str, int],
    *,
    quiet: float = 0.5,
    timeout: float = 30.0,
    not_before: float = 0.0,
) -> None:
    """Wait until ``pids`` together spent under 5% of one CPU for ``quiet`` seconds, or
    ``timeout``; never before the monotonic time ``not_before``. The scheduler archives a
    run ``archive_delay`` seconds after its end: the caller passes that moment, so the
    archive does not land in the next measurement, raw or engine."""
    if not_before > time.monotonic():
        time.sleep(not_before - time.monotonic())
    deadline = time.monotonic() + timeout
    before = sum(cpu_seconds(pid) for pid in pids.values())
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = sum(cpu_seconds(pid) for pid in pids.values())
        if now - before < 0.05 * quiet:
            return
        before = now


def cpu_line(spent: Mapping[str, float], per: int) -> str:
    """``name X.XX ms`` per unit of work, and the total."""
    parts = [f"{name} {1000 * seconds / per:.2f}" for name, seconds in spent.items()]
    return ", ".join(parts) + f"; total {1000 * sum(spent.values()) / per:.2f} ms"


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)

    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)


# -- raw Celery ---------------------------------------------------------------------------------


def redis_pid(redis: Any) -> int:
    """The Redis server's pid when it runs on this machine (its CPU is counted), else 0."""
    pid = int(redis.info("server").get("process_id", 0))
    return pid if Path(f"/proc/{pid}/stat").exists() else 0


def raw_chain_seconds(redis: Any, prefix: str, length: int) -> float:
    key = f"{prefix}raw:chain:{uuid.uuid4().hex[:8]}"
    tasks = [raw_noop.si() for _ in range(length - 1)] + [raw_signal.si(key)]
    started = time.perf_counter()
    chain(*tasks).apply_async()
    if redis.blpop(key, timeout=120) is None:
        raise RuntimeError("the raw chain did not finish in 120 s")
    elapsed = time.perf_counter() - started
    redis.delete(key)
    return elapsed


def raw_group_seconds(redis: Any, prefix: str, size: int) -> float:
    key = f"{prefix}raw:group:{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    group(raw_tick.si(key, size) for _ in range(size)).apply_async()
    if redis.blpop(key + ":done", timeout=300) is None:
        raise RuntimeError("the raw group did not finish in 300 s")
    elapsed = time.perf_counter() - started
    redis.delete(key, key + ":done")
    return elapsed


@dataclass
class RawFigures:
    chain_s: list[float]
    groups: list[tuple[float, dict[str, float]]]  # (seconds, CPU seconds by process) per run
    # The raw workers, kept running until (b) is measured: its raw groups alternate with
    # the engine's fans, so both see the machine in the same state (its speed drifts).
    workers: list[Proc] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def group_s(self) -> float:
        return statistics.median(seconds for seconds, _ in self.groups)


def measure_raw(
    procs: Procs,
    base_env: Mapping[str, str],
    prefix: str,
    args: argparse.Namespace,
    redis: Any,
) -> RawFigures:
    queue = f"{prefix}raw"
    env = {**base_env, RAW_QUEUE_ENV: queue}
    raw_app.conf.task_default_queue = queue
    workers = [
        procs.spawn(
            f"raw-worker-{index}",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.fleet:raw_app",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                str(args.concurrency),
                "--prefetch-multiplier",
                "1",
                "-Q",
                queue,
                "-n",
                f"raw{index}-{prefix}@%h",
                "--loglevel",
                "WARNING",
                "-E",
            ],
            env,
        )
        for index in range(WORKERS)
    ]
    try:
        wait_for_consumers(raw_app, queue, WORKERS, procs, timeout=60)
        raw_chain_seconds(redis, prefix, 10)  # warm-up
        chains = [raw_chain_seconds(redis, prefix, CHAIN_STEPS) for _ in range(args.chain_runs)]
        raw_group_seconds(redis, prefix, 50)  # warm-up
    except BaseException:
        for worker in workers:
            procs.stop(worker)
        raise
    pids = {proc.name: proc.popen.pid for proc in workers} | {
        "redis": redis_pid(redis),
        "bench": os.getpid(),
    }
    return RawFigures(chains, [], workers, pids)


def measure_raw_group(raw: RawFigures, redis: Any, prefix: str) -> None:
    """One raw group of (b), with its CPU, added to ``raw.groups``."""
    with cpu_spent(raw.pids) as group_cpu:
        group_s = raw_group_seconds(redis, prefix, GROUP_TASKS)
    raw.groups.append((group_s, group_cpu))


def stop_raw(procs: Procs, raw: RawFigures) -> None:
    for worker in raw.workers:
        procs.stop(worker)
    raw.workers = []


# -- the engine ----------------------------------------------------------------------------


def engine_env(
    base_env: Mapping[str, str],
    prefix: str,
    redis_url: str,
    s3: Any,
    script: Path,
    args: argparse.Namespace,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    from tests.fleet_app import FX_PREFIX_ENV, FX_REDIS_ENV

    env = {
        **base_env,
        "LITTLE_REDIS_URL": redis_url,
        "LITTLE_BROKER_URL": redis_url,
        "LITTLE_WORLD": f"{redis_url}?key_prefix={prefix}world:&s3_prefix={prefix}",
        "LITTLE_S3_ENDPOINT": s3.endpoint,
        "LITTLE_S3_BUCKET": s3.bucket,
        "AWS_ACCESS_KEY_ID": "little-test",
        "AWS_SECRET_ACCESS_KEY": "little-test-secret",
        "LITTLE_APP": "tests.fleet_app",
        "LITTLE_SIGNAL_STREAM": f"{prefix}signals",
        "LITTLE_SIGNAL_GROUP": f"{prefix}schedulers",
        "LITTLE_MAX_BRANCHES_CAP": str(GROUP_TASKS),
        "LITTLE_WORKER_POOL": "threads",
        "LITTLE_WORKER_CONCURRENCY": str(args.concurrency),
        "LITTLE_SCRIPTED_MODEL": str(script),
        "LITTLE_NETWORK_GUARD": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        FX_REDIS_ENV: redis_url,
        FX_PREFIX_ENV: prefix,
    }
    for role in ("planner", "orchestrator", "worker", "fixer"):
        env[f"LITTLE_QUEUE_{role.upper()}"] = f"{prefix}{role}"
    env.update(extra or {})
    return env


@dataclass
class Engine:
    procs: Procs
    env: dict[str, str]
    scheduler: Proc
    workers: list[Proc]
    client: Any
    world: Any
    #: Seconds after a run's end at which the scheduler archives it.
    archive_delay: float

    def run(self, workflow: Any, run_input: Any, *, timeout: float) -> tuple[str, float, Any]:
        """Submit one run, wait for its end; (run id, wall seconds, final state)."""
        run_id = f"run_bench_{uuid.uuid4().hex[:16]}"
        started = time.perf_counter()
        self.client.submit(workflow, run_input, run_id=run_id)
        state = self.client.wait(run_id, timeout=timeout)
        elapsed = time.perf_counter() - started
        if getattr(state, "status", None) != "completed":
            self.procs.check_alive()
            error = getattr(state, "error", None)
            raise RuntimeError(f"{run_id} ended {getattr(state, 'status', state)!r}: {error}")
        return run_id, elapsed, state


def start_engine(
    procs: Procs, env: dict[str, str], args: argparse.Namespace, *, fast_path: bool = True
) -> Engine:
    from little_dist.fleet.client import Client
    from little_dist.settings import load_settings
    from little_dist.world.factory import world_from_settings

    settings = load_settings(env)
    little = [sys.executable, "-m", "little_dist.cli"]
    scheduler = procs.spawn("scheduler", [*little, "scheduler", "--name", "bench-sched"], env)
    workers = [
        procs.spawn(
            f"worker-{index}",
            [
                *little,
                "worker",
                "--roles",
                "worker,fixer",
                "--app",
                "tests.fleet_app",
                "--pool",
                "threads",
                "--concurrency",
                str(args.concurrency),
                "--hostname",
                f"bench{index}-{uuid.uuid4().hex[:8]}@localhost",
                # As the raw workers: a log line per task costs both the same, so neither
                # writes one (``--worker-arg=--loglevel=INFO`` brings the engine's back).
                "--loglevel",
                "WARNING",
                *([] if fast_path else ["--no-fast-path"]),
                *args.worker_arg,
            ],
            env,
        )
        for index in range(WORKERS)
    ]
    probe = Celery("little-bench-probe", broker=settings.broker_url)
    try:
        wait_for_consumers(probe, settings.queue_for("worker"), WORKERS, procs, timeout=90)
    finally:
        probe.close()
    world = world_from_settings(settings)
    client = Client(settings, world=world)
    return Engine(procs, env, scheduler, workers, client, world, settings.archive_delay)


def stop_engine(engine: Engine) -> None:
    for proc in [*engine.workers, engine.scheduler]:
        engine.procs.stop(proc, grace=15)
    with contextlib.suppress(Exception):
        engine.client.close()
    with contextlib.suppress(Exception):
        engine.world.close()


def commit_to_start_ms(events: Sequence[Any], length: int) -> list[float]:
    """(d): per chain link, StepCompleted(s{i}).recordedAt -> StepAttemptStarted(s{i+1})."""
    completed: dict[str, float] = {}
    started: dict[str, float] = {}
    for event in events:
        path = event.payload.get("stepPath")
        if event.type == "StepCompleted":
            completed[path] = parse_time(event.recorded_at)
        elif event.type == "StepAttemptStarted" and path not in started:
            started[path] = parse_time(event.recorded_at)
    return [
        (started[f"s{i + 1}"] - completed[f"s{i}"]) * 1000
        for i in range(length - 1)
        if f"s{i}" in completed and f"s{i + 1}" in started
    ]


def measure_chains(engine: Engine, runs: int) -> tuple[list[float], list[float]]:
    """(a) and (d): wall seconds per chain run, and every commit-to-next-start latency."""
    from tests import fleet_app

    # Warm-up: the first run pays for imports in the workers and the version registration.
    engine.run(fleet_app.chain100, {}, timeout=300)
    seconds: list[float] = []
    latencies: list[float] = []
    for _ in range(runs):
        run_id, elapsed, _ = engine.run(fleet_app.chain100, {}, timeout=300)
        seconds.append(elapsed)
        latencies += commit_to_start_ms(engine.world.list_events(run_id), CHAIN_STEPS)
    return seconds, latencies


def tasks_run(engine: Engine) -> int:
    """How many tasks the engine's workers have run so far (Celery's own counters)."""
    from celery import Celery

    probe = Celery("little-bench-probe", broker=engine.env["LITTLE_BROKER_URL"])
    try:
        stats = probe.control.inspect(timeout=2.0).stats() or {}
    finally:
        probe.close()
    return sum(sum((reply.get("total") or {}).values()) for reply in stats.values())


def measure_fan(engine: Engine, ran: list[tuple[str, float]]) -> float:
    """(b): wall seconds of one 1000-branch run (its id, and the wall clock when its end
    was seen, are added to ``ran``)."""
    from tests import fleet_app

    keys = [f"k{index}" for index in range(GROUP_TASKS)]
    run_id, seconds, _ = engine.run(fleet_app.fan1000, {"keys": keys}, timeout=600)
    ran.append((run_id, time.time()))
    return seconds


#: A pause between two of a fan's events longer than this is reported (milliseconds).
STALL_MS = 500


def say_stall(report: Report, engine: Engine, run_id: str, seen_at: float) -> None:
    """Report the longest pause between two consecutive events of ``run_id`` if it is over
    :data:`STALL_MS`, and the client's if it saw the run's end (at ``seen_at``) that much
    after it was recorded: where a slow run waited (read after its CPU was counted)."""
    events = engine.world.list_events(run_id)
    if events:
        late_ms = (seen_at - parse_time(events[-1].recorded_at)) * 1000
        if late_ms > STALL_MS:
            report.say(
                f"    (b) {run_id}: the client saw its end {late_ms / 1000:.2f} s after it "
                "was recorded"
            )
    gaps = [
        ((parse_time(after.recorded_at) - parse_time(before.recorded_at)) * 1000, before, after)
        for before, after in itertools.pairwise(events)
    ]
    if not gaps:
        return
    gap, before, after = max(gaps, key=lambda item: item[0])
    if gap > STALL_MS:

        def where(event: Any) -> str:
            path = event.payload.get("stepPath") or event.payload.get("branchPath") or ""
            return f"#{event.sequence} {event.type} {path}".rstrip()

        report.say(
            f"    (b) {run_id} paused {gap / 1000:.2f} s between {where(before)} and "
            f"{where(after)} (of {len(events)} events)"
        )


def warm_fan(engine: Engine) -> None:
    """The fan's warm-up, as the raw group's: a 50-branch run of the same workflow.

    It registers the fan's version (the first write of an object to the S3 server can
    take a few hundred ms there) and loads what the workers load on a workflow's first run.
    """
    from tests import fleet_app

    keys = [f"k{index}" for index in range(50)]
    engine.run(fleet_app.fan1000, {"keys": keys}, timeout=300)


def measure_model(engine: Engine) -> float:
    """(c): wall seconds of one run of 500 one-second model steps."""
    from tests import fleet_app

    keys = [f"m{index}" for index in range(MODEL_STEPS)]
    return engine.run(fleet_app.model500, {"keys": keys}, timeout=900)[1]


def say_chain(report: Report, label: str, seconds: list[float], raw: RawFigures | None) -> None:
    engine_ms = statistics.median(seconds) / CHAIN_STEPS
    if raw is None:
        report.say(f"(a) {label}: engine {ms(engine_ms)}/step (no raw baseline measured)")
        return
    raw_ms = statistics.median(raw.chain_s) / CHAIN_STEPS
    verdict = "OK" if engine_ms <= raw_ms else "MISSED"
    report.say(
        f"(a) {label}: chain of {CHAIN_STEPS}: engine {ms(engine_ms)}/step, raw Celery chain "
        f"{ms(raw_ms)}/step, engine/raw = {engine_ms / raw_ms:.2f} (target <= 1.00) {verdict}"
    )


def say_fan(
    report: Report, fans: Sequence[tuple[float, dict[str, float], int]], raw: RawFigures
) -> None:
    """(b): every run's rate, then the median's, its CPU and the raw group's."""
    raw_rate = GROUP_TASKS / raw.group_s
    if len(fans) > 1:
        rates = ", ".join(f"{GROUP_TASKS / seconds:.0f}" for seconds, _, _ in fans)
        raw_rates = ", ".join(f"{GROUP_TASKS / seconds:.0f}" for seconds, _ in raw.groups)
        report.say(f"(b) runs: engine {rates} steps/s; raw Celery {raw_rates} tasks/s")
    fan_s, fan_cpu, via_broker = sorted(fans, key=lambda fan: fan[0])[len(fans) // 2]
    raw_cpu = sorted(raw.groups, key=lambda group: group[0])[len(raw.groups) // 2][1]
    engine_rate = GROUP_TASKS / fan_s
    report.say(
        f"(b) {GROUP_TASKS} branches: engine {engine_rate:.0f} steps/s ({fan_s:.2f} s), raw "
        f"Celery group {raw_rate:.0f} tasks/s ({raw.group_s:.2f} s), engine/raw = "
        f"{engine_rate / raw_rate:.3g} (target >= 1.00) "
        f"{'OK' if engine_rate >= raw_rate else 'MISSED'}"
    )
    report.say(
        f"    {via_broker} of the {GROUP_TASKS} branches came through the broker (the others "
        "ran in the slot that freed them)"
    )
    report.say(f"    CPU per branch: {cpu_line(fan_cpu, GROUP_TASKS)}")
    report.say(f"    CPU per raw task: {cpu_line(raw_cpu, GROUP_TASKS)}")


def say_latency(report: Report, label: str, latencies: list[float]) -> None:
    if not latencies:
        report.say(f"(d) {label}: no commit -> start pairs found")
        return
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    report.say(
        f"(d) {label}: commit -> next start over {len(latencies)} links: p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms, max {max(latencies):.1f} ms (target p99 < 10 ms) "
        f"{'OK' if p99 < 10 else 'MISSED'}"
    )


def attempt(report: Report, label: str, measure: Callable[[], Any]) -> Any:
    """Run one measurement; a failure is reported and the bench goes on."""
    try:
        return measure()
    except Exception as error:
        report.say(f"{label}: FAILED: {error}")
        return None


# -- main -----------------------------------------------------------------------------------


def delete_prefix(redis: Any, prefix: str, queues: Sequence[str]) -> None:
    keys = list(redis.scan_iter(match=f"{prefix}*", count=1000))
    for queue in queues:
        keys += [f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}", queue]
    for start in range(0, len(keys), 500):
        redis.delete(*keys[start : start + 500])


@contextlib.contextmanager
def sampled(
    py_spy: str | None, procs: Sequence[Proc], out_dir: Path, tag: str = "a"
) -> Iterator[list[Path]]:
    """py-spy ``record --format raw`` on ``procs`` for the duration (nothing if no py-spy)."""
    files: list[Path] = []
    spies: list[subprocess.Popen[bytes]] = []
    for proc in procs if py_spy else ():
        out = out_dir / f"{proc.name}.{tag}.py-spy.txt"
        files.append(out)
        spies.append(
            subprocess.Popen(
                [
                    str(py_spy),
                    "record",
                    "--pid",
                    str(proc.popen.pid),
                    "--format",
                    "raw",
                    "--rate",
                    "200",
                    "--nonblocking",
                    "--gil",
                    "-o",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        yield files
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            with contextlib.suppress(subprocess.TimeoutExpired):
                spy.wait(60)


def print_profile(
    files: Sequence[Path], report: Report, top: int = 25, during: str = "(a)"
) -> None:
    """Self and inclusive samples per function over py-spy's collapsed stacks."""
    from collections import Counter

    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = stack.split(";")
            total += int(count)
            own[frames[-1]] += int(count)
            for frame in set(frames):
                inclusive[frame] += int(count)
    if not total:
        report.say("profile: no samples (is --profile the path of a working py-spy?)")
        return
    report.say(
        f"profile of the engine processes during {during}, {total} busy-thread samples; self:"
    )
    for frame, samples in own.most_common(top):
        report.say(f"  {100 * samples / total:5.1f}%  {frame}")
    report.say("inclusive (little_dist, redis, kombu and celery events frames):")
    wanted = ("little_dist/", "redis/client.py", "kombu/messaging.py", "celery/events/")
    shown = [(f, c) for f, c in inclusive.most_common() if any(w in f for w in wanted)]
    for frame, samples in shown[:top]:
        report.say(f"  {100 * samples / total:5.1f}%  {frame}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/fleet.py", description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=16, help="slots per worker process")
    parser.add_argument("--chain-runs", type=int, default=3, help="chains measured per mode")
    parser.add_argument("--fan-runs", type=int, default=1, help="1000-branch runs measured")
    parser.add_argument("--only", default="a,b,c,d", help="figures to measure, e.g. a,d")
    parser.add_argument(
        "--profile",
        metavar="PY_SPY",
        default=None,
        help="path of a py-spy binary: sample the engine workers during (a) and print a profile",
    )
    parser.add_argument(
        "--profile-dir",
        type=Path,
        default=None,
        help="keep py-spy's raw samples (collapsed stacks, one file per process) in this folder",
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        default=None,
        metavar="DIR",
        help="copy every process's log into this folder at the end",
    )
    parser.add_argument(
        "--fast-path-off",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure (a) and (d) with 'little worker --no-fast-path' (default: on)",
    )
    parser.add_argument(
        "--branch-window",
        choices=("fleet", "declared"),
        default="fleet",
        help="LITTLE_BRANCH_WINDOW of the engine's processes (default: fleet)",
    )
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for 'little worker' (repeatable), e.g. --worker-arg=--app=mod",
    )
    args = parser.parse_args(argv)
    only = {item.strip() for item in args.only.split(",") if item.strip()}
    redis_url = os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL)

    import redis as redis_lib

    from tests.fleet_app import build_script
    from tests.s3_server import start_weed_mini

    prefix = f"little-bench-{uuid.uuid4().hex[:10]}:"
    redis = redis_lib.Redis.from_url(redis_url)
    redis.ping()
    report = Report()
    base_env = {
        key: value for key, value in os.environ.items() if not key.startswith("LITTLE_")
    } | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        REDIS_URL_ENV: redis_url,
    }
    queues = [
        f"{prefix}raw",
        *(f"{prefix}{r}" for r in ("planner", "orchestrator", "worker", "fixer")),
    ]
    with tempfile.TemporaryDirectory(prefix="little-bench-") as tmp:
        tmp_path = Path(tmp)
        procs = Procs(tmp_path)
        s3 = None
        try:
            s3 = start_weed_mini(tmp_path / "seaweedfs", "little-bench")
            script = build_script(think_latency=MODEL_LATENCY_S).save(tmp_path / "script.json")
            report.say(
                f"fleet benchmark: {WORKERS} worker processes x {args.concurrency} threads, "
                f"Redis {redis_url}, {os.cpu_count()} CPUs"
            )
            raw: RawFigures | None = None
            if only & {"a", "b"}:
                raw = measure_raw(procs, base_env, prefix, args, redis)
                report.say(
                    f"raw Celery: chain {ms(statistics.median(raw.chain_s) / CHAIN_STEPS)}/task"
                )
                if "b" not in only:
                    stop_raw(procs, raw)

            env = engine_env(
                base_env,
                prefix,
                redis_url,
                s3,
                script,
                args,
                {"LITTLE_BRANCH_WINDOW": args.branch_window},
            )
            engine = start_engine(procs, env, args)
            try:
                if only & {"a", "d"}:
                    profiled = [*engine.workers, engine.scheduler]
                    with sampled(args.profile, profiled, args.profile_dir or tmp_path) as samples:
                        chains = attempt(
                            report, "(a)/(d)", lambda: measure_chains(engine, args.chain_runs)
                        )
                    if args.profile:
                        print_profile(samples, report)
                    if chains is not None:
                        if "a" in only:
                            say_chain(report, "fast path on", chains[0], raw)
                        if "d" in only:
                            say_latency(report, "fast path on", chains[1])
                if "b" in only:
                    sampled_procs = [*engine.workers, engine.scheduler]
                    pids = {proc.name: proc.popen.pid for proc in sampled_procs} | {
                        "redis": redis_pid(redis),
                        "bench": os.getpid(),
                    }
                    fans: list[tuple[float, dict[str, float], int]] = []
                    with sampled(
                        args.profile, sampled_procs, args.profile_dir or tmp_path, "b"
                    ) as samples:
                        engine_pids = {p.name: p.popen.pid for p in sampled_procs}
                        attempt(report, "(b) warm-up", lambda: warm_fan(engine))
                        # The last run's archive is due this long after its end (the
                        # warm-up's, then each fan's).
                        archived_by = time.monotonic() + engine.archive_delay + 0.5
                        for _ in range(args.fan_runs):
                            if raw is not None:  # the raw group first, then the engine's fan
                                wait_idle(engine_pids, not_before=archived_by)
                                measure_raw_group(raw, redis, prefix)
                            tasks_before = tasks_run(engine)
                            wait_idle(engine_pids, not_before=archived_by)
                            ran: list[tuple[str, float]] = []
                            with cpu_spent(pids) as fan_cpu:
                                fan_s = attempt(
                                    report, "(b)", lambda ran=ran: measure_fan(engine, ran)
                                )
                            if ran:
                                say_stall(report, engine, *ran[0])
                            archived_by = time.monotonic() + engine.archive_delay + 0.5
                            if fan_s is None:
                                break
                            fans.append((fan_s, fan_cpu, tasks_run(engine) - tasks_before))
                    if raw is not None:
                        stop_raw(procs, raw)
                    if args.profile:
                        print_profile(samples, report, during="(b)")
                    if fans and raw is not None and raw.groups:
                        say_fan(report, fans, raw)
                if "c" in only:
                    model_s = attempt(report, "(c)", lambda: measure_model(engine))
                    if model_s is not None:
                        slots = WORKERS * args.concurrency
                        ideal = MODEL_STEPS * MODEL_LATENCY_S / slots
                        ratio = model_s / ideal
                        report.say(
                            f"(c) {MODEL_STEPS} model steps of {MODEL_LATENCY_S:.0f} s on {slots} "
                            f"slots: {model_s:.2f} s, ideal {ideal:.2f} s, wall/ideal = "
                            f"{ratio:.2f} (target <= 1.50) {'OK' if ratio <= 1.5 else 'MISSED'}"
                        )
            finally:
                stop_engine(engine)

            if only & {"a", "d"} and args.fast_path_off:
                engine = start_engine(procs, env, args, fast_path=False)
                try:
                    chains = attempt(
                        report,
                        "(a)/(d) fast path off",
                        lambda: measure_chains(engine, args.chain_runs),
                    )
                finally:
                    stop_engine(engine)
                if chains is not None:
                    if "a" in only:
                        say_chain(report, "fast path off", chains[0], raw)
                    if "d" in only:
                        say_latency(report, "fast path off", chains[1])
        finally:
            procs.stop_all()
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in tmp_path.glob("*.log"):
                    shutil.copy(log, args.keep_logs / log.name)
            if s3 is not None:
                s3.stop()
            delete_prefix(redis, prefix, queues)
            redis.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
