"""Provider quotas on the fleet: a quota-bound workload with the limiter on, then off.

Run from the repository root (Redis on 127.0.0.1:6379 by default; db 15, keys under a
unique prefix, deleted at the end)::

    .venv/bin/python bench/quota.py            # scaled down: about a minute
    .venv/bin/python bench/quota.py --full     # the issue's size: 2 x 16 slots, 400 steps,
                                               # 600 RPM and 150k TPM (about 10 minutes)

It starts ``weed mini`` (S3), one ``little scheduler`` and two ``little worker`` processes
(``--app tests.quota_fleet_app``), whose scripted provider enforces the quota itself (the
simulator: :mod:`little_dist.testing.provider_quota`, Redis-backed, shared by both workers)
and answers 429 with ``Retry-After`` beyond it. The workload: ``--runs`` runs of
``quota.fan`` submitted at once, ``--steps`` model calls in all, each padded with
``--prompt-words`` words.

Figures:

(a) limiter on (``LITTLE_QUOTAS`` = the provider's quota): wall time from the first submit to
    the last run's end against the quota-bound ideal, and the number of 429s. The ideal: the
    provider's moving window admits ``limit`` at once, and nothing more until those calls
    leave it one period later, so ``N`` units of a limit need ``(ceil(N / limit) - 1) x
    period`` seconds (none when they fit one period), plus one call's latency; the binding
    limit (requests or tokens, by what the provider counted) gives it. Targets: wall/ideal
    <= 1.1, no 429. Also printed: when the first call arrived after the first submit (the
    engine's start of a run, not the quota's), how long the calls took to arrive, and when
    the last run ended after the last call arrived.
(b) the same workload, the limiter off: wall time, 429s, and branches that ran out of their
    attempts (the engine retries a 429 at once, ``ATTEMPTS`` times).
(c) the limiter's own cost per call when no limit binds: the estimate (litellm's token
    counter), the reservation and the settlement on the same Redis, as a model call pays
    them, ``--latency-calls`` times one after another: p50 and p99. Target: p50 <= 1 ms.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.fleet import Procs, percentile, wait_for_consumers  # noqa: E402

REDIS_URL_ENV = "LITTLE_BENCH_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/15"
WORKERS = 2


def build_env(
    base: Mapping[str, str], prefix: str, redis_url: str, s3: Any, script: Path, args: Any
) -> dict[str, str]:
    env = {
        **base,
        "LITTLE_REDIS_URL": redis_url,
        "LITTLE_BROKER_URL": redis_url,
        "LITTLE_WORLD": f"{redis_url}?key_prefix={prefix}world:&s3_prefix={prefix}",
        "LITTLE_S3_ENDPOINT": s3.endpoint,
        "LITTLE_S3_BUCKET": s3.bucket,
        "AWS_ACCESS_KEY_ID": "little-test",
        "AWS_SECRET_ACCESS_KEY": "little-test-secret",
        "LITTLE_APP": "tests.quota_fleet_app",
        "LITTLE_SIGNAL_STREAM": f"{prefix}signals",
        "LITTLE_SIGNAL_GROUP": f"{prefix}schedulers",
        "LITTLE_WORKER_POOL": "threads",
        "LITTLE_WORKER_CONCURRENCY": str(args.concurrency),
        "LITTLE_SCRIPTED_MODEL": str(script),
        "LITTLE_NETWORK_GUARD": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # A call may wait a whole period (and its latency) for its turn.
        "LITTLE_QUOTA_MAX_WAIT": str(args.period * 2 + 30),
    }
    for role in ("planner", "orchestrator", "worker", "fixer"):
        env[f"LITTLE_QUEUE_{role.upper()}"] = f"{prefix}{role}"
    return env


class Fleet:
    """A scheduler and two workers on ``env``; stopped by :meth:`stop`."""

    def __init__(self, procs: Procs, env: dict[str, str], args: Any, tag: str) -> None:
        from celery import Celery

        from little_dist.fleet.client import Client
        from little_dist.settings import load_settings
        from little_dist.world.factory import world_from_settings

        self.procs = procs
        settings = load_settings(env)
        little = [sys.executable, "-m", "little_dist.cli"]
        self.running = [
            procs.spawn(f"scheduler-{tag}", [*little, "scheduler", "--name", f"sched-{tag}"], env)
        ]
        for index in range(WORKERS):
            self.running.append(
                procs.spawn(
                    f"worker-{tag}-{index}",
                    [
                        *little,
                        "worker",
                        "--roles",
                        "worker,fixer",
                        "--app",
                        "tests.quota_fleet_app",
                        "--concurrency",
                        str(args.concurrency),
                        "--hostname",
                        f"quota{index}-{uuid.uuid4().hex[:8]}@localhost",
                        "--loglevel",
                        "WARNING",
                    ],
                    env,
                )
            )
        probe = Celery("little-bench-probe", broker=settings.broker_url)
        try:
            wait_for_consumers(probe, settings.queue_for("worker"), WORKERS, procs, timeout=120)
        finally:
            probe.close()
        self.world = world_from_settings(settings)
        self.client = Client(settings, world=self.world)

    def run_all(self, inputs: Sequence[Any], timeout: float) -> tuple[float, float, list[Any]]:
        """Submit every run at once, wait for all; (wall seconds, ``time.time()`` of the
        first submit, final states)."""
        from tests.quota_fleet_app import fan

        started, at = time.perf_counter(), time.time()
        run_ids = [self.client.submit(fan, run_input) for run_input in inputs]
        states = [self.client.wait(run_id, timeout=timeout) for run_id in run_ids]
        return time.perf_counter() - started, at, states

    def stop(self) -> None:
        for proc in self.running:
            self.procs.stop(proc, grace=15)
        self.client.close()
        self.world.close()


def workload(args: Any) -> list[dict[str, Any]]:
    pad = " ".join(f"word{index % 97}" for index in range(args.prompt_words))
    per_run = -(-args.steps // args.runs)
    inputs = []
    for run in range(args.runs):
        keys = [
            f"r{run}-{item}" for item in range(run * per_run, min((run + 1) * per_run, args.steps))
        ]
        if keys:
            inputs.append({"keys": keys, "pad": pad})
    return inputs


def ideal_seconds(served: Sequence[tuple[float, int]], args: Any) -> tuple[float, str]:
    """The quota-bound ideal (see the module docs) and the limit that binds."""
    total = sum(tokens for _, tokens in served)
    bounds = {
        "requests": (math.ceil(len(served) / args.requests) - 1) * args.period,
        "tokens": (math.ceil(total / args.tokens) - 1) * args.period,
    }
    binding = max(bounds, key=lambda name: bounds[name])
    return bounds[binding] + args.latency, binding


def branches_failed(states: Sequence[Any]) -> int:
    failed = 0
    for state in states:
        for path, step in state.steps.items():
            if "[" in path and step.status == "failed":
                failed += 1
    return failed


def limiter_latency(redis_url: str, calls: int) -> list[float]:
    """(c): estimate + reserve + settle on Redis, as a call pays them, no limit binding."""
    import redis

    from little_dist.harness.quota_estimate import call_identity, estimate_amounts
    from little_dist.quotas import QuotaLimiter, RedisQuotaBackend, parse_quotas

    name = f"little-bench-latency-{uuid.uuid4().hex[:8]}"
    rules = parse_quotas(
        json.dumps({"rules": [{"name": name, "provider": "scripted", "requests": 10**9,
                               "tokens": 10**12, "concurrent": 10**6}]})
    )  # fmt: skip
    client = redis.Redis.from_url(redis_url)
    limiter = QuotaLimiter(rules, RedisQuotaBackend(client))
    messages = [
        {"role": "system", "content": "You are a careful assistant. Answer briefly."},
        {"role": "user", "content": "Think briefly about item r0-1 and answer."},
    ]
    settings = {"max_tokens": 64}
    spent = []
    try:
        for _ in range(calls + 50):
            started = time.perf_counter()
            call = call_identity("scripted/quota", settings)
            amounts = estimate_amounts(
                "scripted/quota", messages, (), settings, default_output_tokens=1
            )
            held = limiter.reserve(call, amounts)
            assert held is not None
            held.settle(amounts.input_tokens, 20)
            spent.append(time.perf_counter() - started)
    finally:
        for key in client.scan_iter(match="{little:quota}:" + name + "*"):
            client.delete(key)
        client.close()
    return spent[50:]  # (the first calls load the scripts and the tokenizer)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/quota.py", description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the issue's size (see the docs)")
    parser.add_argument("--concurrency", type=int, default=8, help="slots per worker (8)")
    parser.add_argument("--steps", type=int, default=120, help="model calls in all (120)")
    parser.add_argument("--runs", type=int, default=4, help="runs they are split into (4)")
    parser.add_argument("--period", type=int, default=10, help="quota period, seconds (10)")
    parser.add_argument("--requests", type=int, default=80, help="requests per period (80)")
    parser.add_argument("--tokens", type=int, default=4000, help="tokens per period (4000)")
    parser.add_argument("--prompt-words", type=int, default=0, help="words added per prompt")
    parser.add_argument("--latency", type=float, default=0.2, help="provider seconds per call")
    parser.add_argument("--latency-calls", type=int, default=2000, help="calls timed in (c)")
    parser.add_argument("--skip-off", action="store_true", help="do not measure (b)")
    args = parser.parse_args(argv)
    if args.full:
        args.concurrency, args.steps, args.runs, args.period = 16, 400, 8, 60
        args.requests, args.tokens, args.prompt_words = 600, 150_000, 1000
    redis_url = os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL)

    import redis as redis_lib

    from little_dist.testing.provider_quota import ProviderQuota
    from tests.quota_fleet_app import ATTEMPTS, build_script
    from tests.s3_server import start_weed_mini

    prefix = f"little-bench-{uuid.uuid4().hex[:10]}:"
    redis = redis_lib.Redis.from_url(redis_url)
    redis.ping()
    base = {k: v for k, v in os.environ.items() if not k.startswith("LITTLE_")} | {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    }
    quota = ProviderQuota(
        requests=args.requests,
        tokens=args.tokens,
        period=args.period,
        redis_url=redis_url,
        name=f"{prefix}provider",
    )
    rules = {"rules": [{"name": f"{prefix}key", "provider": "scripted",
                        "requests": args.requests, "tokens": args.tokens,
                        "period": args.period}]}  # fmt: skip
    inputs = workload(args)
    timeout = max(600.0, args.steps * 10.0)
    print(
        f"quota benchmark: {WORKERS} workers x {args.concurrency} slots, {args.steps} model "
        f"calls in {len(inputs)} runs, provider quota {args.requests} requests and "
        f"{args.tokens} tokens per {args.period} s, {args.latency} s a call, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="little-bench-") as tmp:
        tmp_path = Path(tmp)
        procs = Procs(tmp_path)
        s3 = None
        try:
            s3 = start_weed_mini(tmp_path / "seaweedfs", "little-bench")
            script = build_script(quota, latency=args.latency).save(tmp_path / "script.json")
            env = build_env(base, prefix, redis_url, s3, script, args)
            for label, limited in (("(a) limiter on", True), ("(b) limiter off", False)):
                if not limited and args.skip_off:
                    continue
                quota.reset()
                mode_env = {**env, "LITTLE_QUOTAS": json.dumps(rules)} if limited else env
                fleet = Fleet(procs, mode_env, args, "on" if limited else "off")
                try:
                    wall, submitted, states = fleet.run_all(inputs, timeout)
                finally:
                    fleet.stop()
                served = quota.served()
                ideal, binding = ideal_seconds(served, args)
                tokens = sum(t for _, t in served)
                line = (
                    f"{label}: wall {wall:.1f} s, quota-bound ideal {ideal:.1f} s ({binding} "
                    f"bind: {len(served)} calls, {tokens} tokens), wall/ideal {wall / ideal:.2f}, "
                    f"429s {quota.refused()}"
                )
                if limited:
                    ok = wall / ideal <= 1.1 and quota.refused() == 0
                    line += f" (targets <= 1.10 and 0: {'OK' if ok else 'MISSED'})"
                else:
                    line += f", branches out of their {ATTEMPTS} attempts {branches_failed(states)}"
                print(line, flush=True)
                arrivals = [at for at, _ in served]
                print(
                    f"    first call {min(arrivals) - submitted:.2f} s after the first submit, "
                    f"calls over {max(arrivals) - min(arrivals):.1f} s, the last run's end "
                    f"{submitted + wall - max(arrivals):.2f} s after the last call arrived",
                    flush=True,
                )
            spent = limiter_latency(redis_url, args.latency_calls)
            p50, p99 = statistics.median(spent) * 1000, percentile(spent, 0.99) * 1000
            print(
                f"(c) limiter cost per call, no limit binding ({len(spent)} calls): p50 "
                f"{p50:.3f} ms, p99 {p99:.3f} ms (target p50 <= 1 ms: "
                f"{'OK' if p50 <= 1.0 else 'MISSED'})",
                flush=True,
            )
        finally:
            procs.stop_all()
            if s3 is not None:
                s3.stop()
            quota.reset()
            for key in redis.scan_iter(match=f"{prefix}*", count=1000):
                redis.delete(key)
            for key in redis.scan_iter(match="{little:quota}:" + prefix + "*", count=1000):
                redis.delete(key)
            for role in ("planner", "orchestrator", "worker", "fixer"):
                redis.delete(f"_kombu.binding.{prefix}{role}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
