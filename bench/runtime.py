"""Engine overhead of the in-process runner on LocalWorld.

Run from the repository root::

    .venv/bin/python bench/runtime.py [--runs N] [--profile]

Two figures, each against a baseline so the numbers mean something on any machine:

(a) a 200-step chain of no-op ``tool.call`` steps run by ``run_version`` (median of N
    runs): engine overhead per step = (wall time - the tools' own time) / 200, where the
    tools' own time is measured by calling the 200 no-op tools directly in a loop
    (target < 2 ms per step);
(b) a 500-branch parallel step of no-op tools (``max_workers=8``, ``maxConcurrency`` 500):
    steps per second. The LWIR validator caps ``maxBranches`` at 100 as upstream does, so
    the document declares 100 and the run sets the engine-level cap
    (``max_branches_cap=500``) that replaces it.

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
OVERHEAD_TARGET_S = 0.002


def _tools_baseline() -> float:
    """Seconds to call the 200 no-op tools directly (validated call, as the harness does)."""
    started = time.perf_counter()
    for index in range(CHAIN_STEPS):
        noop.call({"n": index})
    return time.perf_counter() - started


def _run_chain(version: Any, capabilities: Capabilities) -> float:
    with tempfile.TemporaryDirectory() as directory:
        world = LocalWorld(directory)
        try:
            started = time.perf_counter()
            state = run_version(world, version, {}, capabilities=capabilities)
            elapsed = time.perf_counter() - started
        finally:
            world.close()
    assert state.status == "completed", state.error
    return elapsed


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    capabilities = Capabilities(tools=test_tools)

    chain = compile_lwir(chain_lwir(CHAIN_STEPS), input={})
    baseline = statistics.median(_tools_baseline() for _ in range(max(args.runs, 5)))
    walls = [_run_chain(chain, capabilities) for _ in range(args.runs)]
    wall = statistics.median(walls)
    overhead = (wall - baseline) / CHAIN_STEPS
    verdict = "ok" if overhead < OVERHEAD_TARGET_S else "OVER TARGET"
    print(
        f"(a) {CHAIN_STEPS}-step no-op chain: {wall * 1000:.0f} ms wall (median of {args.runs}); "
        f"tools alone {baseline * 1000:.2f} ms; engine overhead "
        f"{overhead * 1000:.2f} ms/step (target < {OVERHEAD_TARGET_S * 1000:.0f} ms: {verdict})"
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

    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        _run_chain(chain, capabilities)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
