"""1,000 sub-runs started by one parent on the fleet, against the same 1,000 runs submitted
directly by a client.

Run from the repository root (Redis on 127.0.0.1:6379 by default, db 15 unless
``LITTLE_BENCH_REDIS_URL`` says otherwise; keys under a unique prefix, deleted at the end)::

    .venv/bin/python bench/subruns.py [--children 1000] [--concurrency 16]

It starts what it measures, as ``bench/fleet.py`` does (``weed mini``, one ``little
scheduler``, two ``little worker`` processes with ``--app tests.subrun_fleet_app``), then:

Each measurement starts once the engine is idle and the previous one's runs are archived
(their archives, ``archive_delay`` after their ends, would land in it), and once both paths
are warm: 20 direct runs, then small parents (scenario ``one``) until each worker process
has run a parent's attempt. A process's first model call imports and loads what litellm
needs (about a second of CPU, once per process), which is no cost of a sub-run.

* **direct**: ``Client.submit_many`` of N runs of ``sub.kid`` (two ``tool.call`` steps, no
  sleep), waited for to their ends: runs per second from the submit to the last end;
* **sub-runs**: one run of ``sub.boss`` whose scripted model calls the ``sub.kid_bulk`` tool
  (``sub.kid`` under workflow budgets of 1,000 at once) N times in one turn (scenario
  ``bench``, N = 1000): the parent's attempt starts the N
  children on the fleet and suspends; the scheduler records each child's end in the
  parent's log; the resumed attempt takes the N results and the model answers. Sub-runs
  per second from the parent's submit to its completion (and, beside it, to the last
  child's end).

The figure the issue asks for: sub-runs/s >= 0.8 x direct runs/s, without deadlock (the
parent holds no slot while its children run).
"""

from __future__ import annotations

import argparse
import contextlib
import os
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

from bench.fleet import (  # noqa: E402 - after the path set-up above
    DEFAULT_REDIS_URL,
    REDIS_URL_ENV,
    Procs,
    delete_prefix,
    engine_env,
    start_engine,
    stop_engine,
    wait_idle,
)

_ENDS = ("RunCompleted", "RunFailed")


def _ended_at(world: Any, run_id: str) -> float | None:
    """When ``run_id`` ended (its end event's ``recordedAt``, epoch seconds), or ``None``."""
    from datetime import datetime

    last = world.last_sequence(run_id)
    tail = world.list_events(run_id, after=max(0, last - 1)) if last else []
    if not tail or tail[-1].type not in _ENDS:
        return None
    if tail[-1].type != "RunCompleted":
        raise RuntimeError(f"{run_id} failed: {tail[-1].payload.get('error')}")
    stamp = tail[-1].recorded_at.replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def _wait_all(world: Any, runs: Sequence[str], timeout: float) -> float:
    """Until every run ended; the latest end (epoch seconds)."""
    deadline = time.monotonic() + timeout
    pending = list(runs)
    latest = 0.0
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} runs did not end in {timeout:g}s")
        still = []
        for run_id in pending:
            ended = _ended_at(world, run_id)
            if ended is None:
                still.append(run_id)
            else:
                latest = max(latest, ended)
        pending = still
        if pending:
            time.sleep(0.2)
    return latest


def settle(engine: Any) -> None:
    """Until the last run's archive (``archive_delay`` after its end) is done and the
    engine's processes are idle, so that one measurement's archives do not land in the
    next (as ``bench/fleet.py`` waits between its own)."""
    pids = {proc.name: proc.popen.pid for proc in [*engine.workers, engine.scheduler]}
    wait_idle(pids, not_before=time.monotonic() + engine.archive_delay + 0.5, timeout=60)


def measure_direct(engine: Any, children: int) -> float:
    from tests.subrun_fleet_app import kid

    inputs = [{"n": n, "sleep": 0.0} for n in range(1, children + 1)]
    started = time.time()
    runs = engine.client.submit_many(kid, inputs)
    last = _wait_all(engine.world, runs, timeout=600)
    return last - started


def warm_sub_runs(engine: Any, parents: int = 4, rounds: int = 5) -> int:
    """Small parents (one child each), a few at once, until every worker process ran an
    attempt of one (made a model call; see the module docstring); how many ran."""
    from tests.subrun_fleet_app import boss

    pids = {str(proc.popen.pid) for proc in engine.workers}
    warmed: set[str] = set()
    ran = 0
    for _ in range(rounds):
        runs = [engine.client.submit(boss, {"scenario": "one"}) for _ in range(parents)]
        for run_id in runs:
            state = engine.client.wait(run_id, timeout=120)
            if state.status != "completed":
                raise RuntimeError(f"warm-up parent {run_id} ended {state.status}: {state.error}")
            for event in engine.world.list_events(run_id):
                if event.type == "StepAttemptStarted":
                    # workerId: "worker:<host>:<pid>:..." (see little_dist.fleet.worker)
                    warmed.update(set(str(event.payload.get("workerId", "")).split(":")) & pids)
        ran += parents
        if warmed == pids:
            break
    return ran


def measure_sub_runs(engine: Any, children: int) -> tuple[float, float]:
    """(seconds to the parent's completion, seconds to the last child's end)."""
    from little_dist.subruns import sub_run_starts
    from tests.subrun_fleet_app import boss

    started = time.time()
    parent = engine.client.submit(boss, {"scenario": "bench"})
    state = engine.client.wait(parent, timeout=900)
    done = time.time()
    if state.status != "completed":
        raise RuntimeError(f"parent {parent} ended {state.status}: {state.error}")
    events = engine.world.list_events(parent)
    kids = [start.child_run_id for start in sub_run_starts(events)]
    if len(kids) != children:
        failed = [e.payload for e in events if e.type == "harness.tool_call.failed"][:1]
        raise RuntimeError(
            f"parent {parent} started {len(kids)} children, not {children}: {failed}"
        )
    last_child = _wait_all(engine.world, kids, timeout=60)
    print(f"  parent's log, seconds from its submit: {_milestones(events, started)}", flush=True)
    return done - started, last_child - started


def _milestones(events: Sequence[Any], started: float) -> str:
    """When the parent suspended, heard of its last child's end, resumed and completed."""
    from datetime import datetime

    def at(event: Any) -> float:
        stamp = event.recorded_at.replace("Z", "+00:00")
        return datetime.fromisoformat(stamp).timestamp() - started

    marks: dict[str, float] = {}
    for event in events:
        if event.type == "little.step.suspended":
            marks["suspended"] = at(event)
        elif event.type == "little.subrun.ended":
            marks["last child noticed"] = at(event)
        elif event.type == "StepAttemptStarted" and event.payload.get("attempt") == 2:
            marks["resumed"] = at(event)
        elif event.type == "StepCompleted":
            marks["completed"] = at(event)
    return ", ".join(f"{name} {value:.2f}" for name, value in marks.items())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/subruns.py", description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=16, help="slots per worker process")
    parser.add_argument("--children", type=int, default=1000, choices=(1000,))
    args = parser.parse_args(argv)
    args.worker_arg = ["--app", "tests.subrun_fleet_app"]
    redis_url = os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL)

    import redis as redis_lib

    from tests.fleet_app import build_script
    from tests.s3_server import start_weed_mini
    from tests.subrun_fleet_app import SCRIPT_ENV

    prefix = f"little-bench-{uuid.uuid4().hex[:10]}:"
    redis = redis_lib.Redis.from_url(redis_url)
    redis.ping()
    base_env = {
        key: value for key, value in os.environ.items() if not key.startswith("LITTLE_")
    } | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        REDIS_URL_ENV: redis_url,
    }
    queues = [f"{prefix}{r}" for r in ("planner", "orchestrator", "worker", "fixer")]
    with tempfile.TemporaryDirectory(prefix="little-bench-") as tmp:
        tmp_path = Path(tmp)
        procs = Procs(tmp_path)
        s3 = None
        try:
            s3 = start_weed_mini(tmp_path / "seaweedfs", "little-bench")
            script = build_script().save(tmp_path / "script.json")
            env = engine_env(
                base_env,
                prefix,
                redis_url,
                s3,
                script,
                args,
                # No script file: the app installs the boss's own (a later one would shadow it).
                {
                    SCRIPT_ENV: "1",
                    "LITTLE_APP": "tests.subrun_fleet_app",
                    "LITTLE_SCRIPTED_MODEL": "",
                },
            )
            engine = start_engine(procs, env, args)
            try:
                print(
                    f"sub-run benchmark: 2 worker processes x {args.concurrency} threads, "
                    f"{args.children} children of 2 tool.call steps, Redis {redis_url}, "
                    f"{os.cpu_count()} CPUs",
                    flush=True,
                )
                measure_direct(engine, 20)  # warm-up: versions registered, caches filled
                settle(engine)
                direct_s = measure_direct(engine, args.children)
                direct_rate = args.children / direct_s
                print(
                    f"direct: {args.children} runs by Client.submit_many in {direct_s:.2f} s: "
                    f"{direct_rate:.0f} runs/s",
                    flush=True,
                )
                warmed = warm_sub_runs(engine)
                print(f"  warm-up of the sub-run path: {warmed} small parents", flush=True)
                settle(engine)
                parent_s, children_s = measure_sub_runs(engine, args.children)
                rate = args.children / parent_s
                ratio = rate / direct_rate
                verdict = "OK" if ratio >= 0.8 else "MISSED"
                print(
                    f"sub-runs: one parent, {args.children} children in {parent_s:.2f} s to the "
                    f"parent's completion ({children_s:.2f} s to the last child's end): "
                    f"{rate:.0f} sub-runs/s, {ratio:.2f}x direct (target >= 0.80) {verdict}",
                    flush=True,
                )
            finally:
                stop_engine(engine)
        finally:
            procs.stop_all()
            if s3 is not None:
                with contextlib.suppress(Exception):
                    s3.stop()
            delete_prefix(redis, prefix, queues)
    return 0


if __name__ == "__main__":
    sys.exit(main())
