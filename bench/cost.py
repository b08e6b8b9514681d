"""What a run costs a fleet: Redis bytes and keys, S3 requests, submit latency, memory.

Run from the repository root (Redis on 127.0.0.1:6379 by default, db 15, keys under a unique
prefix, deleted at the end)::

    .venv/bin/python bench/cost.py [--runs 200] [--fan-runs 40] [--concurrency 8]

It starts what it measures, as ``bench/fleet.py`` does: ``weed mini`` (S3, with its
Prometheus metrics on), one ``little scheduler`` and two ``little worker`` processes
(``--app tests.fleet_app``). Then, after one warm-up run of each workflow:

1. ``--runs`` runs of a 5-step no-op chain (``fleet_app.chain5``), submitted one after the
   other by one thread (each ``Client.submit`` timed; with ``--batch N`` and a client that
   has ``submit_many``, also submitted N at a time), then waited for; the client makes the
   run ids up, except for a quarter of ``--runs`` more whose ids the bench gives (they
   cost a look at S3 first);
2. ``--fan-runs`` runs of a 20-branch no-op fan-out (``fleet_app.fan1000`` on 20 keys);
3. until every run is archived (the backlog drains) or ``--drain-timeout``;
4. ``--rss-runs`` more chain runs in two halves, for the RSS growth of a warm fleet.

Every figure is printed with its target and ``OK`` or ``MISSED``.

Figures, each with the issue's target (24) and, where one exists, a baseline measured in the
same run:

* Redis per run while live and after archiving, bytes (``MEMORY USAGE`` of every key under
  the bench's prefix, attributed to a run by the ``{run_id}`` hash tag its keys carry; keys
  of no run, e.g. the run index, counted by their growth) and keys; the keys a run leaves
  without a TTL. Baseline: the run's events ``XADD``-ed raw (one JSON field an entry) into
  one stream.
* S3 requests per run and per step, by type and response code (weed's counter
  ``SeaweedFS_s3_request_total``, read before and after each batch once its archives are
  done). Baseline: one raw ``put_object`` of the run's log, 1 PUT per run.
* ``Client.submit`` latency p50 / p99 and runs/s submitted; baseline: one raw ``XADD``'s
  round trip. With each, what one submit costs its client: Redis round trips (packed sends
  of redis-py from the submitting thread, whatever client sends them: the world's, the
  fleet's, Celery's) and CPU (the bench process's, ``time.process_time``: the submitting
  thread and any thread it hands work to, e.g. a given run id's S3 look).
* The archive backlog (runs ended, not archived yet) over time and the archive rate.
* Scheduler and worker RSS growth per 1,000 runs (``/proc/PID/status``): over the warm-up
  (the runs above, then the first half of ``--rss-runs``) and over the second half, which
  is what the target is on: a leak grows there, a warm-up does not.

Redis's ``INFO memory`` is not used: the server is shared (other benches, other tests);
``MEMORY USAGE`` of the bench's own keys is exact for them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fleet import (  # noqa: E402  (the path above first)
    DEFAULT_REDIS_URL,
    REDIS_URL_ENV,
    Engine,
    Procs,
    Report,
    delete_prefix,
    engine_env,
    percentile,
    start_engine,
    stop_engine,
)
from little_dist.world.redis_s3.outcomes import OUTCOME_TTL_SECONDS  # noqa: E402

CHAIN_STEPS = 5
FAN_BRANCHES = 20
_RUN_TAG = re.compile(r"\{(run_[^}]+)\}")
_METRIC = re.compile(r"^SeaweedFS_s3_request_total\{([^}]*)\}\s+([0-9.e+]+)$")


#: The input of a batch's run number N: every run gets its own (as an operator's runs do).
InputOf = Callable[[int], Any]


def chain_input(index: int) -> Any:
    return {"n": index}


def fan_input(index: int) -> Any:
    return {"keys": [f"r{index}k{branch}" for branch in range(FAN_BRANCHES)]}


# -- what is measured ---------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    name: str
    size: int
    ttl_ms: int  # -1: none
    run: str | None
    kind: str = "?"  # its Redis type (string, hash, stream, ...)


def snapshot(redis: Any, prefix: str) -> list[Key]:
    """Every key under ``prefix``: its bytes (``MEMORY USAGE``, exact) and TTL."""
    names = [n.decode() for n in redis.scan_iter(match=f"{prefix}*", count=2000)]
    keys: list[Key] = []
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        pipe = redis.pipeline(transaction=False)
        for name in chunk:
            pipe.execute_command("MEMORY", "USAGE", name, "SAMPLES", "0")
            pipe.pttl(name)
            pipe.type(name)
        replies = pipe.execute()
        for index, name in enumerate(chunk):
            size, ttl, kind = replies[3 * index : 3 * index + 3]
            if size is None or ttl == -2:  # gone meanwhile
                continue
            tag = _RUN_TAG.search(name)
            keys.append(Key(name, int(size), int(ttl), tag.group(1) if tag else None, _text(kind)))
    return keys


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _shared_kind(name: str) -> str:
    """A key of no run by its kind: its name without the prefix and trailing numbers."""
    head = name.split(":", 1)[1] if ":" in name else name
    return re.sub(r"(:[0-9]+)+$", ":N", head)


def _kind(name: str) -> str:
    """A key's kind: its name without the prefix, run id and step path (``lease-token:``)."""
    tag = _RUN_TAG.search(name)
    head = name[: tag.start()] if tag else name
    head = head.rsplit(":", 2)[-2] if head.count(":") >= 2 else head
    tail = name[tag.end() :].split(":")[1] if tag and ":" in name[tag.end() :] else ""
    return f"{head}:{{run}}:{tail}" if tail else f"{head}:{{run}}"


def s3_requests(metrics_url: str, bucket: str) -> Counter[tuple[str, str]]:
    """weed's S3 request counter for ``bucket``, by (type, code)."""
    return parse_s3_requests(
        urllib.request.urlopen(metrics_url, timeout=10).read().decode(), bucket
    )


def parse_s3_requests(text: str, bucket: str) -> Counter[tuple[str, str]]:
    """``SeaweedFS_s3_request_total`` of ``bucket`` in Prometheus text, by (type, code)."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        found = _METRIC.match(line)
        if found is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(1)))
        if labels.get("bucket") == bucket:
            counts[(labels.get("type", "?"), labels.get("code", "?"))] += int(float(found[2]))
    return counts


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def raw_xadd_bytes(redis: Any, key: str, events: Sequence[Any]) -> int:
    """The baseline: a run's events XADD-ed raw, one JSON field an entry, into one stream."""
    import json

    pipe = redis.pipeline(transaction=False)
    for event in events:
        pipe.xadd(key, {"e": json.dumps(event.to_json(), separators=(",", ":"))})
    pipe.execute()
    size = int(redis.execute_command("MEMORY", "USAGE", key, "SAMPLES", "0"))
    redis.delete(key)
    return size


def raw_xadd_latency(redis: Any, key: str, count: int = 200) -> list[float]:
    """Round trips of one raw XADD (seconds): the floor of a submit."""
    seconds = []
    for index in range(count):
        started = time.perf_counter()
        redis.xadd(key, {"n": str(index)})
        seconds.append(time.perf_counter() - started)
    redis.delete(key)
    return seconds


class RoundTrips(threading.local):
    """Redis round trips of the calling thread: every packed send of redis-py (one per
    command or pipeline, whichever client sends it) counts, once :meth:`install` ran."""

    count: int = 0

    def install(self) -> None:
        import redis.connection

        send = redis.connection.AbstractConnection.send_packed_command
        counter = self

        def counting_send(self: Any, command: Any, check_health: bool = True) -> None:
            counter.count += 1
            send(self, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counting_send  # type: ignore[method-assign]


ROUND_TRIPS = RoundTrips()


@dataclass
class Timed:
    """Submits timed one by one: wall seconds, Redis round trips and client CPU seconds."""

    seconds: list[float] = field(default_factory=list)
    trips: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def call(self, submit: Callable[[], str]) -> str:
        trips, cpu, t0 = ROUND_TRIPS.count, time.process_time(), time.perf_counter()
        run_id = submit()
        self.seconds.append(time.perf_counter() - t0)
        self.cpu.append(time.process_time() - cpu)
        self.trips.append(ROUND_TRIPS.count - trips)
        return run_id

    def cost(self) -> str:
        """``N round trips, CPU p50 X ms`` for the report."""
        trips = statistics.median(self.trips) if self.trips else 0
        cpu = statistics.median(self.cpu) * 1000 if self.cpu else 0.0
        return (
            f"Redis round trips per submit: p50 {trips:g}, max {max(self.trips, default=0)}; "
            f"client CPU p50 {cpu:.2f} ms"
        )


@dataclass
class Backlog:
    """Samples (seconds since start, submitted, ended, not archived) taken every second."""

    redis: Any
    runs_index: str
    started: float = field(default_factory=time.monotonic)
    submitted: int = 0
    ended: int = 0
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    #: (runs waiting for their archive when the last run ended, seconds until none waited)
    drains: list[tuple[int, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def sample(self) -> int:
        waiting = int(self.redis.zcard(self.runs_index))
        now = time.monotonic() - self.started
        self.samples.append((now, self.submitted, self.ended, waiting))
        return waiting

    def stop(self) -> None:
        self._stop.set()


# -- the phases ------------------------------------------------------------------------------


@dataclass
class Batch:
    name: str
    steps_per_run: int
    run_ids: list[str] = field(default_factory=list)
    submit_s: list[float] = field(default_factory=list)
    submit_wall: float = 0.0
    #: The one-by-one submits' round trips and CPU (see :class:`Timed`).
    timed: Timed = field(default_factory=Timed)
    batch_rate: float | None = None
    s3: Counter[tuple[str, str]] = field(default_factory=Counter)
    live: list[Key] = field(default_factory=list)
    #: Runs submitted with an id of their caller's (see :func:`time_submits`).
    given_ids: int = 0


def submit_batch(
    engine: Engine, batch: Batch, workflow: Any, inputs: InputOf, runs: int, backlog: Backlog
) -> None:
    """``runs`` runs submitted one after the other, each submit timed, then waited for (the
    client makes each run id up, as an operator's submits do)."""
    ids = []
    started = time.perf_counter()
    for _ in range(runs):
        run_input = inputs(len(batch.run_ids) + len(batch.submit_s))
        t0 = time.perf_counter()
        ids.append(batch.timed.call(functools.partial(engine.client.submit, workflow, run_input)))
        batch.submit_s.append(time.perf_counter() - t0)
        backlog.submitted += 1
    batch.submit_wall = time.perf_counter() - started
    batch.run_ids += ids
    wait_all(engine, ids, backlog)


@contextlib.contextmanager
def workers_stopped(engine: Engine) -> Iterator[None]:
    """The workers SIGSTOPped for the block: submits timed without the fleet running the
    runs on the same CPUs (they run once the workers go on)."""
    for worker in engine.workers:
        os.killpg(worker.popen.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for worker in engine.workers:
            os.killpg(worker.popen.pid, signal.SIGCONT)


def time_submits(
    engine: Engine,
    batch: Batch,
    workflow: Any,
    inputs: InputOf,
    runs: int,
    *,
    given_ids: bool = False,
) -> Timed:
    """``runs`` submits timed with the workers stopped (see :func:`workers_stopped`); the
    runs join ``batch`` (waited for later). ``given_ids``: the caller names each run (the
    world asks S3 whether such a run was archived before starting it)."""
    timed = Timed()
    with workers_stopped(engine):
        for index in range(runs):
            run_id = f"run_cost_{uuid.uuid4().hex[:16]}" if given_ids else None
            batch.run_ids.append(
                timed.call(
                    functools.partial(engine.client.submit, workflow, inputs(index), run_id=run_id)
                )
            )
    batch.given_ids += runs if given_ids else 0
    return timed


def submit_many_batch(
    engine: Engine,
    batch: Batch,
    workflow: Any,
    inputs: InputOf,
    runs: int,
    size: int,
    backlog: Backlog,
) -> None:
    """``runs`` runs submitted ``size`` at a time with ``Client.submit_many``."""
    ids: list[str] = []
    first = len(batch.run_ids) + len(batch.submit_s)
    started = time.perf_counter()
    for start in range(0, runs, size):
        count = min(size, runs - start)
        ids += engine.client.submit_many(
            workflow, [inputs(first + start + i) for i in range(count)]
        )
        backlog.submitted += count
    batch.batch_rate = runs / (time.perf_counter() - started)
    batch.run_ids += ids
    wait_all(engine, ids, backlog)


def wait_all(engine: Engine, ids: Iterable[str], backlog: Backlog) -> None:
    for run_id in ids:
        state = engine.client.wait(run_id, timeout=300)
        if getattr(state, "status", None) != "completed":
            engine.procs.check_alive()
            raise RuntimeError(f"{run_id} ended {getattr(state, 'status', state)!r}")
        backlog.ended += 1


def drain(backlog: Backlog, timeout: float) -> float | None:
    """Wait until no run waits for its archive; the seconds it took (None: timed out).
    Also records the drain in ``backlog.drains`` (runs waiting at the start, seconds)."""
    started = time.monotonic()
    waiting = None
    while time.monotonic() - started < timeout:
        left = backlog.sample()
        waiting = left if waiting is None else waiting
        if left == 0:
            seconds = time.monotonic() - started
            backlog.drains.append((waiting, seconds))
            return seconds
        time.sleep(0.5)
    return None


# -- the report ------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSED"


def say_redis(
    report: Report,
    before: list[Key],
    live: list[Key],
    after: list[Key],
    batch_ids: set[str],
    raw_bytes: float,
    archive_ttl: float,
) -> None:
    """Redis per run while live (its own keys), after archiving (every key's growth) and
    once the archive TTL has passed (the growth of keys that outlive it)."""
    runs = len(batch_ids)
    archived = {k.run for k in live if k.run in batch_ids and k.name.endswith(":archived")}
    live_runs = batch_ids - archived
    own = [k for k in live if k.run in live_runs]
    if live_runs:
        per = sum(k.size for k in own) / len(live_runs)
        report.say(
            f"Redis per run while live ({len(live_runs)} runs not archived yet): {per:,.0f} B, "
            f"{len(own) / len(live_runs):.1f} keys; raw XADD of its events {raw_bytes:,.0f} B, "
            f"ratio {per / raw_bytes:.2f} (target <= 1.00) {verdict(per <= raw_bytes)}"
        )
    grown = sum(k.size for k in after) - sum(k.size for k in before)
    keys = len(after) - len(before)
    no_ttl = [k for k in after if k.ttl_ms == -1]
    no_ttl_runs = [k for k in no_ttl if k.run in batch_ids]
    # Keys of no run without a TTL that appeared meanwhile: fixed per fleet (e.g. a queue's
    # fan-out backlog, made by the first fan-out), shown by name, not counted per run.
    shared_before = {k.name for k in before if k.ttl_ms == -1 and k.run is None}
    new_shared = sorted(
        _shared_kind(k.name) for k in no_ttl if k.run is None and k.name not in shared_before
    )
    report.say(
        f"Redis per run just after archiving: {grown / runs:,.0f} B, {keys / runs:.2f} keys "
        f"(held LITTLE_ARCHIVE_TTL = {archive_ttl:g} s, target: minutes) "
        f"{verdict(archive_ttl <= 900)}"
    )

    # A run's outcome record (``{run}:outcome``, issue 37) outlives its archive by design: a
    # service that watches runs without S3 credentials learns from it how a run ended, for
    # OUTCOME_TTL_SECONDS (a day). It is shown on its own line with its own target, not
    # counted in what a run leaves behind for good.
    def is_outcome(k: Key) -> bool:
        return k.run is not None and k.name.endswith(":outcome")

    def lasting(keys: list[Key]) -> list[Key]:
        return [
            k
            for k in keys
            if (k.ttl_ms == -1 or k.ttl_ms > (archive_ttl + 60) * 1000) and not is_outcome(k)
        ]

    outcomes = [k for k in after if is_outcome(k) and k.run in batch_ids]
    if outcomes:
        longest = max(k.ttl_ms for k in outcomes) / 1000
        report.say(
            "Redis per run kept a day: its outcome record, "
            f"{sum(k.size for k in outcomes) / runs:,.0f} B, the longest TTL left "
            f"{longest:,.0f} s (target: <= OUTCOME_TTL_SECONDS, "
            f"{OUTCOME_TTL_SECONDS:,} s, and one record a run) "
            f"{verdict(longest <= OUTCOME_TTL_SECONDS and len(outcomes) <= runs)}"
        )

    left = sum(k.size for k in lasting(after)) - sum(k.size for k in lasting(before))
    kinds = Counter(_kind(k.name) for k in lasting(after) if k.run in batch_ids)
    # Keys of no run, by kind (an archived-run bucket, a broker's hash), and their growth.
    # Streams of no run are capped rings (the scheduler's signal stream: 100,000
    # entries, the stream of run ends: ~1,000): they fill up to their cap and stay there,
    # whatever the runs archived since; shown, but not counted per archived run.
    shared: Counter[str] = Counter()
    capped = 0
    for sign, listed in ((1, lasting(after)), (-1, lasting(before))):
        for k in listed:
            if k.run is None:
                shared[_shared_kind(k.name)] += sign * k.size
                capped += sign * k.size if k.kind == "stream" else 0
    kept = left - capped
    report.say(
        f"Redis per run left once that TTL passed: {kept / runs:,.0f} B, "
        f"{(len(lasting(after)) - len(lasting(before))) / runs:.2f} keys (target <= 64 B) "
        f"{verdict(kept / runs <= 64)}, and {capped / runs:,.0f} B a run of capped streams "
        "filling up; the run's own: "
        + (", ".join(f"{kind} {n / runs:.1f}" for kind, n in kinds.most_common(4)) or "none")
        + "; growth of keys of no run: "
        + (
            ", ".join(f"{kind} {n / runs:+,.0f} B" for kind, n in shared.most_common(4) if n)
            or "none"
        )
    )
    report.say(
        f"Redis keys without a TTL per run: {len(no_ttl_runs) / runs:.2f} of the run's own "
        f"({sorted({k.name.rsplit(':', 1)[-1] for k in no_ttl_runs}) or '-'}) (target 0) "
        f"{verdict(not no_ttl_runs)}; keys of no run without a TTL that appeared: "
        f"{new_shared or 'none'}"
    )
    ttls = [
        k.ttl_ms / 1000 for k in after if k.run in batch_ids and k.ttl_ms > 0 and not is_outcome(k)
    ]
    if ttls:
        report.say(
            f"    the longest TTL left on an archived run's own key but its outcome record: "
            f"{max(ttls):,.0f} s "
            f"(LITTLE_ARCHIVE_TTL {archive_ttl:g} s, its seal marker a little longer; target "
            f"<= that + 60 s) {verdict(max(ttls) <= archive_ttl + 60)}"
        )
    say_run_keys(report, live, after, batch_ids, archive_ttl)


def say_run_keys(
    report: Report, live: list[Key], after: list[Key], batch_ids: set[str], archive_ttl: float
) -> None:
    """The issue's rows on two of a run's keys: its ``:ended`` marker (a key, not a stream)
    and its lease-token counters (expiring with the run)."""
    runs = len(batch_ids)
    ended = [k for k in live if k.run in batch_ids and k.name.endswith(":ended")]
    ended_after = [k for k in after if k.run in batch_ids and k.name.endswith(":ended")]
    limit_ms = (archive_ttl + 60) * 1000
    if ended:
        kinds = sorted({k.kind for k in ended})
        ok = kinds == ["string"] and all(0 < k.ttl_ms <= limit_ms for k in ended_after)
        report.say(
            f"`:ended` marker: {kinds}, {sum(k.size for k in ended) / len(ended):,.0f} B per "
            f"ended run, the longest TTL once archived "
            f"{max((k.ttl_ms for k in ended_after), default=0) / 1000:,.0f} s "
            f"(target: a key, not a stream, that expires with the log) {verdict(ok)}"
        )
    tokens = [k for k in after if k.run in batch_ids and k.name.endswith(":tokens")]
    counters = [k for k in after if "lease-token:" in k.name and k.ttl_ms == -1]
    ok = all(0 < k.ttl_ms <= limit_ms for k in tokens) and not counters
    report.say(
        f"lease-token counters: {len(tokens) / runs:.2f} hash per run once archived, the "
        f"longest TTL {max((k.ttl_ms for k in tokens), default=0) / 1000:,.0f} s; "
        f"{len(counters)} counters without a TTL (target: expire with their run) {verdict(ok)}"
    )


def say_s3(report: Report, batch: Batch, label: str, per_step_put_target: float) -> None:
    runs = len(batch.run_ids)
    steps = runs * batch.steps_per_run
    parts = ", ".join(
        f"{kind} {code}: {count / runs:.2f}" for (kind, code), count in sorted(batch.s3.items())
    )
    puts = sum(c for (kind, _), c in batch.s3.items() if kind == "PUT")
    # GETs that found nothing: a run id given by its caller, looked for among the archives
    # before its start (one each); the others' are reads, 0 per run for a workflow seen
    # before (a process's first read of a shared version part is amortized: < 0.05 a run).
    missing = sum(c for (kind, code), c in batch.s3.items() if kind == "GET" and code == "404")
    gets = sum(c for (kind, _), c in batch.s3.items() if kind == "GET") - missing
    report.say(f"S3 per {label} run ({batch.steps_per_run} steps): {parts or 'none'}")
    report.say(
        f"    PUT {puts / runs:.2f}/run ({puts / steps:.2f}/step; raw put_object of the log: "
        f"1/run, ratio {puts / runs:.2f}), GET {gets / runs:.2f}/run "
        f"(targets: <= {per_step_put_target:g} PUT/step, 0 GET) "
        f"{verdict(puts / steps <= per_step_put_target and gets / runs < 0.05)}"
    )
    if batch.given_ids or missing:
        given = max(batch.given_ids, 1)
        report.say(
            f"    GET 404 {missing / given:.2f} per run whose id its caller gave "
            f"({batch.given_ids} of them; target <= 1: one look among the archives) "
            f"{verdict(missing <= given)}"
        )


#: The timed submits whose run ids the caller gives (see :func:`time_submits`).
GIVEN_IDS = "a run id given by the caller (S3 asked first)"


def say_submit(
    report: Report, batch: Batch, raw: Sequence[float], idle: Mapping[str, Timed]
) -> None:
    p50, p99 = percentile(batch.submit_s, 0.5), percentile(batch.submit_s, 0.99)
    raw50 = statistics.median(raw)
    report.say(
        f"Client.submit while the fleet runs the runs: p50 {p50 * 1000:.2f} ms, p99 "
        f"{p99 * 1000:.2f} ms, {len(batch.submit_s) / batch.submit_wall:.0f} runs/s from one "
        f"thread; raw XADD p50 {raw50 * 1000:.2f} ms, ratio {p50 / raw50:.1f} "
        f"(target p50 <= 3 ms, on CPUs the fleet shares) {verdict(p50 <= 0.003)}"
    )
    report.say(f"    {batch.timed.cost()}")
    for label, timed in idle.items():
        seconds = timed.seconds
        p50, p99 = percentile(seconds, 0.5), percentile(seconds, 0.99)
        # A run id given by the caller costs a look at S3 (was such a run archived?) and a
        # second round trip: twice a made-up id's target.
        target = 0.006 if label == GIVEN_IDS else 0.003
        report.say(
            f"Client.submit, workers stopped, {label}: p50 {p50 * 1000:.2f} ms, p99 "
            f"{p99 * 1000:.2f} ms; ratio to raw XADD {p50 / raw50:.1f} "
            f"(target p50 <= {target * 1000:g} ms) {verdict(p50 <= target)}"
        )
        report.say(f"    {timed.cost()}")
    if batch.batch_rate is not None:
        report.say(
            f"Client.submit_many: {batch.batch_rate:,.0f} runs/s (target >= 2,000) "
            f"{verdict(batch.batch_rate >= 2000)}"
        )
    else:
        report.say("Client.submit_many: not available in this build (target >= 2,000 runs/s)")


def say_backlog(
    report: Report, backlog: Backlog, drained: float | None, archive_delay: float
) -> None:
    samples = backlog.samples
    step = max(1, len(samples) // 12)
    report.say("archive backlog over time (s: submitted / ended / not archived):")
    report.say("    " + ", ".join(f"{t:.0f}: {s}/{e}/{w}" for t, s, e, w in samples[::step]))
    peak = max((w for _, _, _, w in samples), default=0)
    report.say(
        f"    peak {peak} runs not archived; drained "
        + (f"{drained:.1f} s after the last run ended" if drained is not None else "NOT in time")
        + f" (target: drains on its own) {verdict(drained is not None)}"
    )
    say_archive_rate(report, backlog, archive_delay)


def archive_rates(
    samples: Sequence[tuple[float, int, int, int]],
    drains: Sequence[tuple[int, float]],
    archive_delay: float,
) -> tuple[float, float] | None:
    """(runs ended per second under load, runs archived per second with a backlog): the
    first from the samples taken while runs ended (first to last end), the second from the
    drains (the runs waiting when the last one ended over the seconds they took, less the
    archive delay every run waits first). None without both."""
    ending = [(t, e) for t, _, e, _ in samples]
    first = next(((t, e) for t, e in ending if e > 0), None)
    last = max(ending, key=lambda te: (te[1], -te[0]), default=None)
    waited = [(n, seconds - archive_delay) for n, seconds in drains if n > 0]
    if first is None or last is None or last[0] <= first[0] or not waited:
        return None
    completion = (last[1] - first[1]) / (last[0] - first[0])
    archive = sum(n for n, _ in waited) / max(sum(s for _, s in waited), 0.5)
    return completion, archive


def say_archive_rate(report: Report, backlog: Backlog, archive_delay: float) -> None:
    rates = archive_rates(backlog.samples, backlog.drains, archive_delay)
    if rates is None:
        report.say("archive throughput: not measured (no run ended under load)")
        return
    completion, archive = rates
    report.say(
        f"archive throughput {archive:,.0f} runs/s with a backlog vs {completion:,.0f} runs/s "
        f"ended under load: {archive / completion:.1f}x (target >= 2x) "
        f"{verdict(archive >= 2 * completion)}"
    )


#: RSS growth per 1,000 runs over the later window that counts as flat (the issue measured
#: +0.2 MiB for the scheduler and +0.5 MiB for a worker at 4,000 -> 8,000 runs).
RSS_FLAT_MIB = 1.0


def say_rss(
    report: Report,
    names: Sequence[str],
    samples: Sequence[Sequence[int]],
    first_runs: int,
    half_runs: int,
) -> None:
    """RSS (KiB) per process at: the start, after the first ``first_runs`` runs, after each
    of two halves of ``half_runs`` more. Growth over the warm-up (the first runs and the
    first half) is reported; the target is on the second half's."""
    start, measured, half, end = samples

    def per_1000(a: int, b: int, runs: int) -> float:
        return (b - a) / 1024 / max(runs, 1) * 1000

    parts = []
    ok = True
    for index, name in enumerate(names):
        later = per_1000(half[index], end[index], half_runs)
        ok = ok and later <= RSS_FLAT_MIB
        parts.append(
            f"{name} {end[index] / 1024:.1f} MiB (warm-up: "
            f"{per_1000(start[index], measured[index], first_runs):+.2f} over the first "
            f"{first_runs:,}, {per_1000(measured[index], half[index], half_runs):+.2f} over "
            f"the next {half_runs:,}; then {later:+.2f} MiB/1,000 runs)"
        )
    report.say(
        f"RSS per 1,000 runs over the last {half_runs:,} of {first_runs + 2 * half_runs:,} "
        f"runs: " + ", ".join(parts) + f" (target <= {RSS_FLAT_MIB:g} MiB/1,000 runs in the "
        f"later window) {verdict(ok)}"
    )


# -- main --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/cost.py", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="5-step chain runs measured")
    parser.add_argument("--fan-runs", type=int, default=None, help="20-branch runs (runs/5)")
    parser.add_argument("--batch", type=int, default=100, help="runs per submit_many call")
    parser.add_argument("--concurrency", type=int, default=8, help="slots per worker process")
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument(
        "--rss-runs",
        type=int,
        default=4000,
        help="chain runs after the others, in two halves: RSS growth over the second half",
    )
    parser.add_argument("--worker-arg", action="append", default=[], metavar="ARG")
    args = parser.parse_args(argv)
    ROUND_TRIPS.install()
    fan_runs = args.fan_runs if args.fan_runs is not None else max(1, args.runs // 5)
    redis_url = os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL)

    import redis as redis_lib

    from tests import fleet_app
    from tests.s3_server import _free_ports, start_weed_mini

    prefix = f"little-cost-{uuid.uuid4().hex[:10]}:"
    redis = redis_lib.Redis.from_url(redis_url)
    redis.ping()
    report = Report()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")} | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        REDIS_URL_ENV: redis_url,
    }
    queues = [f"{prefix}{r}" for r in ("planner", "orchestrator", "worker", "fixer")]
    with tempfile.TemporaryDirectory(prefix="little-cost-") as tmp:
        tmp_path = Path(tmp)
        procs = Procs(tmp_path)
        metrics_port = _free_ports(1)[0]
        s3 = start_weed_mini(tmp_path / "seaweedfs", "little-cost", metrics_port=metrics_port)
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        script = fleet_app.build_script(think_latency=0.0).save(tmp_path / "script.json")
        env = engine_env(base_env, prefix, redis_url, s3, script, args)
        engine = start_engine(procs, env, args)
        try:
            report.say(
                f"cost benchmark: 1 scheduler + 2 workers x {args.concurrency} threads, "
                f"{args.runs} chain runs ({CHAIN_STEPS} steps), {fan_runs} fan runs "
                f"({FAN_BRANCHES} branches), Redis {redis_url}, {os.cpu_count()} CPUs"
            )
            # Warm-up: imports, the workflows' first compile.
            engine.run(fleet_app.chain5, chain_input(-1), timeout=120)
            engine.run(fleet_app.fan1000, fan_input(-1), timeout=120)
            backlog = Backlog(redis, f"{prefix}world:runs")
            drain(backlog, args.drain_timeout)
            backlog.samples.clear()
            backlog.drains.clear()
            raw_latency = raw_xadd_latency(redis, f"{prefix}raw:latency")
            before = snapshot(redis, prefix)
            pids = [engine.scheduler.popen.pid, *(w.popen.pid for w in engine.workers)]
            names = ["scheduler", *(w.name for w in engine.workers)]
            rss_before = [rss_kib(pid) for pid in pids]
            sampler = threading.Thread(target=backlog.run, daemon=True)
            sampler.start()

            chains = Batch("chain", CHAIN_STEPS)
            s3_before = s3_requests(metrics, s3.bucket)
            idle = {
                "a new input each": time_submits(
                    engine, chains, fleet_app.chain5, chain_input, args.runs // 2
                ),
                "the version seen (same input)": time_submits(
                    engine, chains, fleet_app.chain5, lambda _: {"n": -1}, args.runs // 2
                ),
                GIVEN_IDS: time_submits(
                    engine,
                    chains,
                    fleet_app.chain5,
                    chain_input,
                    max(1, args.runs // 4),
                    given_ids=True,
                ),
            }
            backlog.submitted += len(chains.run_ids)
            wait_all(engine, list(chains.run_ids), backlog)
            submit_batch(engine, chains, fleet_app.chain5, chain_input, args.runs, backlog)
            if hasattr(engine.client, "submit_many"):
                submit_many_batch(
                    engine, chains, fleet_app.chain5, chain_input, args.runs, args.batch, backlog
                )
            chains.live = snapshot(redis, prefix)
            drained = drain(backlog, args.drain_timeout)
            chains.s3 = s3_requests(metrics, s3.bucket) - s3_before
            after_chains = snapshot(redis, prefix)

            fans = Batch("fan", FAN_BRANCHES + 1)
            s3_before = s3_requests(metrics, s3.bucket)
            submit_batch(engine, fans, fleet_app.fan1000, fan_input, fan_runs, backlog)
            fans.live = snapshot(redis, prefix)
            drained_fans = drain(backlog, args.drain_timeout)
            fans.s3 = s3_requests(metrics, s3.bucket) - s3_before
            backlog.stop()
            after = snapshot(redis, prefix)
            rss_after = [rss_kib(pid) for pid in pids]
            # RSS over a later window: two more halves of chain runs (submit_many), sampled
            # at their ends; the second half's growth is what a long-lived fleet pays.
            # (their own backlog: the figures of (c) stay those of the runs above)
            rss_window = [rss_after]
            extra, extra_backlog = Batch("rss", CHAIN_STEPS), Backlog(redis, backlog.runs_index)
            for _ in range(2):
                submit_many_batch(
                    engine,
                    extra,
                    fleet_app.chain5,
                    chain_input,
                    args.rss_runs // 2,
                    args.batch,
                    extra_backlog,
                )
                drain(extra_backlog, args.drain_timeout)
                rss_window.append([rss_kib(pid) for pid in pids])

            sample_events = engine.world.list_events(chains.run_ids[0])
            raw_chain = raw_xadd_bytes(redis, f"{prefix}raw:xadd", sample_events)
            report.say(f"(a) {CHAIN_STEPS}-step chain runs, {len(chains.run_ids)} of them")
            say_submit(report, chains, raw_latency, idle)
            archive_ttl = engine.client.settings.archive_ttl
            say_redis(
                report,
                before,
                chains.live,
                after_chains,
                set(chains.run_ids),
                raw_chain,
                archive_ttl,
            )
            say_s3(report, chains, "chain", 0.2)
            report.say(f"(b) {FAN_BRANCHES}-branch fan runs, {len(fans.run_ids)} of them")
            raw_fan = raw_xadd_bytes(
                redis, f"{prefix}raw:xadd", engine.world.list_events(fans.run_ids[0])
            )
            say_redis(
                report, after_chains, fans.live, after, set(fans.run_ids), raw_fan, archive_ttl
            )
            say_s3(report, fans, "fan", 0.2)
            report.say("(c) archiving and memory")
            say_backlog(
                report,
                backlog,
                drained_fans if drained is not None else None,
                engine.client.settings.archive_delay,
            )
            measured = len(chains.run_ids) + len(fans.run_ids)
            say_rss(report, names, [rss_before, *rss_window], measured, args.rss_runs // 2)
        finally:
            stop_engine(engine)
            procs.stop_all()
            s3.stop()
            delete_prefix(redis, prefix, queues)
            redis.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
