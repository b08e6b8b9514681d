"""World append throughput, against raw Redis ``XADD``, plus fold throughput.

Measures appends per second to ONE run (the worst case: every writer contends for the same
log) for:

* ``MemoryWorld``: 1 writer; 8 writer threads (it lives in one process);
* ``LocalWorld`` (SQLite WAL): 1 writer; 8 writer processes;
* ``RedisS3World``: 1 writer; 8 threads; 8 processes; and 8 processes on 8 runs;
* raw redis-py ``XADD`` (auto ids, same fields) as the baseline, with the same writer counts.

Processes are ``spawn`` processes that open the world from its spec, as fleet workers do.
Threads share one world and one GIL. Then ``materialize_run_state`` folds a generated run
(the event mix from ``bench/fold.py``) and reports events folded per second.

Starts its own SeaweedFS (``weed mini``, via ``tests/s3_server.py``) unless
``LITTLE_TEST_S3_ENDPOINT`` is set; Redis from ``LITTLE_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/15``), touching only keys under a unique prefix, deleted at the end.

Run: ``.venv/bin/python bench/worlds.py [--seconds 2] [--rounds 2]`` (about 70 s in all).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from little_dist.events import EventInput  # noqa: E402
from little_dist.world.factory import open_world  # noqa: E402

RUN = "run_bench_worlds"
REDIS_URL = os.environ.get("LITTLE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _payload(writer: int, index: int) -> dict[str, Any]:
    return {"stepPath": "draft", "attemptId": "attempt_1", "writer": writer, "index": index}


# -- writers (top level: spawn imports them) --------------------------------------------------


def _world_writer(spec: str, run_id: str, writer: int, seconds: float, barrier: Any) -> int:
    world = open_world(spec)
    try:
        barrier.wait(timeout=120)
        count = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            world.append(
                run_id, EventInput(type="little.bench.write", payload=_payload(writer, count))
            )
            count += 1
        return count
    finally:
        world.close()


def _xadd_writer(url: str, stream: str, writer: int, seconds: float, barrier: Any) -> int:
    import json

    import redis

    from little_dist.world.artifacts import now_iso

    client = redis.Redis.from_url(url, decode_responses=False)
    try:
        barrier.wait(timeout=120)
        count = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            client.xadd(
                stream,
                {
                    "t": "little.bench.write",
                    "p": json.dumps(_payload(writer, count), separators=(",", ":")),
                    "r": now_iso(),
                },
            )
            count += 1
        return count
    finally:
        client.close()


def _process_main(target: Callable[..., int], args: tuple[Any, ...], results: Any) -> None:
    results.put(target(*args))


# -- drivers ----------------------------------------------------------------------------------


def in_threads(writers: int, seconds: float, body: Callable[[int, Any], int]) -> float:
    barrier = threading.Barrier(writers)
    counts = [0] * writers

    def run(writer: int) -> None:
        counts[writer] = body(writer, barrier)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def in_processes(
    writers: int,
    seconds: float,
    target: Callable[..., int],
    args: Callable[[int, Any], tuple[Any, ...]],
) -> float:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(writers)
    results = ctx.Queue()
    processes = [
        ctx.Process(target=_process_main, args=(target, args(w, barrier), results))
        for w in range(writers)
    ]
    for process in processes:
        process.start()
    total: int = sum(results.get(timeout=180) for _ in range(writers))
    for process in processes:
        process.join(timeout=30)
    if any(p.exitcode != 0 for p in processes):
        raise RuntimeError("a writer process failed")
    return total / seconds


def _spec_with(url: str, **params: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=urlencode([*parse_qsl(parts.query), *params.items()])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="Redis rows: best of")
    options = parser.parse_args()
    seconds, many = options.seconds, options.writers

    import redis

    from tests.s3_server import ACCESS_KEY, SECRET_KEY, start_weed_mini, wait_for_bucket

    prefix = f"little-bench:{uuid.uuid4().hex[:10]}:"
    raw = redis.Redis.from_url(REDIS_URL)
    raw.ping()
    scratch = Path(tempfile.mkdtemp(prefix="little-bench-"))
    server = None
    endpoint = os.environ.get("LITTLE_TEST_S3_ENDPOINT")
    bucket = os.environ.get("LITTLE_TEST_S3_BUCKET", "little-bench")
    if endpoint:
        wait_for_bucket(endpoint, bucket, create=True)
    else:
        started = time.perf_counter()
        server = start_weed_mini(scratch / "seaweedfs", bucket)
        endpoint = server.endpoint
        print(f"weed mini up in {time.perf_counter() - started:.1f}s at {endpoint}")
    os.environ.update(
        LITTLE_S3_ENDPOINT=endpoint,
        LITTLE_S3_BUCKET=bucket,
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
    )
    rows: list[tuple[str, str, float]] = []

    def record(world: str, writers: str, rate: float) -> None:
        rows.append((world, writers, rate))
        print(f"  {world:<14} {writers:<24} {rate:>10,.0f} appends/s", flush=True)

    def fresh_redis_spec() -> str:
        name = uuid.uuid4().hex[:8]
        return _spec_with(REDIS_URL, key_prefix=f"{prefix}{name}:", s3_prefix=f"bench/{name}/")

    def shared_world(spec: str) -> Callable[[int, Any], int]:
        world = open_world(spec)

        def body(writer: int, barrier: Any) -> int:
            barrier.wait()
            count = 0
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                world.append(
                    RUN, EventInput(type="little.bench.write", payload=_payload(writer, count))
                )
                count += 1
            return count

        return body

    def world_processes(spec: str, *, same_run: bool) -> float:
        return in_processes(
            many,
            seconds,
            _world_writer,
            lambda w, b: (spec, RUN if same_run else f"{RUN}_{w}", w, seconds, b),
        )

    def xadd_body(stream: str) -> Callable[[int, Any], int]:
        return lambda writer, barrier: _xadd_writer(REDIS_URL, stream, writer, seconds, barrier)

    try:
        print(f"appends to one run, {seconds:g}s each")
        record("MemoryWorld", "1 thread", in_threads(1, seconds, shared_world("memory:")))
        record("MemoryWorld", f"{many} threads", in_threads(many, seconds, shared_world("memory:")))

        local = f"local:{scratch / 'local-1'}"
        record("LocalWorld", "1 thread", in_threads(1, seconds, shared_world(local)))
        local_many = f"local:{scratch / 'local-n'}"
        open_world(local_many).close()  # create the schema before the writers race to
        record(
            "LocalWorld",
            f"{many} processes",
            in_processes(
                many, seconds, _world_writer, lambda w, b: (local_many, RUN, w, seconds, b)
            ),
        )

        # Redis rows alternate raw / world and keep the best of --rounds: the figures of one
        # machine shared with other work move a lot from one second to the next.
        redis_rows: list[tuple[str, str, Callable[[], float]]] = [
            ("raw XADD", "1 thread", lambda: in_threads(1, seconds, xadd_body(prefix + "r1"))),
            (
                "RedisS3World",
                "1 thread",
                lambda: in_threads(1, seconds, shared_world(fresh_redis_spec())),
            ),
            (
                "raw XADD",
                f"{many} threads",
                lambda: in_threads(many, seconds, xadd_body(prefix + "rt")),
            ),
            (
                "RedisS3World",
                f"{many} threads",
                lambda: in_threads(many, seconds, shared_world(fresh_redis_spec())),
            ),
            (
                "raw XADD",
                f"{many} processes",
                lambda: in_processes(
                    many,
                    seconds,
                    _xadd_writer,
                    lambda w, b: (REDIS_URL, prefix + "rp", w, seconds, b),
                ),
            ),
            (
                "RedisS3World",
                f"{many} processes",
                lambda: world_processes(fresh_redis_spec(), same_run=True),
            ),
            (
                "raw XADD",
                f"{many} processes, {many} runs",
                lambda: in_processes(
                    many,
                    seconds,
                    _xadd_writer,
                    lambda w, b: (REDIS_URL, f"{prefix}r-{w}", w, seconds, b),
                ),
            ),
            (
                "RedisS3World",
                f"{many} processes, {many} runs",
                lambda: world_processes(fresh_redis_spec(), same_run=False),
            ),
        ]
        for world, writers, measure in redis_rows:
            record(world, writers, max(measure() for _ in range(options.rounds)))

        print("\nRedisS3World / raw XADD (target >= 0.5)")
        raw_rates = {writers: rate for world, writers, rate in rows if world == "raw XADD"}
        for world, writers, rate in rows:
            if world == "RedisS3World":
                ratio = rate / raw_rates[writers]
                verdict = "ok" if ratio >= 0.5 else "BELOW TARGET"
                print(f"  {writers:<24} {ratio:5.2f}  {verdict}")

        fold_throughput()
    finally:
        for key in raw.scan_iter(match=f"{prefix}*", count=1000):
            raw.delete(key)
        raw.close()
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def fold_throughput() -> None:
    try:
        from little_dist.run_state import materialize_run_state
    except ImportError:
        print("\nfold: little_dist.run_state.materialize_run_state is missing")
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from fold import generate_events  # bench/fold.py: a realistic run's event mix
    except ImportError:
        print("\nfold: bench/fold.py (the event generator) is missing")
        return
    events = generate_events()
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        materialize_run_state(events)
        best = min(best, time.perf_counter() - started)
    rate = len(events) / best
    verdict = "ok" if rate >= 300_000 else "BELOW TARGET"
    print(f"\nfold: {len(events):,} events in {best:.3f}s = {rate:,.0f} events/s")
    print(f"  target >= 300,000 events/s: {verdict}")


if __name__ == "__main__":
    main()
