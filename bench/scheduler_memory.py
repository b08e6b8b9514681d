"""The scheduler's memory over 2,000 completed runs: it must stay flat.

Run from the repository root (Redis on 127.0.0.1:6379 by default; db 15, keys under a
unique prefix, deleted at the end)::

    .venv/bin/python bench/scheduler_memory.py [--in-flight 20] [--warm-up 100]

It starts ``weed mini`` (S3, from ``tests/s3_server.py``) and two ``little worker``
processes (``--no-fast-path``: every commit signals the scheduler, which folds, decides and
dispatches every step, so the scheduler does all of a run's looking), and runs a real
:class:`~little_dist.fleet.scheduler.Scheduler` in this process, with the real Celery app,
world and signal stream: the loop of ``little scheduler``, one turn at a time. Runs of a
two-step chain of no-op tools (each with its own input, so each registers its own compiled
version, as planned runs do) are submitted ``--in-flight`` at a time by a child process, the
way a client submits them (``submit_run`` without an app: the append signals the
scheduler), so that what the submitting side keeps is not counted here; finished runs are
archived to S3 by the scheduler's archive threads, as in the fleet.

Printed at 500, 1000, 1500 and 2000 completed runs (after a warm-up of ``--warm-up`` runs
and a full collection): the process's resident set (``VmRSS``), the same once glibc's
``malloc_trim(0)`` has handed the free pages of the C heap back (what the allocator keeps
after peaks is not in use: without the trim, RSS creeps up with the fragmentation of the
archive threads' heaps), and the memory Python has allocated (``tracemalloc``), each as a
ratio to its figure at 500 runs, and the scheduler's cached runs and versions. The process
holds nothing else that grows with runs (this side keeps only the ids in flight), so growth
here is the scheduler's. ``--top N``: the N source
lines whose allocations grew most between the first and the last figure.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
MARKS = (500, 1000, 1500, 2000)
WORKERS = 2


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def workflow() -> dict[str, Any]:
    from tests import workflows_for_tests as wf

    return wf.chain_lwir(2)


def spawn_workers(env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for index in range(WORKERS):
        log = (logs / f"worker-{index}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "little_dist.cli",
                    "worker",
                    "--roles",
                    "worker",
                    "--app",
                    "tests.workflows_for_tests",
                    "--concurrency",
                    "4",
                    "--no-fast-path",
                    "--loglevel",
                    "warning",
                    "--hostname",
                    f"memory{index}-{uuid.uuid4().hex[:8]}@localhost",
                ],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def submitter(env: dict[str, str], tickets: Any) -> None:
    """The child process that submits a run per ticket ``(run id, n)`` until ``None``."""
    from little_dist.fleet.client import submit_run
    from little_dist.settings import load_settings
    from little_dist.world.factory import world_from_settings

    settings = load_settings(env)
    world = world_from_settings(settings)
    doc = workflow()
    try:
        while (ticket := tickets.get()) is not None:
            run_id, n = ticket
            submit_run(world, doc, {"n": n}, run_id=run_id, settings=settings)
    finally:
        world.close()


Figure = tuple[int, int, int, int, int, int]


def measure(args: argparse.Namespace, env: dict[str, str]) -> list[Figure]:
    """(completed runs, RSS, RSS trimmed, traced bytes, cached runs, cached versions) at
    each mark."""
    import multiprocessing

    import redis

    from little_dist.fleet.app import make_celery_app
    from little_dist.fleet.queue import CeleryQueue
    from little_dist.fleet.scheduler import Scheduler
    from little_dist.settings import load_settings
    from little_dist.world.factory import fleet_world_spec, redis_url_of, world_from_settings

    context = multiprocessing.get_context("spawn")
    tickets = context.Queue()
    child = context.Process(target=submitter, args=(env, tickets), daemon=True)
    child.start()
    settings = load_settings(env)
    world = world_from_settings(settings)
    client = redis.Redis.from_url(
        redis_url_of(fleet_world_spec(settings)), decode_responses=True, socket_timeout=15
    )
    app = make_celery_app(settings)
    scheduler = Scheduler(
        settings,
        world=world,
        queue=CeleryQueue(app, settings),
        redis_client=client,
        name="memory-bench",
        block_ms=20,
    )
    scheduler.start()
    total = args.warm_up + max(MARKS)
    in_flight: list[str] = []
    submitted = completed = 0
    figures: list[Figure] = []
    marks = list(MARKS)
    snapshots: list[Any] = []
    started = time.monotonic()
    try:
        while completed < total:
            while len(in_flight) < args.in_flight and submitted < total:
                run_id = f"run_mem_{submitted:06d}_{uuid.uuid4().hex[:8]}"
                tickets.put((run_id, submitted))
                in_flight.append(run_id)
                submitted += 1
            scheduler.run_once(block_ms=20)
            finished = scheduler.finished  # (the runs the scheduler saw end)
            still = [run_id for run_id in in_flight if run_id not in finished]
            completed += len(in_flight) - len(still)
            in_flight = still
            if completed >= args.warm_up and not tracemalloc.is_tracing():
                gc.collect()
                tracemalloc.start()
            if time.monotonic() - started > args.timeout:
                raise RuntimeError(f"gave up after {args.timeout:g} s at {completed} runs")
            done = completed - args.warm_up
            if not marks or done < marks[0]:
                continue
            marks.pop(0)
            gc.collect()
            rss = rss_bytes()
            _malloc_trim()
            if args.top:
                snapshots.append(tracemalloc.take_snapshot())
            traced = tracemalloc.get_traced_memory()[0]
            figures.append(
                (done, rss, rss_bytes(), traced, len(scheduler.runs), _size(scheduler.versions))
            )
            print(
                f"  {done} runs ({time.monotonic() - started:.0f} s): RSS {rss / 2**20:.1f} "
                f"MiB ({figures[-1][2] / 2**20:.1f} MiB trimmed), traced "
                f"{traced / 2**20:.2f} MiB",
                flush=True,
            )
    finally:
        tickets.put(None)
        child.join(timeout=30)
        scheduler.close()
        app.close()
        client.close()
        world.close()
    if len(snapshots) > 1:
        print(f"grew most between {figures[0][0]} and {figures[-1][0]} runs:")
        for stat in snapshots[-1].compare_to(snapshots[0], "lineno")[: args.top]:
            print(f"  {stat}")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/scheduler_memory.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--in-flight", type=int, default=20, help="runs submitted at a time")
    parser.add_argument("--warm-up", type=int, default=100, help="runs before measuring")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up after seconds")
    parser.add_argument("--top", type=int, default=0, help="print the N lines that grew most")
    args = parser.parse_args(argv)

    from tests.s3_server import start_weed_mini

    redis_url = os.environ.get("LITTLE_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    prefix = f"little-mem-{uuid.uuid4().hex[:10]}:"
    with tempfile.TemporaryDirectory(prefix="little-mem-") as tmp:
        s3 = start_weed_mini(Path(tmp) / "seaweedfs", "little-mem")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("LITTLE_", "AWS_"))},
            "LITTLE_REDIS_URL": redis_url,
            "LITTLE_BROKER_URL": redis_url,
            "LITTLE_WORLD": f"{redis_url}?key_prefix={prefix}world:&s3_prefix={prefix}",
            "LITTLE_S3_ENDPOINT": s3.endpoint,
            "LITTLE_S3_BUCKET": s3.bucket,
            "AWS_ACCESS_KEY_ID": "little-test",
            "AWS_SECRET_ACCESS_KEY": "little-test-secret",
            "LITTLE_SIGNAL_STREAM": f"{prefix}signals",
            "LITTLE_SIGNAL_GROUP": f"{prefix}schedulers",
            "LITTLE_ARCHIVE_DELAY": "0.2",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": str(ROOT),
        }
        for role in ("planner", "orchestrator", "worker", "fixer"):
            env[f"LITTLE_QUEUE_{role.upper()}"] = f"{prefix}{role}"
        workers = spawn_workers(env, Path(tmp))
        try:
            print(
                f"scheduler memory: {args.warm_up} warm-up runs, then {max(MARKS)} runs of a "
                f"2-step chain, {args.in_flight} in flight, {WORKERS} workers (no fast path)"
            )
            figures = measure(args, env)
        finally:
            stop(workers)
            s3.stop()
            _delete_prefix(redis_url, prefix)
    first = figures[0]
    print("runs   RSS ratio   trimmed RSS ratio   traced ratio   cached runs   cached versions")
    for done, rss, trimmed, traced, runs, versions in figures:
        print(
            f"{done:>5}   {rss / first[1]:>9.3f}   {trimmed / first[2]:>17.3f}   "
            f"{traced / first[3]:>12.3f}   {runs:>11}   {versions:>15}"
        )
    return 0


def _malloc_trim() -> None:
    """Hand the C heap's free pages back to the system (glibc), so that RSS counts what is
    in use rather than what the allocator kept after the peaks."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _size(cache: Any) -> int:
    try:
        return len(cache)
    except TypeError:  # (a version cache without a length: the one before it had one)
        return len(cache._versions)


def _delete_prefix(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
        for role in ("planner", "orchestrator", "worker", "fixer"):
            client.delete(f"{prefix}{role}", f"_kombu.binding.{prefix}{role}")
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
