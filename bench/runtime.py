"""Engine overhead of the in-process runner on LocalWorld.

Run from the repository root::

    .venv/bin/python bench/runtime.py [--runs N] [--profile]

Two figures, each against a baseline so the numbers mean something on any machine:

(a) a 200-step chain of no-op ``tool.call`` steps run by ``run_version`` (median of N
    runs): engine overhead per step = (wall time - the tools' own time) / 200, where the
    tools' own time is measured by calling the 200 no-op tools directly in a loop
    (target <= 1 ms per step, issue 38's; it was 2 ms before that issue);
(b) a 500-branch parallel step of no-op tools (``max_workers=8``, ``maxConcurrency`` 500):
    steps per second. The LWIR validator caps ``maxBranches`` at 100 as upstream does, so
    the document declares 100 and the run sets the engine-level cap
    (``max_branches_cap=500``) that replaces it.

(a) also prints the process CPU time per step, which load on the machine disturbs less than
the wall time, and runs the chain again with the Prometheus metrics on, then with metrics
and traces on (an exporter that drops the spans), interleaved with the runs without: the
cost per step of :mod:`little_dist.observability` (off, it must cost nothing: the figures
"off" are the plain (a)).

``--redis URL`` (e.g. ``redis://127.0.0.1:6379/15``) adds (c): the fleet worker's execute
path on a :class:`~little_dist.world.redis_s3.RedisS3World` (``weed mini`` is started for
S3; keys go under a unique prefix, deleted at the end), without Celery: per step of a
50-step chain, read the log and fold it, then ``execute_step_attempt`` with that state (as
``little.execute_step`` does), then decide and append the next StepScheduled (as the fast
path does). Prints the median milliseconds of the worker's read+fold, of
``execute_step_attempt`` itself and of the advance.

``--profile`` prints the top of a cProfile of one chain run (cumulative time).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from little_dist.compiler import compile_lwir  # noqa: E402
from little_dist.local_runner import run_version  # noqa: E402
from little_dist.runtime import Capabilities  # noqa: E402
from little_dist.world.local import LocalWorld  # noqa: E402
from tests.workflows_for_tests import chain_lwir, fan_out_lwir, noop  # noqa: E402
from tests.workflows_for_tests import tools as test_tools  # noqa: E402

CHAIN_STEPS = 200
BRANCHES = 500
OVERHEAD_TARGET_S = 0.001


def _tools_baseline() -> float:
    """Seconds to call the 200 no-op tools directly (validated call, as the harness does)."""
    started = time.perf_counter()
    for index in range(CHAIN_STEPS):
        noop.call({"n": index})
    return time.perf_counter() - started


def _run_chain(version: Any, capabilities: Capabilities) -> float:
    return _run_chain_timed(version, capabilities)[0]


def _run_chain_timed(version: Any, capabilities: Capabilities) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one chain run."""
    with tempfile.TemporaryDirectory() as directory:
        world = LocalWorld(directory)
        try:
            started, cpu = time.perf_counter(), time.process_time()
            state = run_version(world, version, {}, capabilities=capabilities)
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        finally:
            world.close()
    assert state.status == "completed", state.error
    return elapsed, cpu


def _run_fan_out(version: Any, run_input: Any, capabilities: Capabilities) -> float:
    with tempfile.TemporaryDirectory() as directory:
        world = LocalWorld(directory)
        try:
            started = time.perf_counter()
            state = run_version(
                world,
                version,
                run_input,
                capabilities=capabilities,
                max_workers=8,
                max_branches_cap=BRANCHES,
            )
            elapsed = time.perf_counter() - started
        finally:
            world.close()
    assert state.status == "completed", state.error
    assert len(state.output) == BRANCHES
    return elapsed


def _observability_costs(
    version: Any, capabilities: Capabilities, runs: int
) -> tuple[float, float, float]:
    """Median wall seconds of the chain with metrics and traces off, metrics on, both on."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from little_dist.observability import (
        disable_metrics,
        disable_tracing,
        enable_metrics,
        enable_tracing,
    )

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    def configure(mode: int) -> None:
        disable_tracing()
        disable_metrics()
        if mode >= 1:
            enable_metrics("bench", serve=False)
        if mode == 2:
            enable_tracing(Dropped())

    walls: tuple[list[float], list[float], list[float]] = ([], [], [])
    for index in range(runs * 3):
        mode = (index + index // 3) % 3  # (each mode in every position: no order bias)
        configure(mode)
        walls[mode].append(_run_chain(version, capabilities))
    configure(0)
    off, metrics_on, both_on = (statistics.median(w) for w in walls)
    return off, metrics_on, both_on


FLEET_STEPS = 50


def _fleet_chain(redis_url: str, capabilities: Capabilities) -> tuple[float, ...]:
    """(c): median ms per step of the worker's read+fold, its execute_step_attempt, and the
    advance (read+fold+decide+append)."""
    import uuid

    import redis

    from little_dist.events import EventInput
    from little_dist.run_state import RunStateBuilder
    from little_dist.runtime import execute_step_attempt, hydrate_events
    from little_dist.scheduling import RunContext, decide
    from little_dist.world.redis_s3 import RedisS3World
    from tests.s3_server import s3_client, start_weed_mini

    version = compile_lwir(chain_lwir(FLEET_STEPS), input={})
    run_id = "run_bench_" + uuid.uuid4().hex[:12]
    prefix = f"little-bench:{uuid.uuid4().hex[:12]}:"
    client = redis.Redis.from_url(redis_url)
    with tempfile.TemporaryDirectory() as directory:
        server = start_weed_mini(Path(directory), "little-bench")
        world = RedisS3World(client, s3_client(server.endpoint), server.bucket, key_prefix=prefix)
        try:
            world.register_version(version.id, version.to_json())
            world.append_batch(
                run_id,
                [
                    EventInput(
                        type="RunStarted",
                        occurrence_id="run-start",
                        payload={"workflowVersionId": version.id, "input": {}},
                    )
                ],
            )
            context = RunContext(version=version, run_input={}, run_id=run_id)
            reads: list[float] = []
            executes: list[float] = []
            advances: list[float] = []
            while True:
                started = time.perf_counter()
                events = world.list_events(run_id)
                builder = RunStateBuilder(run_id)
                builder.apply_all(hydrate_events(world, events))
                decision = decide(context, builder.snapshot())
                world.append_batch(run_id, decision.events)
                advances.append(time.perf_counter() - started)
                if decision.done:
                    break
                for dispatch in decision.dispatch:
                    started = time.perf_counter()
                    events = world.list_events(run_id)  # what little.execute_step reads
                    builder = RunStateBuilder(run_id)
                    builder.apply_all(hydrate_events(world, events))
                    reads.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    execute_step_attempt(
                        world,
                        dispatch,
                        version=version,
                        capabilities=capabilities,
                        state=builder.snapshot(),
                        context=context,
                        prior_events=events,
                    )
                    executes.append(time.perf_counter() - started)
        finally:
            world.close()
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                client.delete(key)
            client.close()
            server.stop()
    assert len(executes) == FLEET_STEPS, len(executes)
    return tuple(statistics.median(times) * 1000 for times in (reads, executes, advances))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--redis", metavar="URL", help="also measure (c) on RedisS3World")
    args = parser.parse_args()
    capabilities = Capabilities(tools=test_tools)

    chain = compile_lwir(chain_lwir(CHAIN_STEPS), input={})
    baseline = statistics.median(_tools_baseline() for _ in range(max(args.runs, 5)))
    timed = [_run_chain_timed(chain, capabilities) for _ in range(args.runs)]
    wall = statistics.median(t[0] for t in timed)
    cpu = statistics.median(t[1] for t in timed)
    overhead = (wall - baseline) / CHAIN_STEPS
    verdict = "ok" if overhead <= OVERHEAD_TARGET_S else "OVER TARGET"
    print(
        f"(a) {CHAIN_STEPS}-step no-op chain: {wall * 1000:.0f} ms wall (median of {args.runs}); "
        f"tools alone {baseline * 1000:.2f} ms; engine overhead "
        f"{overhead * 1000:.2f} ms/step (target <= {OVERHEAD_TARGET_S * 1000:.0f} ms: {verdict}); "
        f"process CPU {cpu / CHAIN_STEPS * 1000:.2f} ms/step"
    )

    run_input = {"keys": [f"b{index:03d}" for index in range(BRANCHES)], "sleep": 0}
    doc = fan_out_lwir(tool_name="noop", max_branches=100, max_concurrency=100)
    # The branch count is capped by the engine setting; concurrency by maxConcurrency (100,
    # the validator's ceiling) and the pool's 8 workers.
    fan = compile_lwir(doc, input=run_input)
    fan_walls = [_run_fan_out(fan, run_input, capabilities) for _ in range(args.runs)]
    fan_wall = statistics.median(fan_walls)
    print(
        f"(b) {BRANCHES}-branch parallel step: {fan_wall * 1000:.0f} ms wall "
        f"(median of {args.runs}), {BRANCHES / fan_wall:.0f} branch steps/s"
    )

    if args.redis:
        read_ms, execute_ms, advance_ms = _fleet_chain(args.redis, capabilities)
        print(
            f"(c) RedisS3World, {FLEET_STEPS}-step chain, fleet worker path without Celery "
            f"(medians per step): read+fold the log {read_ms:.2f} ms, execute_step_attempt "
            f"{execute_ms:.2f} ms, advance (read+fold+decide+append) {advance_ms:.2f} ms"
        )

    off, metrics_on, both_on = _observability_costs(chain, capabilities, args.runs)
    print(
        f"(a) with observability (medians of {args.runs}, interleaved): off "
        f"{off * 1000:.0f} ms, metrics on {metrics_on * 1000:.0f} ms "
        f"({(metrics_on - off) / CHAIN_STEPS * 1e6:+.0f} us/step), metrics and traces on "
        f"{both_on * 1000:.0f} ms ({(both_on - off) / CHAIN_STEPS * 1e6:+.0f} us/step)"
    )

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        _run_chain(chain, capabilities)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
