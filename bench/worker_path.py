"""The fleet worker's path for one fan-out branch, without Celery: CPU per branch.

Run from the repository root (Redis on 127.0.0.1:6379 by default; db 15, keys under a
unique prefix; SeaweedFS from ``tests/s3_server.py``, for the workflow version)::

    .venv/bin/python bench/worker_path.py [--runtimes 2] [--branches 1000] [--runs 3]

``--runtimes`` worker runtimes (:class:`~little_dist.fleet.tasks.WorkerRuntime`, each with
its own world connection, run cache and trackers, as separate worker processes have) take
turns at one queue of ``little.execute_step`` deliveries in this thread, one attempt per
delivery (``LITTLE_WORKER_INLINE_STEPS=1``), so with two of them each reads and decides on
the other's events, as two fleet workers do. The fast path runs as in the fleet: commit,
look, keep the refill. What the runtimes send goes to a list, not a broker.

Prints the median CPU time per branch of ``--runs`` runs of the ``fleet.fan1000`` workflow
(1000 no-op tool branches, 100 at a time) on the Redis world, the same on the in-memory
world as the baseline measured in the same run, and the ratio.

This process does all of the work in one thread, so under ``valgrind --tool=callgrind``
(``--runs 1 --no-baseline``) its instruction count repeats from run to run, where fleet
throughput on a shared machine varies by tens of percent: compare two commits' totals
(``Collected``). Start-up and the 100-branch warm-up are about 4.5 G instructions of the
total; a 1000-branch run on two runtimes is about 9 G.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"

from little_dist.fleet.queue import MemoryQueue  # noqa: E402 (after the sys.path line)


def fan_cpu_seconds(
    runtimes: Sequence[Any], outbox: MemoryQueue, settings: Any, branches: int
) -> float:
    """CPU seconds of one fan-out run delivered to ``runtimes`` in turn."""
    from little_dist.fleet.client import submit_run
    from little_dist.fleet.dispatch import advance_run
    from little_dist.fleet.run_tracker import RunTracker
    from tests import fleet_app

    world = runtimes[0].world
    run_id = f"run_path_{uuid.uuid4().hex[:16]}"
    started = time.process_time()
    submit_run(
        world,
        fleet_app.fan1000,
        {"keys": [f"k{index}" for index in range(branches)]},
        run_id=run_id,
        registry=runtimes[0].registry,
    )
    tracker = RunTracker(world, run_id, max_branches_cap=settings.max_branches_cap)
    advance_run(world, outbox, settings, tracker)
    turn = 0
    while tasks := outbox.take():
        for _, (run, path, attempt), _ in tasks:
            runtimes[turn % len(runtimes)].execute(run, path, attempt, "execute_step")
            turn += 1
    spent = time.process_time() - started
    last = world.list_events(run_id)[-1].type
    if last != "RunCompleted":
        raise RuntimeError(f"{run_id} ended with {last}")
    return spent


def measure(world_factory: Any, settings: Any, args: argparse.Namespace) -> list[float]:
    from little_dist.fleet.app_registry import load_registry
    from little_dist.fleet.interpreter_tuning import tune_gc_for_service
    from little_dist.fleet.tasks import WorkerRuntime

    outbox = MemoryQueue(sized=False)
    runtimes = []
    for index in range(args.runtimes):
        runtime = WorkerRuntime(
            settings,
            world=world_factory(),
            registry=load_registry("tests.fleet_app"),
            roles=("worker", "fixer"),
        )
        runtime.name = f"worker:path-{index}"
        runtime.queue = outbox
        runtimes.append(runtime)
    try:
        fan_cpu_seconds(runtimes, outbox, settings, 100)  # warm-up
        # As `little worker` does after its start-up (without it, the collector's passes over
        # the two runtimes' heaps are a third of the figure, which the fleet does not pay).
        tune_gc_for_service()
        return [
            fan_cpu_seconds(runtimes, outbox, settings, args.branches) / args.branches
            for _ in range(args.runs)
        ]
    finally:
        for runtime in runtimes:
            runtime.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/worker_path.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runtimes", type=int, default=2, help="worker runtimes taking turns")
    parser.add_argument("--branches", type=int, default=1000, help="branches per run (<= 1000)")
    parser.add_argument("--runs", type=int, default=3, help="measured runs per world")
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure the in-memory world (default: on)",
    )
    args = parser.parse_args(argv)
    if not 1 <= args.branches <= 1000 or args.runtimes < 1 or args.runs < 1:
        parser.error("--branches must be 1..1000, --runtimes and --runs at least 1")

    from little_dist.settings import load_settings
    from little_dist.world.factory import world_from_settings
    from little_dist.world.in_process import MemoryWorld
    from tests.s3_server import start_weed_mini

    redis_url = os.environ.get("LITTLE_BENCH_REDIS_URL", DEFAULT_REDIS_URL)
    prefix = f"little-path-{uuid.uuid4().hex[:10]}:"
    with tempfile.TemporaryDirectory(prefix="little-path-") as tmp:
        s3 = start_weed_mini(Path(tmp) / "seaweedfs", "little-path")
        try:
            settings = load_settings(
                {
                    "LITTLE_WORLD": f"{redis_url}?key_prefix={prefix}world:&s3_prefix={prefix}",
                    "LITTLE_REDIS_URL": redis_url,
                    "LITTLE_S3_ENDPOINT": s3.endpoint,
                    "LITTLE_S3_BUCKET": s3.bucket,
                    "AWS_ACCESS_KEY_ID": "little-test",
                    "AWS_SECRET_ACCESS_KEY": "little-test-secret",
                    "LITTLE_APP": "tests.fleet_app",
                    "LITTLE_MAX_BRANCHES_CAP": "1000",
                    "LITTLE_WORKER_INLINE_STEPS": "1",
                    "LITTLE_WORKER_INLINE_SECONDS": "1000",
                }
            )
            print(
                f"worker path: {args.runtimes} runtime(s) taking turns, {args.branches} "
                f"branches, {args.runs} run(s) per world"
            )
            redis_ms = (
                statistics.median(measure(lambda: world_from_settings(settings), settings, args))
                * 1000
            )
            print(f"Redis world: {redis_ms:.3f} ms CPU per branch")
            if args.baseline:
                memory = MemoryWorld()  # one store for every runtime
                memory_ms = statistics.median(measure(lambda: memory, settings, args)) * 1000
                print(
                    f"in-memory world (baseline): {memory_ms:.3f} ms CPU per branch; "
                    f"Redis/in-memory = {redis_ms / memory_ms:.2f}"
                )
        finally:
            s3.stop()
            _delete_prefix(redis_url, prefix)
    return 0


def _delete_prefix(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
