"""Runs as OpenTelemetry traces: a span per step attempt, per model call, per tool call.

Off unless configured: :func:`enable_tracing` (``little worker`` and ``little run`` call it
when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set)
builds a tracer with the OTLP/HTTP exporter, or with the exporter given (a test's in-memory
one). Until then :func:`active_tracer` is ``None`` and the hooks do nothing more. The
``opentelemetry-sdk`` and exporter are the ``traces`` extra (``pip install
little-dist[traces]``).

One run is one trace, wherever its steps run: the trace id and the root's span id are
derived from the run id (:func:`run_span_context`), so every worker of the fleet puts its
attempts' spans in the same trace, under the same (virtual) run span, without passing a
context along. A model call's span carries the GenAI semantic conventions' attributes
(``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens``) and ``gen_ai.usage.cost`` (dollars, as
the report prices them; not in the conventions yet, the name LLM observability tools use).
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

__all__ = [
    "active_tracer",
    "disable_tracing",
    "enable_tracing",
    "enable_tracing_from_env",
    "run_span_context",
    "run_trace_id",
]

_tracer: Tracer | None = None
_provider: Any = None
_lock = threading.Lock()

#: The variables that turn tracing on (the OTLP exporter reads them and the rest itself).
OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def run_trace_id(run_id: str) -> int:
    """The trace id of run ``run_id`` (128 bits of its sha256; never 0)."""
    return int(hashlib.sha256(run_id.encode()).hexdigest()[:32], 16) or 1


def _run_span_id(run_id: str) -> int:
    return int(hashlib.sha256(run_id.encode()).hexdigest()[32:48], 16) or 1


def run_span_context(run_id: str) -> Context:
    """A context whose current span is run ``run_id``'s (remote, sampled) root: spans started
    in it belong to the run's trace on every process."""
    from opentelemetry import trace

    parent = trace.SpanContext(
        run_trace_id(run_id),
        _run_span_id(run_id),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))


def active_tracer() -> Tracer | None:
    """This process's tracer, or ``None`` when tracing is off (the hooks' one check)."""
    return _tracer


def enable_tracing(
    exporter: SpanExporter | None = None, *, service_name: str = "little-dist"
) -> Tracer:
    """Turn tracing on in this process: spans go to ``exporter`` as each ends (a test's
    in-memory exporter), or by default in batches to the OTLP/HTTP exporter configured by
    the standard ``OTEL_EXPORTER_OTLP_*`` variables. Replaces an earlier tracer."""
    global _tracer, _provider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    with _lock:
        previous, _provider = _provider, provider
        _tracer = provider.get_tracer("little_dist")
        tracer = _tracer
    if previous is not None:
        previous.shutdown()
    return tracer


def enable_tracing_from_env(service_name: str) -> bool:
    """:func:`enable_tracing` with the OTLP exporter when an ``OTEL_EXPORTER_OTLP_*``
    endpoint is set; whether it did. A missing ``traces`` extra is a one-line error."""
    if not any(os.environ.get(name) for name in OTLP_VARIABLES):
        return False
    try:
        enable_tracing(service_name=os.environ.get("OTEL_SERVICE_NAME") or service_name)
    except ImportError as exc:
        from little_dist.errors import InvalidInputError

        raise InvalidInputError(
            f"{OTLP_VARIABLES[0]} is set but tracing needs the traces extra "
            f"(pip install 'little-dist[traces]'): {exc}"
        ) from exc
    return True


def disable_tracing() -> None:
    """Turn tracing off, flushing what the exporter holds."""
    global _tracer, _provider
    with _lock:
        provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()
