"""The engine's seams call these: each records a metric and/or a span when they are on.

Each hook first reads the two switches (:func:`~.metrics.active_metrics`,
:func:`~.traces.active_tracer`) and returns when both are off: that is all metrics and
traces cost a process that did not turn them on.

The seams: :func:`events_appended` (the Redis world's event log, after every append),
:func:`attempt_ended` (``little_dist.runtime.observed``, around ``execute_step_attempt``),
:func:`model_call_ended` (``call_model``), :func:`tool_call_ended` (the recorder's tool
endings), :func:`quota_waited` / :func:`quota_rejected` (``call_model``'s quota hold), and
:func:`task_started` (Celery's ``task_prerun``: the fleet role an attempt runs under).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.observability import metrics as _metrics
from little_dist.observability import traces as _traces

if TYPE_CHECKING:
    from little_dist.events import Event

__all__ = [
    "attempt_ended",
    "current_role",
    "events_appended",
    "model_call_ended",
    "quota_rejected",
    "quota_waited",
    "set_version_namer",
    "submitted",
    "task_started",
    "tool_call_ended",
]

#: The fleet role (queue) the current task serves; ``local`` in process.
_role: contextvars.ContextVar[str] = contextvars.ContextVar("little_role", default="local")

_namer: Callable[[str], str | None] | None = None
_names: OrderedDict[str, str] = OrderedDict()
_names_lock = threading.Lock()
_NAMES_KEPT = 512


def task_started(role: str) -> None:
    """The task now running on this thread serves ``role`` (its attempts are labelled so)."""
    _role.set(role)


def set_version_namer(namer: Callable[[str], str | None] | None) -> None:
    """How this process finds a workflow version's name (for ``little_runs_total``'s
    ``workflow`` label): asked once per version id, the answer remembered."""
    global _namer
    _namer = namer


def _workflow_name(version_id: Any) -> str:
    if not isinstance(version_id, str):
        return "unknown"
    with _names_lock:
        found = _names.get(version_id)
    if found is not None:
        return found
    name: str | None = None
    if _namer is not None:
        try:
            name = _namer(version_id)
        except Exception:  # a name is worth no failure of the append that ended the run
            name = None
    if not name:
        return "unknown"  # (not remembered: the next end of a run of it asks again)
    with _names_lock:
        _names[version_id] = name
        while len(_names) > _NAMES_KEPT:
            _names.popitem(last=False)
    return name


def note_workflow(version_id: str, name: str) -> None:
    """Remember ``version_id``'s workflow name (a process that has the version at hand)."""
    if _metrics._active is not None:
        with _names_lock:
            _names[version_id] = name


def events_appended(events: Sequence[Event]) -> None:
    """Count what ``events`` (just appended by this process) say: run ends, step failures,
    lease expiries."""
    m = _metrics._active
    if m is None:
        return
    for event in events:
        kind = event.type
        if kind == "StepFailed":
            cause = _cause_of(event.payload.get("error"))
            m.step_failures.labels(cause).inc()
            if cause == "lease_expired":
                m.lease_losses.labels("expired").inc()
        elif kind == "RunCompleted" or kind == "RunFailed":
            name = _workflow_name(event.payload.get("workflowVersionId"))
            status = "completed" if kind == "RunCompleted" else _run_failure_status(event)
            m.runs.labels(name, status).inc()


def _cause_of(error: Any) -> str:
    cause = error.get("causeCode") if isinstance(error, Mapping) else None
    return cause if isinstance(cause, str) and len(cause) <= 64 else "unknown"


def _run_failure_status(event: Event) -> str:
    return "cancelled" if _cause_of(event.payload.get("error")) == "cancelled" else "failed"


def current_role() -> str:
    """The fleet role the task on this thread serves (``local`` in process)."""
    return _role.get()


def attempt_ended(kind: str, attempt: int, outcome: str, seconds: float) -> None:
    """A step attempt of ``kind`` ended with ``outcome`` (an :class:`AttemptOutcome` value,
    or ``error``) after ``seconds``."""
    m = _metrics._active
    if m is None or outcome in ("busy", "already_done"):
        return
    m.step_seconds.labels(_role.get(), kind, outcome).observe(seconds)
    if attempt > 1:
        m.step_retries.labels(kind).inc()
    if outcome == "superseded":
        m.lease_losses.labels("superseded").inc()
    elif outcome == "suspended":
        m.suspensions.inc()


def _model_label(model: Mapping[str, str]) -> str:
    return f"{model.get('provider', '')}/{model.get('modelId', '')}"


def model_call_ended(
    *,
    run_id: str,
    step_path: str,
    model: Mapping[str, str],
    pricing_key: str,
    usage: Mapping[str, Any] | None,
    seconds: float,
    error: str | None = None,
) -> None:
    """A model call was answered (``usage``) or failed (``error``: its cause code)."""
    m = _metrics._active
    tracer = _traces._tracer
    if m is None and tracer is None:
        return
    label = _model_label(model)
    cost: float | None = None
    if usage is not None:
        from little_dist.pricing import price_model_call

        cost = price_model_call(pricing_key, usage).cost_usd
    if m is not None:
        m.model_calls.labels(label, "ok" if error is None else "error").inc()
        m.model_seconds.labels(label).observe(seconds)
        for field, kind in _TOKEN_FIELDS:
            count = (usage or {}).get(field)
            if isinstance(count, int | float) and not isinstance(count, bool) and count > 0:
                m.tokens.labels(label, kind).inc(count)
        if cost:
            m.dollars.labels(label).inc(cost)
    if tracer is not None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": model.get("provider", ""),
            "gen_ai.request.model": model.get("modelId", ""),
            "little.run.id": run_id,
            "little.step.path": step_path,
        }
        for field, kind in _TOKEN_FIELDS:
            count = (usage or {}).get(field)
            if isinstance(count, int | float) and not isinstance(count, bool):
                attributes[f"gen_ai.usage.{kind}_tokens"] = int(count)
        if cost is not None:
            attributes["gen_ai.usage.cost"] = cost
        if error is not None:
            attributes["error.type"] = error
        _ended_span(tracer, f"chat {model.get('modelId', '')}", run_id, seconds, attributes, error)


_TOKEN_FIELDS = (
    ("inputTokens", "input"),
    ("outputTokens", "output"),
    ("cachedInputTokens", "cached_input"),
    ("reasoningTokens", "reasoning"),
)


def tool_call_ended(
    *,
    run_id: str,
    step_path: str,
    tool_name: str,
    call_id: str,
    seconds: float,
    error: str | None = None,
) -> None:
    """A tool call returned (or failed with cause ``error``)."""
    m = _metrics._active
    tracer = _traces._tracer
    if m is None and tracer is None:
        return
    if m is not None:
        m.tool_calls.labels(tool_name, "ok" if error is None else "error").inc()
    if tracer is not None:
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool_name,
            "gen_ai.tool.call.id": call_id,
            "little.run.id": run_id,
            "little.step.path": step_path,
        }
        if error is not None:
            attributes["error.type"] = error
        _ended_span(tracer, f"execute_tool {tool_name}", run_id, seconds, attributes, error)


def _ended_span(
    tracer: Any,
    name: str,
    run_id: str,
    seconds: float,
    attributes: Mapping[str, Any],
    error: str | None,
) -> None:
    """A span that ended now and lasted ``seconds``: a child of the current span when that
    is one of this run's (the attempt's), else of the run's root."""
    from opentelemetry import trace

    current = trace.get_current_span().get_span_context()
    parent = None if current.trace_id == _traces.run_trace_id(run_id) else run_id
    end = time.time_ns()
    span = tracer.start_span(
        name,
        context=_traces.run_span_context(parent) if parent is not None else None,
        kind=trace.SpanKind.CLIENT,
        attributes=dict(attributes),
        start_time=end - int(seconds * 1e9),
    )
    if error is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, error))
    span.end(end_time=end)


def quota_waited(rule_names: Sequence[str], seconds: float) -> None:
    """A model call waited ``seconds`` for the quota of these rules before it was admitted."""
    m = _metrics._active
    if m is None or seconds <= 0:
        return
    for name in rule_names:
        m.quota_waits.labels(name).inc()
        m.quota_wait_seconds.labels(name).inc(seconds)


def quota_rejected(rule_names: Sequence[str]) -> None:
    """The provider answered 429 to a call under these rules."""
    m = _metrics._active
    if m is None:
        return
    for name in rule_names:
        m.quota_rejections.labels(name).inc()


def submitted(count: int) -> None:
    """A client submitted ``count`` runs (before they start: a refused one counts too)."""
    m = _metrics._active
    if m is not None:
        m.submissions.inc(count)


def budget_refused(scope: str) -> None:
    """A model call was not sent: it would pass a dollar budget of ``scope`` (``run``,
    ``key_daily``, ...): :mod:`little_dist.harness.budget_hold` counts a run's."""
    m = _metrics._active
    if m is not None:
        m.budget_refusals.labels(scope).inc()
