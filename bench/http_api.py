"""The HTTP API (``little serve``) against the fleet's own client: submissions, and many
Server-Sent Event watchers held by one server process.

Run from the repository root (Redis on 127.0.0.1:6379 by default, db 15 unless
``LITTLE_BENCH_REDIS_URL`` says otherwise; keys under a unique prefix, deleted at the end)::

    .venv/bin/python bench/http_api.py [--submits 2000] [--clients 4] [--rounds 3]
                                   [--watchers 1000] [--runs 100] [--events 10]

It starts what it measures, each in its own process group (as ``bench/fleet.py`` does):
``weed mini`` (S3) and one ``little serve`` (``--app tests.http_fleet_app``). No scheduler
and no worker: a submission is measured to its answer (the run recorded, its version
registered, the scheduler signalled), not to the run's end, and the watched runs stay live.

Figures, each beside its baseline measured in the same run:

(a) **submit throughput**: ``--submits`` runs of ``http.steps`` submitted by ``--clients``
    threads, over HTTP (``POST /v1/runs``, one keep-alive ``httpx.Client`` per thread)
    against ``Client.submit`` in this process on the same fleet (the same threads, one
    ``Client``). Rounds alternate the two (``--rounds``, the median of each). Target: HTTP
    at least 0.5x the client's runs per second.
(b) **event delivery to SSE watchers**: ``--watchers`` streams of ``GET /v1/runs/{id}/events``
    open at once on the one server (spread over ``--runs`` live runs), read in a process of
    their own (``bench/sse_reader.py``, plain asyncio streams: the reader is not what is
    measured); once the server's ``/metrics`` counts them all open, ``--events`` rounds of
    one appended event per run (``--interval`` apart) from this process. The figure is each
    event's delivery to each of its run's watchers: from the append's return
    (``World.append_batch``) to the reader seeing the event's ``id`` line, p50 and p99; and
    the CPU each process spent per delivery meanwhile (server, Redis, appender, reader).
    Target: p99 <= 100 ms with 1,000 watchers. Events a watcher never got are counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (This file is not named http.py: every bench script has this folder first on sys.path,
# where it would shadow the standard library's http package.)
import httpx  # noqa: E402 - after the path set-up above

from bench.fleet import (  # noqa: E402
    DEFAULT_REDIS_URL,
    REDIS_URL_ENV,
    Procs,
    Report,
    cpu_line,
    cpu_seconds,
    cpu_spent,
    delete_prefix,
    engine_env,
    percentile,
    redis_pid,
)

APP = "tests.http_fleet_app"
TICK = "little.bench.tick"


@dataclass
class Served:
    url: str
    token: str
    pid: int


def start_serve(procs: Procs, env: dict[str, str], port: int, token: str) -> Served:
    """``little serve`` on ``port``, once ``/healthz`` answers."""
    proc = procs.spawn(
        "serve",
        [
            sys.executable,
            "-m",
            "little_dist.cli",
            "serve",
            "--port",
            str(port),
            "--app",
            APP,
            "--log-level",
            "warning",
        ],
        env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        procs.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return Served(url, token, proc.popen.pid)
        time.sleep(0.3)
    raise RuntimeError(f"little serve did not answer in 60 s:\n{proc.tail()}")


# -- (a) submissions ----------------------------------------------------------------------------


def _spread(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if index < total % parts else 0) for index in range(parts)]


def timed_in_threads(clients: int, total: int, submit_n: Callable[[int, int], None]) -> float:
    """Seconds for ``clients`` threads to submit ``total`` runs (``submit_n(thread, n)``)."""
    barrier = threading.Barrier(clients + 1)

    def work(index: int, count: int) -> None:
        barrier.wait()
        submit_n(index, count)

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(work, i, n) for i, n in enumerate(_spread(total, clients))]
        barrier.wait()
        started = time.perf_counter()
        for future in futures:
            future.result()
        return time.perf_counter() - started


def client_rate(client: Any, workflow: Any, clients: int, total: int) -> float:
    def submit_n(_: int, count: int) -> None:
        for _ in range(count):
            client.submit(workflow, {"sleep": 0}, run_id=f"run_bench_{uuid.uuid4().hex}")

    return total / timed_in_threads(clients, total, submit_n)


def http_rate(served: Served, clients: int, total: int) -> float:
    headers = {"Authorization": f"Bearer {served.token}"}
    sessions = [
        httpx.Client(base_url=served.url, headers=headers, timeout=60) for _ in range(clients)
    ]
    body = {"workflow": "http.steps", "input": {"sleep": 0}}

    def submit_n(index: int, count: int) -> None:
        http = sessions[index]
        for _ in range(count):
            answer = http.post("/v1/runs", json={**body, "runId": f"run_bench_{uuid.uuid4().hex}"})
            if answer.status_code != 202:
                raise RuntimeError(f"POST /v1/runs answered {answer.status_code}: {answer.text}")

    try:
        for http in sessions:  # connections opened before the clock starts (keep-alive)
            http.get("/healthz")
        return total / timed_in_threads(clients, total, submit_n)
    finally:
        for http in sessions:
            http.close()


def measure_submits(report: Report, served: Served, client: Any, workflow: Any, args: Any) -> None:
    client_rate(client, workflow, args.clients, 20)  # warm-up: versions registered, pools open
    http_rate(served, args.clients, 20)
    direct: list[float] = []
    over_http: list[float] = []
    for _ in range(args.rounds):
        direct.append(client_rate(client, workflow, args.clients, args.submits))
        over_http.append(http_rate(served, args.clients, args.submits))
    base, http = statistics.median(direct), statistics.median(over_http)
    ratio = http / base
    report.say(
        f"(a) submit, {args.submits} runs x {args.rounds} round(s), {args.clients} thread(s): "
        f"Client.submit {base:.0f} runs/s; POST /v1/runs (keep-alive) {http:.0f} runs/s: "
        f"{ratio:.2f}x (target >= 0.50) {'OK' if ratio >= 0.5 else 'MISSED'}"
    )


# -- (b) SSE watchers ---------------------------------------------------------------------------


@dataclass
class Deliveries:
    received: dict[tuple[int, str, int], float] = field(default_factory=dict)
    appended: dict[tuple[str, int], float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    #: CPU seconds each process spent from the first append to the last delivery.
    cpu: dict[str, float] = field(default_factory=dict)


def open_watchers(served: Served) -> float:
    text = httpx.get(f"{served.url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("little_api_sse_watchers "):
            return float(line.split()[1])
    return 0.0


def append_rounds(world: Any, runs: Sequence[str], args: Any, seen: Deliveries) -> None:
    from little_dist.events import EventInput

    for index in range(args.events):
        for run_id in runs:
            event = EventInput(type=TICK, payload={"tick": index})
            [appended] = world.append_batch(run_id, [event], signal=False)
            seen.appended[(run_id, appended.sequence)] = time.monotonic()
        time.sleep(args.interval)


def watch_all(
    served: Served, world: Any, runs: Sequence[str], args: Any, tmp: Path, pids: dict[str, int]
) -> Deliveries:
    """The watchers in ``bench/sse_reader.py``'s process; the appends in this one."""
    seen = Deliveries()
    host, _, port = served.url.removeprefix("http://").rpartition(":")
    spec, out = tmp / "sse-spec.json", tmp / "sse-out.json"
    spec.write_text(
        json.dumps(
            {
                "host": host,
                "port": int(port),
                "token": served.token,
                "runs": list(runs),
                "watchers": args.watchers,
                "events": args.events,
                "timeout": 180 + args.events * args.interval + 30,
            }
        )
    )
    reader = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("sse_reader.py")), str(spec), str(out)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None
        reader.stdout.readline()  # "open N": every request sent
        deadline = time.monotonic() + 180
        while open_watchers(served) < args.watchers:
            if time.monotonic() > deadline or reader.poll() is not None:
                raise RuntimeError(
                    f"{open_watchers(served):.0f} of {args.watchers} streams open after 180 s"
                )
            time.sleep(0.2)
        print(f"(b) {args.watchers} streams open; appending", flush=True)
        reader_before = cpu_seconds(reader.pid)
        with cpu_spent(pids) as spent:
            append_rounds(world, runs, args, seen)
            reader.wait(timeout=60)
        seen.cpu = spent
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    result = json.loads(out.read_text())
    seen.received = {(w, run, seq): at for w, run, seq, at in result["received"]}
    seen.errors = result["errors"]
    seen.cpu["reader"] = result["cpu"] - reader_before
    return seen


def measure_watchers(
    report: Report, served: Served, world: Any, args: Any, tmp: Path, redis_pid: int
) -> None:
    from little_dist.events import EventInput

    runs = [f"run_bench_watch_{index}_{uuid.uuid4().hex[:8]}" for index in range(args.runs)]
    for run_id in runs:  # live runs: an opening event, no end
        world.append_batch(run_id, [EventInput(type=TICK, payload={"tick": -1})], signal=False)
    pids = {"server": served.pid, "redis": redis_pid, "appender": os.getpid()}
    seen = watch_all(served, world, runs, args, tmp, pids)
    latencies = [
        (received - seen.appended[(run_id, sequence)]) * 1000
        for (_, run_id, sequence), received in seen.received.items()
        if (run_id, sequence) in seen.appended
    ]
    expected = args.watchers * args.events
    missing = expected - len(latencies)
    if not latencies:
        report.say(f"(b) SSE watchers: no event delivered; errors: {seen.errors[:3]}")
        return
    p99 = percentile(latencies, 0.99)
    report.say(
        f"(b) SSE, {args.watchers} watchers of {args.runs} live runs on one server, "
        f"{args.events} events per run: delivery after the append p50 "
        f"{percentile(latencies, 0.5):.1f} ms, p99 {p99:.1f} ms, max {max(latencies):.1f} ms "
        f"(target p99 <= 100 ms) {'OK' if p99 <= 100 and not missing else 'MISSED'}; "
        f"{missing} of {expected} deliveries missing"
        + (f"; errors: {seen.errors[:3]}" if seen.errors else "")
    )
    report.say("    CPU per delivery: " + cpu_line(seen.cpu, len(latencies)))


# -- main -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/http_api.py", description=__doc__.split("\n")[0])
    parser.add_argument("--submits", type=int, default=2000, help="runs per round and path")
    parser.add_argument("--clients", type=int, default=4, help="submitting threads")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each path (a median)")
    parser.add_argument("--watchers", type=int, default=1000, help="SSE streams open at once")
    parser.add_argument("--runs", type=int, default=100, help="live runs they watch")
    parser.add_argument("--events", type=int, default=10, help="events appended to each run")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between rounds")
    parser.add_argument("--only", default="a,b", help="the figures to measure (a, b)")
    args = parser.parse_args(argv)
    for name in ("submits", "clients", "rounds", "watchers", "runs", "events"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    if not only <= {"a", "b"}:
        parser.error(f"--only takes a and b, got {args.only!r}")
    redis_url = os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL)

    import redis as redis_lib

    from little_dist.fleet.client import Client
    from little_dist.http.tokens import TokenStore
    from little_dist.settings import load_settings
    from little_dist.world.factory import world_from_settings
    from little_dist.world.fleet_keys import api_tokens_key
    from tests.http_fleet_app import steps
    from tests.ports import reserve_port
    from tests.s3_server import start_weed_mini

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
    report = Report()
    with tempfile.TemporaryDirectory(prefix="little-bench-") as tmp:
        tmp_path = Path(tmp)
        procs = Procs(tmp_path)
        s3 = None
        client = world = None
        try:
            s3 = start_weed_mini(tmp_path / "seaweedfs", "little-bench")
            env = engine_env(
                base_env,
                prefix,
                redis_url,
                s3,
                tmp_path / "no-script.json",
                argparse.Namespace(concurrency=1),
                {"LITTLE_APP": APP},
            )
            settings = load_settings(env)
            token = (
                TokenStore(redis, api_tokens_key(settings.signal_stream)).create(["admin"]).token
            )
            served = start_serve(procs, env, reserve_port(), token)
            world = world_from_settings(settings)
            client = Client(settings, world=world)
            report.say(
                f"HTTP API benchmark: one little serve, Redis {redis_url}, {os.cpu_count()} CPUs"
            )
            if "a" in only:
                measure_submits(report, served, client, steps, args)
            if "b" in only:
                measure_watchers(report, served, world, args, tmp_path, redis_pid(redis))
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
            if world is not None:
                with contextlib.suppress(Exception):
                    world.close()
            procs.stop_all()
            if s3 is not None:
                with contextlib.suppress(Exception):
                    s3.stop()
            delete_prefix(redis, prefix, queues)
    return 0


if __name__ == "__main__":
    sys.exit(main())
