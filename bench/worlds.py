"""World append throughput, against raw Redis ``XADD``, plus fold throughput.

Measures appends per second to ONE run (the worst case: every writer contends for the same
log) for:

* ``MemoryWorld``: 1 writer; 8 writer threads (it lives in one process);
* ``LocalWorld`` (SQLite WAL): 1 writer; 8 writer processes;
* ``RedisS3World``: 1 writer; 8 threads; 8 processes; and 8 processes on 8 runs, each
  against raw redis-py ``XADD`` (auto ids, same fields) with the same writers.

Processes are ``spawn`` processes that open the world from its spec, as fleet workers do.
Threads share one world (and the raw rows one redis-py client) and one GIL.

The Redis figures come from one shared, busy machine, where the load moves a lot from one
second to the next; so each Redis configuration runs several short rounds on the same
writers (processes stay up across rounds, holding both a world and a raw client). A round
measures world, raw, raw, world (the next round raw, world, world, raw), so load drift
within a round weighs on both sides alike; the ratio is taken within each round and the
median over rounds is reported. The load average is printed at start and end.

Then small-artifact ``put_artifact`` + ``get_artifact`` pairs per second on ``RedisS3World``
with its Redis hot tier (the default ``hot_artifact_limit``) against the same world with
``hot_artifact_limit=0`` (S3 only: two S3 puts and two S3 gets a pair), interleaved the same
way, 1 thread and 8 threads; then how long ``archive_run`` takes to move a 1000-branch run's
hot artifacts to S3 (off the run's critical path: the scheduler archives in the background).

Then ``materialize_run_state`` folds a generated run (the event mix from ``bench/fold.py``)
and reports events folded per second.

Then the price of durability: ``RedisS3World`` appends to one run on two private
``redis-server`` processes started here (free ports, their data in a temporary directory),
one with AOF ``appendfsync everysec`` (the default: a host crash loses up to about a second
of writes) and one with ``appendfsync always`` (an append is on disk before it is
acknowledged), 1 thread and N threads, interleaved in rounds as above; the ratio
always / everysec is printed. The figure depends on the disk's fsync latency: measure on
the disk Redis will use.

Starts its own SeaweedFS (``weed mini``, via ``tests/s3_server.py``) unless
``LITTLE_TEST_S3_ENDPOINT`` is set; Redis from ``LITTLE_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/15``), touching only keys under a unique prefix, deleted at the end.

Run: ``.venv/bin/python bench/worlds.py [--seconds 0.25] [--rounds 21]`` (about 3 minutes;
``--artifacts-only`` runs just the artifact rows, ``--fsync-only`` just the AOF rows).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from little_dist.events import EventInput  # noqa: E402
from little_dist.world.artifacts import now_iso  # noqa: E402
from little_dist.world.factory import open_world  # noqa: E402

RUN = "run_bench_worlds"
REDIS_URL = os.environ.get("LITTLE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
WORLD, RAW = "world", "raw"
HOT, S3_ONLY = "hot", "s3"
WARM_UP_SECONDS = 0.3


def _payload(writer: int, index: int) -> dict[str, Any]:
    return {"stepPath": "draft", "attemptId": "attempt_1", "writer": writer, "index": index}


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cpus)"


# -- write loops (top level: spawn imports them) -----------------------------------------------


def _world_loop(world: Any, run_id: str, writer: int, seconds: float) -> int:
    count = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        world.append(run_id, EventInput(type="little.bench.write", payload=_payload(writer, count)))
        count += 1
    return count


def _raw_loop(client: Any, stream: str, writer: int, seconds: float) -> int:
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


def _pair_worker(
    spec: str, run_id: str, stream: str, writer: int, commands: Any, results: Any, barrier: Any
) -> None:
    """A writer process: holds a world and a raw client, writes with either on command."""
    import redis

    world = open_world(spec)
    client = redis.Redis.from_url(REDIS_URL, decode_responses=False)
    try:
        while (command := commands.get()) is not None:
            kind, seconds = command
            barrier.wait(timeout=120)
            if kind == WORLD:
                results.put(_world_loop(world, run_id, writer, seconds))
            else:
                results.put(_raw_loop(client, stream, writer, seconds))
    finally:
        world.close()
        client.close()


def _single_world_writer(spec: str, run_id: str, writer: int, seconds: float, barrier: Any) -> int:
    world = open_world(spec)
    try:
        barrier.wait(timeout=120)
        return _world_loop(world, run_id, writer, seconds)
    finally:
        world.close()


def _process_main(target: Callable[..., int], args: tuple[Any, ...], results: Any) -> None:
    results.put(target(*args))


# -- drivers ----------------------------------------------------------------------------------


def in_threads(writers: int, seconds: float, body: Callable[[int], int]) -> float:
    """Appends per second of ``writers`` threads each running ``body(writer)``."""
    barrier = threading.Barrier(writers)
    counts = [0] * writers

    def run(writer: int) -> None:
        barrier.wait()
        counts[writer] = body(writer)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def in_processes(
    writers: int, seconds: float, target: Callable[..., int], args: Callable[[int, Any], tuple]
) -> float:
    """Appends per second of ``writers`` fresh spawn processes (one measurement)."""
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


class ThreadPair:
    """``writers`` threads over one shared world and one shared raw client."""

    def __init__(self, writers: int, spec: str, stream: str) -> None:
        import redis

        self._writers = writers
        self._world = open_world(spec)
        self._client = redis.Redis.from_url(REDIS_URL, decode_responses=False)
        self._stream = stream

    def measure(self, kind: str, seconds: float) -> float:
        if kind == WORLD:
            return in_threads(
                self._writers, seconds, lambda w: _world_loop(self._world, RUN, w, seconds)
            )
        return in_threads(
            self._writers, seconds, lambda w: _raw_loop(self._client, self._stream, w, seconds)
        )

    def close(self) -> None:
        self._world.close()
        self._client.close()


class ProcessPair:
    """``writers`` spawn processes, kept up across rounds, each with a world and a client."""

    def __init__(self, writers: int, spec: str, run_for: Callable[[int], tuple[str, str]]) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._writers = writers
        self._commands = ctx.Queue()
        self._results = ctx.Queue()
        # Kept on self: a barrier collected before the children unpickle it is gone for them.
        self._barrier = ctx.Barrier(writers)
        self._processes = [
            ctx.Process(
                target=_pair_worker,
                args=(spec, *run_for(w), w, self._commands, self._results, self._barrier),
            )
            for w in range(writers)
        ]
        for process in self._processes:
            process.start()

    def measure(self, kind: str, seconds: float) -> float:
        # Every writer takes one command and waits at the barrier before taking another.
        for _ in range(self._writers):
            self._commands.put((kind, seconds))
        return sum(self._results.get(timeout=180) for _ in range(self._writers)) / seconds

    def close(self) -> None:
        for _ in range(self._writers):
            self._commands.put(None)
        for process in self._processes:
            process.join(timeout=30)
        if any(p.exitcode != 0 for p in self._processes):
            raise RuntimeError("a writer process failed")


@dataclass
class Comparison:
    writers: str
    world: list[float]
    raw: list[float]

    @property
    def ratios(self) -> list[float]:
        return [w / r for w, r in zip(self.world, self.raw, strict=True)]


def compare(
    writers: str, pair: ThreadPair | ProcessPair, seconds: float, rounds: int
) -> Comparison:
    """Interleaved rounds on the same writers: world, raw, raw, world (then the mirror).

    Each round measures each side twice, symmetrically, so a load that rises or falls
    steadily through the round weighs on both sides alike; the next round starts with the
    other side.
    """
    try:
        pair.measure(WORLD, WARM_UP_SECONDS)  # connections, script load, first touch
        pair.measure(RAW, WARM_UP_SECONDS)
        result = Comparison(writers, [], [])
        for index in range(rounds):
            first, second = (WORLD, RAW) if index % 2 == 0 else (RAW, WORLD)
            rates = {WORLD: 0.0, RAW: 0.0}
            for kind in (first, second, second, first):
                rates[kind] += pair.measure(kind, seconds) / 2
            result.world.append(rates[WORLD])
            result.raw.append(rates[RAW])
    finally:
        pair.close()
    ratios = " ".join(f"{r:.2f}" for r in result.ratios)
    print(
        f"  {writers:<22} world {statistics.median(result.world):>8,.0f}/s"
        f"  raw XADD {statistics.median(result.raw):>8,.0f}/s"
        f"  ratio {statistics.median(result.ratios):.2f}  (rounds: {ratios})",
        flush=True,
    )
    return result


# -- artifacts: hot tier vs S3 only ------------------------------------------------------------


def _artifact_loop(world: Any, run_id: str, writer: int, seconds: float) -> int:
    """Put a small, distinct artifact (a no-op step's output) and read it back; pairs done."""
    from little_dist.world.base import ArtifactInput

    nonce = uuid.uuid4().hex[:8]  # every measurement writes new artifacts
    count = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        manifest = world.put_artifact(
            ArtifactInput(
                run_id=run_id,
                name="output",
                payload={"ok": True, "writer": writer, "index": count},
                step_path=f"fanout[{nonce}-{writer}-{count}].noop",
            )
        )
        world.get_artifact(manifest.artifact_ref)
        count += 1
    return count


class ArtifactPair:
    """``writers`` threads over one hot-tier world or one S3-only world (same servers)."""

    def __init__(self, writers: int, spec: str) -> None:
        self._writers = writers
        self._worlds = {
            HOT: open_world(spec),
            S3_ONLY: open_world(_spec_with(spec, hot_artifact_limit="0")),
        }

    def measure(self, kind: str, seconds: float) -> float:
        world = self._worlds[kind]
        run_id = f"{RUN}_{kind}"
        return in_threads(
            self._writers, seconds, lambda w: _artifact_loop(world, run_id, w, seconds)
        )

    def close(self) -> None:
        for world in self._worlds.values():
            world.close()


def compare_artifacts(writers: int, spec: str, seconds: float, rounds: int) -> list[float]:
    """Interleaved rounds (hot, s3, s3, hot, then the mirror); prints medians and ratio."""
    pair = ArtifactPair(writers, spec)
    hot: list[float] = []
    s3: list[float] = []
    try:
        pair.measure(HOT, WARM_UP_SECONDS)  # connections, script load
        pair.measure(S3_ONLY, WARM_UP_SECONDS)
        for index in range(rounds):
            first, second = (HOT, S3_ONLY) if index % 2 == 0 else (S3_ONLY, HOT)
            rates = {HOT: 0.0, S3_ONLY: 0.0}
            for kind in (first, second, second, first):
                rates[kind] += pair.measure(kind, seconds) / 2
            hot.append(rates[HOT])
            s3.append(rates[S3_ONLY])
    finally:
        pair.close()
    ratios = [h / s for h, s in zip(hot, s3, strict=True)]
    label = f"{writers} thread" + ("s" if writers > 1 else "")
    print(
        f"  {label:<12} hot tier {statistics.median(hot):>8,.0f}/s"
        f"  S3 only {statistics.median(s3):>8,.0f}/s"
        f"  ratio {statistics.median(ratios):.2f}"
        f"  (min {min(ratios):.2f}, max {max(ratios):.2f})",
        flush=True,
    )
    return ratios


def archive_figure(spec: str, branches: int) -> None:
    """How long ``archive_run`` takes to copy a fan-out's hot artifacts to S3 (distinct
    payloads, so every one is a blob and a manifest: the worst case)."""
    from little_dist.world.redis_s3 import RedisS3World

    world = open_world(spec)
    assert isinstance(world, RedisS3World)
    run_id = f"{RUN}_archive"
    try:
        world.append(run_id, EventInput(type="RunStarted", payload={}))
        _artifact_loop_n(world, run_id, branches)
        world.append(run_id, EventInput(type="RunCompleted", payload={}))
        started = time.perf_counter()
        world.archive_run(run_id, ttl_seconds=0)
        took = time.perf_counter() - started
    finally:
        world.close()
    print(
        f"  archive_run of a {branches:,}-branch run: {branches:,} hot artifacts to S3 in "
        f"{took:.2f}s ({branches / took:,.0f} artifacts/s, 2 S3 puts each)",
        flush=True,
    )


def _artifact_loop_n(world: Any, run_id: str, count: int) -> None:
    from little_dist.world.base import ArtifactInput

    for index in range(count):
        world.put_artifact(
            ArtifactInput(
                run_id=run_id, name="output", payload={"index": index}, step_path=f"b[{index}]"
            )
        )


def _spec_with(url: str, **params: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=urlencode([*parse_qsl(parts.query), *params.items()])))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.25, help="per measurement")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=21, help="Redis rounds (median of)")
    parser.add_argument(
        "--artifacts-only", action="store_true", help="only the hot tier vs S3-only rows"
    )
    parser.add_argument(
        "--fsync-only", action="store_true", help="only the appendfsync everysec vs always rows"
    )
    options = parser.parse_args()
    seconds, many, rounds = options.seconds, options.writers, options.rounds
    print(f"start: {_load()}", flush=True)

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

    def record(world: str, writers: str, rate: float) -> None:
        print(f"  {world:<14} {writers:<24} {rate:>10,.0f} appends/s", flush=True)

    def fresh_redis_spec() -> str:
        name = uuid.uuid4().hex[:8]
        return _spec_with(REDIS_URL, key_prefix=f"{prefix}{name}:", s3_prefix=f"bench/{name}/")

    def shared_world(spec: str) -> Callable[[int], int]:
        world = open_world(spec)
        return lambda writer: _world_loop(world, RUN, writer, solo)

    # Rows without a baseline are measured once, for a whole second.
    solo = max(1.0, seconds)
    try:
        if options.artifacts_only:
            artifact_throughput(fresh_redis_spec, seconds, many, rounds)
            return
        if options.fsync_only:
            fsync_throughput(scratch, seconds, many, rounds)
            return
        print(f"appends to one run, {solo:g}s each")
        record("MemoryWorld", "1 thread", in_threads(1, solo, shared_world("memory:")))
        record("MemoryWorld", f"{many} threads", in_threads(many, solo, shared_world("memory:")))
        local = f"local:{scratch / 'local-1'}"
        record("LocalWorld", "1 thread", in_threads(1, solo, shared_world(local)))
        local_many = f"local:{scratch / 'local-n'}"
        open_world(local_many).close()  # create the schema before the writers race to
        record(
            "LocalWorld",
            f"{many} processes",
            in_processes(
                many,
                solo,
                _single_world_writer,
                lambda w, b: (local_many, RUN, w, solo, b),
            ),
        )

        print(
            f"\nRedisS3World vs raw XADD: {rounds} rounds, each world/raw/raw/world (or "
            f"raw/world/world/raw) of {seconds:g}s; medians (target: ratio >= 0.5)",
            flush=True,
        )
        comparisons = [
            compare("1 thread", ThreadPair(1, fresh_redis_spec(), prefix + "r1"), seconds, rounds),
            compare(
                f"{many} threads",
                ThreadPair(many, fresh_redis_spec(), prefix + "rt"),
                seconds,
                rounds,
            ),
            compare(
                f"{many} processes",
                ProcessPair(many, fresh_redis_spec(), lambda w: (RUN, prefix + "rp")),
                seconds,
                rounds,
            ),
            compare(
                f"{many} processes, {many} runs",
                ProcessPair(many, fresh_redis_spec(), lambda w: (f"{RUN}_{w}", f"{prefix}r-{w}")),
                seconds,
                rounds,
            ),
        ]
        print(f"\nRedisS3World / raw XADD, median of {rounds} rounds (target >= 0.5)")
        for comparison in comparisons:
            ratios = comparison.ratios
            median = statistics.median(ratios)
            verdict = "ok" if median >= 0.5 else "BELOW TARGET"
            print(
                f"  {comparison.writers:<24} {median:5.2f}  "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f})  {verdict}"
            )
        print(f"end: {_load()}", flush=True)

        artifact_throughput(fresh_redis_spec, seconds, many, rounds)
        fold_throughput()
        fsync_throughput(scratch, seconds, many, rounds)
    finally:
        for key in raw.scan_iter(match=f"{prefix}*", count=1000):
            raw.delete(key)
        raw.close()
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def artifact_throughput(
    fresh_spec: Callable[[], str], seconds: float, many: int, rounds: int
) -> None:
    print(
        f"\nsmall artifacts, put + get pairs on RedisS3World: hot tier (default limit) vs "
        f"hot_artifact_limit=0 (S3 only); {rounds} rounds of {seconds:g}s, medians",
        flush=True,
    )
    print(f"  start: {_load()}", flush=True)
    for writers in (1, many):
        compare_artifacts(writers, fresh_spec(), seconds, rounds)
    archive_figure(fresh_spec(), 1000)
    print(f"  end: {_load()}", flush=True)


EVERYSEC, ALWAYS = "everysec", "always"


def fsync_throughput(scratch: Path, seconds: float, many: int, rounds: int) -> None:
    """Appends per second with AOF ``appendfsync everysec`` vs ``always`` (the module
    docstring); prints the medians and the ratio always / everysec."""
    from tests.redis_server import start_redis_server

    print(
        f"\nRedis AOF appendfsync: everysec vs always, appends to one run on a private "
        f"redis-server each; {rounds} rounds of {seconds:g}s, medians",
        flush=True,
    )
    print(f"  start: {_load()}", flush=True)
    servers = {
        mode: start_redis_server(scratch / f"redis-{mode}", appendfsync=mode)
        for mode in (EVERYSEC, ALWAYS)
    }
    try:
        for writers in (1, many):
            worlds = {
                mode: open_world(
                    _spec_with(server.url(), s3_prefix=f"bench-fsync/{uuid.uuid4().hex[:8]}/")
                )
                for mode, server in servers.items()
            }
            try:

                def measure(
                    mode: str, span: float, writers: int = writers, worlds: Any = worlds
                ) -> float:
                    world = worlds[mode]
                    return in_threads(writers, span, lambda w: _world_loop(world, RUN, w, span))

                for mode in worlds:
                    measure(mode, WARM_UP_SECONDS)
                rates: dict[str, list[float]] = {EVERYSEC: [], ALWAYS: []}
                for index in range(rounds):
                    first, second = (EVERYSEC, ALWAYS) if index % 2 == 0 else (ALWAYS, EVERYSEC)
                    got = {EVERYSEC: 0.0, ALWAYS: 0.0}
                    for mode in (first, second, second, first):
                        got[mode] += measure(mode, seconds) / 2
                    for mode, rate in got.items():
                        rates[mode].append(rate)
            finally:
                for world in worlds.values():
                    world.close()
            ratios = [a / e for a, e in zip(rates[ALWAYS], rates[EVERYSEC], strict=True)]
            label = "1 thread" if writers == 1 else f"{writers} threads"
            print(
                f"  {label:<12} everysec {statistics.median(rates[EVERYSEC]):>8,.0f}/s"
                f"  always {statistics.median(rates[ALWAYS]):>8,.0f}/s"
                f"  ratio always/everysec {statistics.median(ratios):.2f}"
                f"  (min {min(ratios):.2f}, max {max(ratios):.2f})",
                flush=True,
            )
    finally:
        for server in servers.values():
            server.stop()
    print(f"  end: {_load()}", flush=True)


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
