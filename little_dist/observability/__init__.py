"""Metrics (Prometheus) and traces (OpenTelemetry) of the engine, both off by default.

:mod:`.metrics` holds the series and serves ``/metrics``; :mod:`.traces` turns runs into
traces; :mod:`.hooks` is what the engine's seams call. Importing this package imports
neither ``prometheus_client`` nor OpenTelemetry: they are imported when turned on.
"""

from __future__ import annotations

from little_dist.observability.metrics import (
    FleetMetrics,
    active_metrics,
    disable_metrics,
    enable_metrics,
    prepare_multiprocess,
)
from little_dist.observability.traces import (
    active_tracer,
    disable_tracing,
    enable_tracing,
    enable_tracing_from_env,
    run_trace_id,
)

__all__ = [
    "FleetMetrics",
    "active_metrics",
    "active_tracer",
    "disable_metrics",
    "disable_tracing",
    "enable_metrics",
    "enable_tracing",
    "enable_tracing_from_env",
    "prepare_multiprocess",
    "run_trace_id",
]
