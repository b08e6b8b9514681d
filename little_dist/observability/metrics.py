"""The fleet's Prometheus metrics, served on ``/metrics`` when ``LITTLE_METRICS_PORT`` is set.

Off by default: until :func:`enable_metrics` runs in a process, :func:`active_metrics` is
``None`` and every hook (:mod:`little_dist.observability.hooks`) returns after one global
read; ``prometheus_client`` is not even imported. On, one :class:`FleetMetrics` holds the
series below in a registry of its own (not ``prometheus_client``'s global one, so a test
can make several). Labels are bounded: workflow names, roles, step kinds, model names,
tool names, quota rule names and cause codes; never run ids or step paths.

A prefork worker pool forks children that record into files under
``PROMETHEUS_MULTIPROC_DIR`` (``prometheus_client``'s multiprocess mode); the parent serves
their sum. The default pool (threads) is one process and needs none of that.

``docs/operations.md`` lists the series with their labels and meaning.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "STEP_BUCKETS",
    "FleetMetrics",
    "active_metrics",
    "disable_metrics",
    "enable_metrics",
    "prepare_multiprocess",
]

#: Step attempts last from milliseconds (a tool) to many minutes (an agent loop).
STEP_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
#: Model calls: a scripted provider answers in microseconds, a real one in seconds.
MODEL_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

_active: FleetMetrics | None = None
_lock = threading.Lock()


@dataclass
class FleetMetrics:
    """The series one process records (see the module docstring); ``gauges`` are read at
    scrape time from the callables a process registers (:meth:`gauge_from`)."""

    registry: CollectorRegistry
    process: str
    gauges: dict[str, Callable[[], Mapping[tuple[str, ...], float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from prometheus_client import Counter, Histogram

        r = self.registry
        self.runs = Counter(
            "little_runs_total", "Runs ended, by status", ["workflow", "status"], registry=r
        )
        self.step_seconds = Histogram(
            "little_step_duration_seconds",
            "Step attempts' wall time on a worker, by role, step kind and outcome",
            ["role", "kind", "outcome"],
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.step_retries = Counter(
            "little_step_retries_total",
            "Step attempts started after an earlier attempt of the step (attempt > 1)",
            ["kind"],
            registry=r,
        )
        self.step_failures = Counter(
            "little_step_failures_total", "StepFailed events, by cause code", ["cause"], registry=r
        )
        self.lease_losses = Counter(
            "little_lease_losses_total",
            "Step leases lost: expired (the sweeper failed the attempt) or superseded (the "
            "worker found its lease taken)",
            ["how"],
            registry=r,
        )
        self.suspensions = Counter(
            "little_step_suspensions_total",
            "Step attempts that ended suspended, waiting for sub-runs",
            registry=r,
        )
        self.quota_waits = Counter(
            "little_quota_waits_total",
            "Model calls that waited for provider quota, by quota rule",
            ["key"],
            registry=r,
        )
        self.quota_wait_seconds = Counter(
            "little_quota_wait_seconds_total",
            "Seconds model calls waited for provider quota, by quota rule",
            ["key"],
            registry=r,
        )
        self.quota_rejections = Counter(
            "little_quota_rejections_total",
            "Provider 429 answers, by quota rule (each blocks the rule fleet-wide)",
            ["key"],
            registry=r,
        )
        self.model_calls = Counter(
            "little_model_calls_total",
            "Model calls sent, by outcome",
            ["model", "outcome"],
            registry=r,
        )
        self.model_seconds = Histogram(
            "little_model_call_duration_seconds",
            "Model calls' latency",
            ["model"],
            buckets=MODEL_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "little_model_tokens_total",
            "Tokens of model calls, by type (input, output, cached_input, reasoning)",
            ["model", "type"],
            registry=r,
        )
        self.dollars = Counter(
            "little_model_cost_dollars_total",
            "Dollars of model calls, priced as the report prices them",
            ["model"],
            registry=r,
        )
        self.tool_calls = Counter(
            "little_tool_calls_total", "Tool calls, by outcome", ["tool", "outcome"], registry=r
        )
        self.submissions = Counter(
            "little_client_submissions_total",
            "Runs a client of this process asked the fleet to start",
            registry=r,
        )
        self.budget_refusals = Counter(
            "little_budget_refusals_total",
            "Model calls not sent because they would pass a dollar budget, by scope",
            ["scope"],
            registry=r,
        )

    def gauge_from(
        self,
        name: str,
        documentation: str,
        labels: tuple[str, ...],
        read: Callable[[], Mapping[tuple[str, ...], float]],
    ) -> None:
        """Serve gauge ``name`` with the values ``read()`` gives at scrape time (by label
        values); a ``read`` that fails is skipped for that scrape."""
        from prometheus_client.core import GaugeMetricFamily
        from prometheus_client.registry import Collector

        class _Read(Collector):
            def collect(self) -> Any:
                family = GaugeMetricFamily(name, documentation, labels=list(labels))
                try:
                    values = read()
                except Exception:  # a scrape must not fail for one unreachable source
                    return
                for key, value in values.items():
                    family.add_metric(list(key), value)
                yield family

        self.registry.register(_Read())


def active_metrics() -> FleetMetrics | None:
    """This process's metrics, or ``None`` when they are off (the hooks' one check)."""
    return _active


def prepare_multiprocess(directory: str | None = None) -> str:
    """Put ``prometheus_client`` in multiprocess mode (before a prefork pool forks): every
    process records into files under ``directory`` (a new temporary one by default)."""
    path = (
        directory
        or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        or tempfile.mkdtemp(prefix="little-metrics-")
    )
    os.makedirs(path, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    from prometheus_client import values

    # The value class is chosen when prometheus_client is imported; choose again now.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    return path


def enable_metrics(
    process: str, *, port: int | None = None, addr: str = "0.0.0.0", serve: bool = True
) -> FleetMetrics:
    """Turn the metrics on in this process (idempotent: the first call's stay) and, with a
    ``port``, serve them on ``http://addr:port/metrics``. ``process`` names what this
    process is (``worker``, ``scheduler``, ``client``) in the ``little_process_info``
    series. In multiprocess mode (:func:`prepare_multiprocess`) the server serves every
    process's files."""
    global _active
    from prometheus_client import CollectorRegistry, Info, start_http_server

    with _lock:
        if _active is not None:
            return _active
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        multiprocess = bool(directory)
        if directory:  # (set by hand: prometheus_client writes there from the first value)
            os.makedirs(directory, exist_ok=True)
        registry = CollectorRegistry(auto_describe=True)
        metrics = FleetMetrics(registry, process)
        if not multiprocess:
            Info("little_process", "What this process is", registry=registry).info(
                {"process": process}
            )
        if serve and port is not None:
            served = registry
            if multiprocess:
                from prometheus_client import multiprocess as mp

                served = CollectorRegistry()
                mp.MultiProcessCollector(served)  # type: ignore[no-untyped-call]
                metrics.registry = served  # (scrape-time gauges join the files' sum)
            start_http_server(port, addr=addr, registry=served)
        _active = metrics
        return metrics


def disable_metrics() -> None:
    """Turn the metrics off in this process (tests and benches; the server keeps running)."""
    global _active
    with _lock:
        _active = None
