"""Prometheus metrics of a real fleet: a worker and a scheduler, each with LITTLE_METRICS_PORT,
run a fan of priced model calls under a provider quota (the scripted provider refuses past
its limit with 429s) and a run whose tool fails; then ``/metrics`` of each is scraped over
HTTP and the series are checked against what happened."""

from __future__ import annotations

import json
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from little_dist.fleet.client import Client
from little_dist.observability import disable_metrics
from little_dist.testing.provider_quota import ProviderQuota
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.metrics_fleet_app import USAGE, broken, build_script, fan
from tests.ports import reserve_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

ITEMS = 8

Samples = dict[str, dict[frozenset[tuple[str, str]], float]]


def scrape(port: int) -> Samples:
    """Every sample of ``/metrics`` on ``port``: name -> labels -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    samples: Samples = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name][frozenset(sample.labels.items())] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    want = set(labels.items())
    return sum(v for key, v in samples.get(name, {}).items() if want <= key)


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_worker_and_scheduler_serve_the_fleet_series(
    fleet_env: FleetEnv, tmp_path: Path, pool: str
) -> None:
    # The provider takes one call a second: the 8 branches' calls, sent up to 6 a second, are
    # refused some of the time however slowly a busy machine starts them, and a refused call
    # waits at most a second (in its worker, not giving its slot back).
    quota = ProviderQuota(
        requests=1, period=1, redis_url=fleet_env.redis_url, name=f"{fleet_env.key_prefix}sim"
    )
    script = build_script(quota, latency=0.02).save(tmp_path / "script.json")
    rule = f"{fleet_env.key_prefix}key"
    # The limiter admits twice what the provider takes: some calls get 429s, which block the
    # rule fleet-wide, and the calls after them wait for it.
    rules = {"rules": [{"name": rule, "provider": "scripted", "requests": "6/second"}]}
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.metrics_fleet_app",
            "LITTLE_SCRIPTED_MODEL": str(script),
            "LITTLE_QUOTAS": json.dumps(rules),
        }
    )
    worker_port, scheduler_port, client_port = reserve_port(), reserve_port(), reserve_port()
    # The submitting side serves its own /metrics (this process's, turned off below).
    client = Client(fleet_env.settings(LITTLE_METRICS_PORT=str(client_port)))
    try:
        start_worker(
            fleet_env,
            app="tests.metrics_fleet_app",
            concurrency=4,
            pool=pool,
            # (prefork: the children's values in files the parent sums: multiprocess mode)
            env={"LITTLE_METRICS_PORT": str(worker_port)}
            | (
                {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")} if pool == "prefork" else {}
            ),
        )
        start_scheduler(fleet_env, env={"LITTLE_METRICS_PORT": str(scheduler_port)})
        good = client.submit(fan, {"keys": [f"k{i}" for i in range(ITEMS)]})
        bad = client.submit(broken, {})
        assert client.wait(good, timeout=120).status == "completed"
        assert client.wait(bad, timeout=120).status == "failed"
        refused = quota.refused()
        submitter = scrape(client_port)
    finally:
        quota.reset()
        disable_metrics()
        client.close()
    assert value(submitter, "little_client_submissions_total") == 2
    assert value(submitter, "little_process_info", process="client") == 1
    # A run's end is counted by the process that appended it, just after the append: the
    # client can read the end from the stream first. Scrape until both ends are counted.
    deadline = time.monotonic() + 15
    while True:
        worker, scheduler = scrape(worker_port), scrape(scheduler_port)
        both = [worker, scheduler]
        ended = sum(value(samples, "little_runs_total") for samples in both)
        if ended >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)

    def total(name: str, **labels: str) -> float:
        return sum(value(samples, name, **labels) for samples in both)

    # Runs by status and workflow: each end counted once, by whichever process appended it.
    assert total("little_runs_total", workflow="metrics.fan", status="completed") == 1
    assert total("little_runs_total", workflow="metrics.broken", status="failed") == 1
    assert total("little_runs_total") == 2

    # Step latency by role and kind: every branch's completed attempt, on the worker queue.
    completed = {"role": "worker", "outcome": "completed"}
    assert value(worker, "little_step_duration_seconds_count", kind="ai.generate", **completed) == (
        ITEMS
    )
    assert value(worker, "little_step_duration_seconds_count", kind="tool.call", **completed) == 1
    assert value(worker, "little_step_duration_seconds_count", kind="tool.call", outcome="failed")
    assert value(worker, "little_step_duration_seconds_sum", kind="ai.generate") > 0
    assert value(worker, "little_step_duration_seconds_bucket", kind="ai.generate", le="+Inf") >= 8

    # 429s per quota key, and the retries and waits they caused.
    assert refused > 0, "the provider never refused: the test did not exercise 429s"
    assert value(worker, "little_quota_rejections_total", key=rule) == refused
    assert value(worker, "little_step_failures_total", cause="model_rate_limited") == refused
    assert value(worker, "little_step_retries_total", kind="ai.generate") == refused
    assert value(worker, "little_quota_waits_total", key=rule) >= 1
    assert value(worker, "little_quota_wait_seconds_total", key=rule) > 0

    # Tokens and dollars per model (only answered calls carry usage).
    model = "openai/gpt-4o-mini"
    assert value(worker, "little_model_calls_total", model=model, outcome="ok") == ITEMS
    assert value(worker, "little_model_calls_total", model=model, outcome="error") == refused
    assert value(worker, "little_model_tokens_total", model=model, type="input") == ITEMS * USAGE[0]
    assert value(worker, "little_model_tokens_total", model=model, type="output") == (
        ITEMS * USAGE[1]
    )
    assert value(worker, "little_model_cost_dollars_total", model=model) == pytest.approx(
        ITEMS * (USAGE[0] * 0.15 + USAGE[1] * 0.60) / 1e6
    )
    assert value(worker, "little_tool_calls_total", tool="noop", outcome="ok") == 1
    assert value(worker, "little_tool_calls_total", tool="explode", outcome="error") == 1

    # Read at scrape time on the scheduler: queue depth per role (all drained) and the
    # archive backlog; series defined for others to increment are there, at zero.
    depth = scheduler["little_queue_depth"]
    assert {dict(key)["role"] for key in depth} == {"planner", "orchestrator", "worker", "fixer"}
    assert set(depth.values()) == {0.0}
    assert "little_archive_backlog" in scheduler
    assert value(scheduler, "little_process_info", process="scheduler") == 1
    if pool == "threads":  # (multiprocess mode has no info series)
        assert value(worker, "little_process_info", process="worker") == 1
    assert total("little_lease_losses_total") == 0
    # No run id or step path is ever a label (bounded cardinality).
    for samples in both:
        for series in samples.values():
            for key in series:
                assert not any(v.startswith("run_") or "[" in v for _, v in key), key
