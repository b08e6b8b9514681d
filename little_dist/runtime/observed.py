"""``execute_step_attempt`` observed: its wall time, retries and lost leases as metrics, and
its span in the run's trace, when metrics or traces are on (:mod:`little_dist.observability`).
Off, the wrapper reads two switches and calls through."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from little_dist.observability import hooks, metrics, traces
from little_dist.scheduling.context import StepPathError, locate_step
from little_dist.scheduling.step_graph import plan_for

__all__ = ["observed_attempt"]

P = ParamSpec("P")
R = TypeVar("R")


def observed_attempt(execute: Callable[P, R]) -> Callable[P, R]:
    """Wrap ``execute_step_attempt(world, dispatch, *, version, ...)`` (see the module)."""

    @functools.wraps(execute)
    def observed(*args: P.args, **kwargs: P.kwargs) -> R:
        if metrics.active_metrics() is None and traces.active_tracer() is None:
            return execute(*args, **kwargs)
        dispatch: Any = args[1] if len(args) > 1 else kwargs.get("dispatch")
        kind = _step_kind(kwargs.get("version"), dispatch.step_path)
        span, token = _start_span(dispatch, kind)
        started = time.perf_counter()
        outcome = "error"
        try:
            result = execute(*args, **kwargs)
            outcome = str(getattr(result, "value", result))
            return result
        finally:
            hooks.attempt_ended(kind, dispatch.attempt, outcome, time.perf_counter() - started)
            if span is not None:
                _end_span(span, token, outcome)

    return observed


def _start_span(dispatch: Any, kind: str) -> tuple[Any, Any]:
    tracer = traces.active_tracer()
    if tracer is None:
        return None, None
    from opentelemetry import context, trace

    span = tracer.start_span(
        f"step {dispatch.step_path}",
        context=traces.run_span_context(dispatch.run_id),
        attributes={
            "little.run.id": dispatch.run_id,
            "little.step.path": dispatch.step_path,
            "little.step.kind": kind,
            "little.step.attempt": dispatch.attempt,
            "little.role": hooks.current_role(),
        },
    )
    return span, context.attach(trace.set_span_in_context(span))


def _end_span(span: Any, token: Any, outcome: str) -> None:
    from opentelemetry import context
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("little.step.outcome", outcome)
    if outcome == "error":
        span.set_status(Status(StatusCode.ERROR))
    span.end()
    context.detach(token)


def _step_kind(version: Any, path: str) -> str:
    if version is None:
        return "unknown"
    try:
        uses = locate_step(plan_for(version), path).step.raw.get("uses")
    except StepPathError:
        return "unknown"
    return uses if isinstance(uses, str) else "unknown"
