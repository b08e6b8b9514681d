"""Small deterministic workloads for counting instructions (``scripts/perf_guard``).

Run from the repository root::

    .venv/bin/python bench/instructions.py chain 40    # an in-process chain of 40 no-op steps
    .venv/bin/python bench/instructions.py worker 20   # the fleet worker's path, 20 branches

``chain N``: ``run_version`` on a :class:`~little_dist.world.local.LocalWorld` runs a chain of
N no-op ``tool.call`` steps (the path of ``bench/runtime.py`` figure (a)). ``worker N``: one
fleet :class:`~little_dist.fleet.tasks.WorkerRuntime` on an in-memory world takes the
``little.execute_step`` deliveries of a fan-out of N no-op branches in this thread, as
``bench/worker_path.py`` does (no Redis, no S3, no Celery). Each first runs the same
workload once at a small size (imports and caches warmed), then the measured one.

Meant to run under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0``: one thread does
the work, lease heartbeats are made too rare to run, ids are fixed, so the instruction count
repeats from run to run; the difference between two sizes is the cost of the steps
(start-up and warm-up cancel out). Prints nothing but errors.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Long enough that no heartbeat (a third of it) comes due during a run under valgrind.
_LEASE_TTL = 3600.0


def chain(steps: int) -> None:
    """An in-process chain of ``steps`` no-op tool steps, after a 3-step warm-up."""
    from little_dist.compiler import compile_lwir
    from little_dist.local_runner import run_version
    from little_dist.runtime import Capabilities
    from little_dist.world.local import LocalWorld
    from tests.workflows_for_tests import chain_lwir, tools

    capabilities = Capabilities(tools=tools)
    for name, length in (("warm", 3), ("measured", steps)):
        version = compile_lwir(chain_lwir(length), input={})
        with tempfile.TemporaryDirectory(prefix="little-instr-") as directory:
            world = LocalWorld(directory)
            try:
                state = run_version(
                    world,
                    version,
                    {},
                    run_id=f"run_instructions_{name}",
                    capabilities=capabilities,
                    lease_ttl=_LEASE_TTL,
                    archive=False,
                )
            finally:
                world.close()
        if state.status != "completed":
            raise SystemExit(f"chain of {length} ended {state.status}: {state.error}")


def worker(branches: int) -> None:
    """The fleet worker's path for a fan-out of ``branches`` no-op branches, after 3."""
    from little_dist.fleet.app_registry import load_registry
    from little_dist.fleet.client import submit_run
    from little_dist.fleet.dispatch import advance_run
    from little_dist.fleet.queue import MemoryQueue
    from little_dist.fleet.run_tracker import RunTracker
    from little_dist.fleet.tasks import WorkerRuntime
    from little_dist.settings import load_settings
    from little_dist.world.in_process import MemoryWorld
    from tests import fleet_app

    settings = load_settings(
        {
            "LITTLE_WORLD": "memory",
            "LITTLE_APP": "tests.fleet_app",
            "LITTLE_MAX_BRANCHES_CAP": "1000",
            "LITTLE_WORKER_INLINE_STEPS": "1",
            "LITTLE_WORKER_INLINE_SECONDS": "1000",
            "LITTLE_LEASE_TTL": str(int(_LEASE_TTL)),
        }
    )
    world = MemoryWorld()
    outbox = MemoryQueue(sized=False)
    runtime = WorkerRuntime(
        settings,
        world=world,
        registry=load_registry("tests.fleet_app"),
        roles=("worker", "fixer"),
    )
    runtime.name = "worker:instructions"
    runtime.queue = outbox
    try:
        for name, count in (("warm", 3), ("measured", branches)):
            run_id = f"run_instructions_{name}"
            submit_run(
                world,
                fleet_app.fan1000,
                {"keys": [f"k{index}" for index in range(count)]},
                run_id=run_id,
                registry=runtime.registry,
            )
            tracker = RunTracker(world, run_id, max_branches_cap=settings.max_branches_cap)
            advance_run(world, outbox, settings, tracker)
            while tasks := outbox.take():
                for _, (run, path, attempt), _ in tasks:
                    runtime.execute(run, path, attempt, "execute_step")
            last = world.list_events(run_id)[-1].type
            if last != "RunCompleted":
                raise SystemExit(f"fan-out of {count} ended with {last}")
    finally:
        runtime.close()


WORKLOADS = {"chain": chain, "worker": worker}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in WORKLOADS or not argv[1].isdigit():
        print("usage: bench/instructions.py chain|worker N", file=sys.stderr)
        return 2
    WORKLOADS[argv[0]](int(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
