"""Each step's attempts, and in each attempt its model calls and tool calls (pure).

The report (:mod:`little_dist.report`) sums a step's usage; the viewer also lists the calls
one by one, with their tokens and dollars, under the attempt they belong to. A call event
names its step (``stepPath``) but not its attempt: it belongs to the step's latest attempt
started before it, as :func:`~little_dist.report.model.attempt_usage_from_events` counts
(a call recorded before the step's first attempt counts toward that first attempt). Dollars
come from registry rates (or the caller's fallback), never from a payload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from little_dist.events import Event, normalize_event_type
from little_dist.pricing import ModelIdentity, ModelUsage, PriceFallback, price_model_call

__all__ = ["AttemptCalls", "ModelCall", "StepCalls", "ToolCall", "step_calls"]


@dataclass
class ModelCall:
    model: str
    turn: int | None
    input_tokens: float
    cached_input_tokens: float
    output_tokens: float
    cost_usd: float | None
    ok: bool = True


@dataclass
class ToolCall:
    tool: str
    call_id: str
    status: str = "running"  # running | succeeded | failed
    duration_ms: float | None = None


@dataclass
class AttemptCalls:
    number: int
    attempt_id: str | None
    status: str = "running"
    models: list[ModelCall] = field(default_factory=list)
    tools: list[ToolCall] = field(default_factory=list)


@dataclass
class StepCalls:
    step_path: str
    attempts: list[AttemptCalls] = field(default_factory=list)

    def current(self) -> AttemptCalls:
        if not self.attempts:
            self.attempts.append(AttemptCalls(1, None))
        return self.attempts[-1]


def _model_name(model: Any) -> str:
    if isinstance(model, Mapping):
        provider, name = model.get("provider"), model.get("modelId")
        if isinstance(name, str):
            return f"{provider}/{name}" if isinstance(provider, str) else name
    return model if isinstance(model, str) else "?"


def _model_call(
    kind: str, payload: Mapping[str, Any], fallback: PriceFallback | None
) -> ModelCall | None:
    if kind == "harness.model.responded":
        response = payload.get("response")
        usage = response.get("usage") if isinstance(response, Mapping) else None
        ok = True
    elif kind == "ModelCallCompleted":
        usage, ok = payload.get("usage"), True
    elif kind == "harness.model.failed":
        error = payload.get("error")
        usage = error.get("usage") if isinstance(error, Mapping) else None
        ok = False
    else:
        return None
    model = payload.get("model")
    if not isinstance(usage, Mapping):
        usage = {}
    priced = price_model_call(
        ModelIdentity.from_payload(model), ModelUsage.from_payload(usage), fallback=fallback
    )
    turn = payload.get("turn")
    return ModelCall(
        model=_model_name(model),
        turn=turn if isinstance(turn, int) else None,
        input_tokens=priced.input_tokens,
        cached_input_tokens=priced.cached_input_tokens,
        output_tokens=priced.output_tokens,
        cost_usd=priced.cost_usd,
        ok=ok,
    )


def step_calls(
    events: Iterable[Event], *, fallback: PriceFallback | None = None
) -> dict[str, StepCalls]:
    """Step path -> its attempts and their calls, steps in the order they first appear."""
    steps: dict[str, StepCalls] = {}
    tools: dict[str, ToolCall] = {}
    for event in events:
        payload = event.payload
        path = payload.get("stepPath")
        if not isinstance(path, str) or not path:
            continue
        step = steps.setdefault(path, StepCalls(path))
        kind = normalize_event_type(event.type)
        if kind == "StepAttemptStarted":
            attempt_id = payload.get("attemptId")
            step.attempts.append(
                AttemptCalls(
                    len(step.attempts) + 1, attempt_id if isinstance(attempt_id, str) else None
                )
            )
        elif kind in ("StepCompleted", "StepFailed"):
            step.current().status = "completed" if kind == "StepCompleted" else "failed"
        elif kind == "harness.tool_call.started":
            call_id = str(payload.get("callId", ""))
            call = ToolCall(str(payload.get("toolName", "?")), call_id)
            tools[call_id] = call
            step.current().tools.append(call)
        elif kind in ("harness.tool_call.succeeded", "harness.tool_call.failed"):
            found = tools.get(str(payload.get("callId", "")))
            if found is not None:
                found.status = "succeeded" if kind.endswith("succeeded") else "failed"
                duration = payload.get("durationMs")
                found.duration_ms = duration if isinstance(duration, int | float) else None
        else:
            model_call = _model_call(kind, payload, fallback)
            if model_call is not None:
                step.current().models.append(model_call)
    return steps
