"""The metrics in process: the series a run records, the queue depth read from a real Redis,
and the sample Grafana dashboard, which must name only series the engine serves."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from little_dist import run_workflow
from little_dist.fleet.observing import queue_depths
from little_dist.observability import FleetMetrics, disable_metrics, enable_metrics
from little_dist.observability.hooks import budget_refused, events_appended
from little_dist.settings import load_settings
from little_dist.world.in_process import MemoryWorld
from tests.metrics_fleet_app import USAGE, build_script, fan

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def metrics() -> Iterator[FleetMetrics]:
    disable_metrics()
    found = enable_metrics("test", serve=False)
    try:
        yield found
    finally:
        disable_metrics()


def sample(metrics: FleetMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_an_in_process_run_records_steps_model_calls_and_tools(metrics: FleetMetrics) -> None:
    with build_script().installed():
        run_workflow(fan, {"keys": ["a", "b"]}, world=MemoryWorld())
    local = {"role": "local", "outcome": "completed"}
    assert sample(metrics, "little_step_duration_seconds_count", kind="ai.generate", **local) == 2
    assert sample(metrics, "little_step_duration_seconds_count", kind="tool.call", **local) == 1
    model = "openai/gpt-4o-mini"
    assert sample(metrics, "little_model_tokens_total", model=model, type="input") == 2 * USAGE[0]
    assert sample(metrics, "little_model_cost_dollars_total", model=model) > 0
    assert sample(metrics, "little_tool_calls_total", tool="noop", outcome="ok") == 1
    assert sample(metrics, "little_step_retries_total", kind="ai.generate") == 0


def test_metrics_off_record_nothing(metrics: FleetMetrics) -> None:
    disable_metrics()
    with build_script().installed():
        run_workflow(fan, {"keys": ["a"]}, world=MemoryWorld())
    budget_refused("run")
    assert sample(metrics, "little_step_duration_seconds_count", kind="tool.call") == 0
    assert sample(metrics, "little_budget_refusals_total", scope="run") == 0


def test_a_lease_expiry_and_run_ends_are_counted_from_the_appended_events(
    metrics: FleetMetrics,
) -> None:
    from little_dist.events import Event

    def event(kind: str, payload: dict[str, object]) -> Event:
        return Event(
            eventId="evt_0000000000000000",
            runId="run_x",
            sequence=1,
            type=kind,
            recordedAt="2026-01-01T00:00:00.000Z",
            payload=payload,
        )

    events_appended(
        [
            event("StepFailed", {"error": {"causeCode": "lease_expired"}}),
            event("RunFailed", {"error": {"causeCode": "cancelled"}}),
            event("RunFailed", {"workflowVersionId": 3, "error": {"causeCode": "x" * 100}}),
        ]
    )
    assert sample(metrics, "little_lease_losses_total", how="expired") == 1
    assert sample(metrics, "little_step_failures_total", cause="lease_expired") == 1
    assert sample(metrics, "little_runs_total", workflow="unknown", status="cancelled") == 1
    assert sample(metrics, "little_runs_total", workflow="unknown", status="failed") == 1


def test_queue_depth_counts_every_priority_level_of_each_roles_queue(redis_url: str) -> None:
    import redis

    tag = uuid.uuid4().hex[:8]
    env = {f"LITTLE_QUEUE_{role.upper()}": f"q-{tag}-{role}" for role in ("planner", "worker")}
    settings = load_settings({"LITTLE_REDIS_URL": redis_url, **env})
    client = redis.Redis.from_url(redis_url)
    worker = settings.queue_for("worker")
    keys = [worker, f"{worker}\x06\x163", f"{worker}\x06\x169", settings.queue_for("planner")]
    try:
        client.rpush(keys[0], "a", "b")
        client.rpush(keys[1], "c")
        client.rpush(keys[2], "d")
        client.rpush(keys[3], "e")
        depths = queue_depths(client, settings)
    finally:
        client.delete(*keys)
        client.close()
    assert depths["worker"] == 4 and depths["planner"] == 1
    # (orchestrator and fixer keep their default names here: other tests may fill those)
    assert set(depths) == {"planner", "orchestrator", "worker", "fixer"}


def test_the_grafana_dashboard_parses_and_names_only_served_series() -> None:
    dashboard = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs
    served = set()
    for family in FleetMetrics(CollectorRegistry(), "test").registry.collect():
        # (a labelled series has no sample before its first value: its names by type)
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        served.update(family.name + end for end in suffixes.get(family.type, [""]))
    served |= {"little_queue_depth", "little_archive_backlog"}  # (read at scrape time)
    used = {name for expr in exprs for name in re.findall(r"\blittle_[a-z_]+", expr)}
    assert used and used <= served, used - served
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
