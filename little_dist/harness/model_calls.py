"""One model turn through litellm: memo first, then the provider, recorded either way.

litellm is imported lazily, the first time a model is actually called, with
``LITELLM_LOCAL_MODEL_COST_MAP=True`` set first so the import never reaches the network.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from little_dist.canonical import sha256_digest
from little_dist.harness.budget_hold import hold_daily, settle_daily
from little_dist.harness.errors import (
    HarnessCancelled,
    ModelCallError,
    model_error_from,
    reraise_guard_error,
)
from little_dist.harness.interruptible import (
    CallInterrupted,
    call_interruptibly,
    spent_estimate,
)
from little_dist.harness.log_values import json_safe
from little_dist.observability.hooks import model_call_ended, quota_rejected, quota_waited

if TYPE_CHECKING:
    from little_dist.harness.types import HarnessContext
    from little_dist.quotas import Reservation
    from little_dist.quotas.limiter import DailyHold

__all__ = [
    "Completion",
    "ModelReply",
    "ToolCallRequest",
    "call_model",
    "import_litellm",
    "reply_from_recorded",
    "reply_from_response",
    "retry_after_of",
    "usage_from_response",
]

Completion = Callable[..., Any]


def import_litellm() -> Any:
    """litellm, imported without letting it fetch its price map from the network."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    # Our errors carry the cause; litellm's "Give Feedback / Get Help" banner is noise.
    litellm.suppress_debug_info = True
    return litellm


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for; ``args`` is the parsed JSON (or the raw text when it
    was not valid JSON)."""

    id: str
    name: str
    args: Any

    def arguments_text(self) -> str:
        if isinstance(self.args, str):
            return self.args
        return json.dumps(self.args, ensure_ascii=False, separators=(",", ":"), sort_keys=True)

    def to_json(self) -> dict[str, Any]:
        return {"toolName": self.name, "args": self.args, "toolCallId": self.id}


@dataclass(frozen=True)
class ModelReply:
    """What one turn produced (live or memoized)."""

    turn: int
    text: str | None
    tool_calls: tuple[ToolCallRequest, ...]
    usage: dict[str, Any]
    memoized: bool = False

    def assistant_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation (plain dicts only, so the
        next request digests the same live and replayed)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or ""}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text()},
                }
                for call in self.tool_calls
            ]
        return message


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _count(value: Any) -> int | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    return None


def usage_from_response(response: Any) -> dict[str, Any]:
    """Upstream's usage shape from a litellm response (OpenAI usage fields)."""
    usage = _get(response, "usage")
    result: dict[str, Any] = {
        "inputTokens": _count(_get(usage, "prompt_tokens")) or 0,
        "outputTokens": _count(_get(usage, "completion_tokens")) or 0,
    }
    cached = _count(_get(_get(usage, "prompt_tokens_details"), "cached_tokens"))
    if cached is not None:
        result["cachedInputTokens"] = cached
    reasoning = _count(_get(_get(usage, "completion_tokens_details"), "reasoning_tokens"))
    if reasoning is not None:
        result["reasoningTokens"] = reasoning
    return result


def _parse_arguments(text: Any) -> Any:
    if not isinstance(text, str):
        return json_safe(text) if text is not None else {}
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def reply_from_response(turn: int, response: Any, name_map: Mapping[str, str]) -> ModelReply:
    choices = _get(response, "choices") or []
    message = _get(choices[0], "message") if choices else None
    content = _get(message, "content")
    calls = []
    for index, call in enumerate(_get(message, "tool_calls") or []):
        function = _get(call, "function")
        wire_name = _get(function, "name") or ""
        calls.append(
            ToolCallRequest(
                id=_get(call, "id") or f"call_{turn}_{index}",
                name=name_map.get(wire_name, wire_name),
                args=_parse_arguments(_get(function, "arguments")),
            )
        )
    text = content if isinstance(content, str) else None
    return ModelReply(turn, text, tuple(calls), usage_from_response(response))


def reply_from_recorded(turn: int, response: Mapping[str, Any]) -> ModelReply:
    calls = tuple(
        ToolCallRequest(id=str(item.get("toolCallId")), name=item["toolName"], args=item["args"])
        for item in response.get("toolCalls") or []
    )
    text = response.get("text")
    return ModelReply(
        turn,
        text if isinstance(text, str) else None,
        calls,
        dict(response.get("usage") or {}),
        memoized=True,
    )


# Long on purpose: one model turn's record from the memo look-up to its end (the request's
# hash, the quota held, the call, the recorded response or failure), in the order the log
# takes them.
def call_model(
    ctx: HarnessContext,
    *,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] = (),
    name_map: Mapping[str, str] | None = None,
    completion: Completion | None = None,
) -> ModelReply:
    """Run one model turn: reuse the memoized response if this exact request was answered
    before, else call litellm and record ``harness.model.called`` / ``responded|failed``."""
    recorder = ctx.recorder
    turn = recorder.next_turn()
    request = {
        "model": ctx.model.litellm_model,
        "messages": [json_safe(dict(message)) for message in messages],
        "tools": [
            {
                "toolName": (name_map or {}).get(
                    item["function"]["name"], item["function"]["name"]
                ),
                "inputSchemaHash": sha256_digest(json_safe(item["function"].get("parameters"))),
            }
            for item in tools
        ],
    }
    prompt_hash = sha256_digest(request)
    hit = ctx.memo.model_turn(turn, prompt_hash)
    if hit is not None and isinstance(hit.value, Mapping):
        recorder.model_memoized(turn, hit.event)
        return reply_from_recorded(turn, hit.value)
    held = _hold_quota(ctx, messages, tools)
    if ctx.cancelled():
        if held is not None:
            held.settle(0, 0)
        raise HarnessCancelled(f"step {recorder.step_path} was cancelled before model turn {turn}")
    daily: DailyHold | None = None
    try:
        daily = hold_daily(ctx, messages, tools)
        if ctx.budgeted:
            from little_dist.harness.budget_hold import reserve_and_record

            reserve_and_record(ctx, turn, request, messages, tools)
        else:
            recorder.model_called(turn, request)
    except BaseException:
        if held is not None:  # (a lost lease, a spent budget: the call is never sent)
            held.settle(0, 0)
        if daily is not None:
            daily.settle(0.0)
        raise
    kwargs: dict[str, Any] = dict(ctx.model.settings)
    kwargs.update(
        model=ctx.model.litellm_model,
        messages=[dict(message) for message in messages],
        metadata={"little": {"stepPath": recorder.step_path, "runId": ctx.run_id}},
    )
    if tools:
        kwargs["tools"] = [dict(item) for item in tools]
    started = time.monotonic()
    if ctx.deadline is not None:
        # The provider's own timeout ends a call that would outlive the attempt (the step
        # timeout's watchdog ends the attempt in any case).
        left = max(ctx.deadline - started, 0.001)
        given = kwargs.get("timeout")
        kwargs["timeout"] = min(left, given) if isinstance(given, int | float) else left
    try:
        call = completion if completion is not None else import_litellm().completion
        response = call_interruptibly(call, kwargs, ctx.cancelled, watch=ctx.can_cancel)
    except CallInterrupted as stopped:
        raise _interrupted(ctx, turn, held, messages, tools, stopped) from None
    except BaseException as exc:
        if held is not None:
            _release_quota(held, exc)
        if daily is not None:
            daily.settle(0.0)
        if not isinstance(exc, Exception):
            raise
        reraise_guard_error(exc)
        error = model_error_from(exc, model=ctx.model.litellm_model)
        recorder.model_failed(turn, error.envelope(), duration_ms=_elapsed_ms(started))
        _observe(ctx, None, started, error.cause_code)
        raise error from exc
    reply = reply_from_response(turn, response, name_map or {})
    if daily is not None:
        settle_daily(ctx, daily, reply.usage)
    if held is not None:
        given, taken = reply.usage.get("inputTokens", 0), reply.usage.get("outputTokens", 0)
        if given or taken:
            held.settle(given, taken)
        else:  # a provider that reports no usage: the estimate stands
            held.settle(held.amounts.input_tokens, held.amounts.output_tokens)
    recorded: dict[str, Any] = {"text": reply.text or "", "usage": reply.usage}
    if reply.tool_calls:
        recorded["toolCalls"] = [call.to_json() for call in reply.tool_calls]
    finish = _get(choices[0], "finish_reason") if (choices := _get(response, "choices")) else None
    if isinstance(finish, str):
        recorded["finishReason"] = finish
    recorder.model_responded(
        turn, recorded, model=ctx.model.identity(), duration_ms=_elapsed_ms(started)
    )
    _observe(ctx, reply.usage, started, None)
    return reply


def _interrupted(
    ctx: HarnessContext,
    turn: int,
    held: Reservation | None,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    stopped: CallInterrupted,
) -> HarnessCancelled:
    """Record a call the attempt stopped waiting for (see :mod:`.interruptible`): failed
    with causeCode ``cancelled``, ``interrupted``, and what it is taken to have spent
    (``usage``, priced as a call's, under the error: the fold and the report count it)."""
    spent = spent_estimate(ctx.model.litellm_model, messages, tools, ctx.model.settings)
    if held is not None:
        held.settle(spent["inputTokens"], 0)
    step = ctx.recorder.step_path
    message = f"step {step} was cancelled during model turn {turn}: the call was interrupted"
    ctx.recorder.model_failed(
        turn,
        {
            "name": "AbortError",
            "message": message,
            "causeCode": "cancelled",
            "retriable": False,
            "interrupted": True,
            "usage": spent,
            "model": ctx.model.identity(),
        },
        duration_ms=round(stopped.seconds * 1000, 3),
    )
    _observe(ctx, spent, time.monotonic() - stopped.seconds, "cancelled")
    return HarnessCancelled(message)


def _observe(
    ctx: HarnessContext, usage: Mapping[str, Any] | None, started: float, error: str | None
) -> None:
    model_call_ended(
        run_id=ctx.run_id,
        step_path=ctx.recorder.step_path,
        model=ctx.model.identity(),
        pricing_key=ctx.model.pricing_key,
        usage=usage,
        seconds=time.monotonic() - started,
        error=error,
    )


def _hold_quota(
    ctx: HarnessContext,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
) -> Reservation | None:
    """The call's hold on its provider quota (see :mod:`little_dist.quotas`): the fleet
    worker's limiter, else this process's; waits in place while the quota is spent. ``None``
    when no quota rule limits the call."""
    from little_dist.harness.quota_estimate import call_identity, estimate_amounts
    from little_dist.harness.quota_limiters import process_limiter
    from little_dist.quotas import QuotaTooSmall, QuotaWaitGivenBack, QuotaWaitTooLong

    limiter = ctx.quotas if ctx.quotas is not None else process_limiter()
    if limiter is None:
        return None
    model = ctx.model
    call = call_identity(model.litellm_model, model.settings)
    if not limiter.rules.for_call(call):
        return None
    amounts = estimate_amounts(
        model.litellm_model,
        messages,
        tools,
        model.settings,
        default_output_tokens=limiter.rules.default_output_tokens,
    )
    try:
        held = limiter.reserve(
            call,
            amounts,
            cancelled=ctx.cancelled,
            deadline=ctx.deadline,
            give_back=not ctx.quota_gave_back,
        )
        if held is not None and held.waited > 0:
            quota_waited([rule.name for rule in held.rules], held.waited)
        return held
    except QuotaWaitGivenBack as exc:
        # A fleet worker's slot is worth more than a wait: the attempt ends, and runs again
        # once the quota is expected (the policy's quota_wait, free of the step's retries).
        given_back = ModelCallError(str(exc), cause_code="quota_wait", retriable=True)
        given_back.retry_after = exc.expected_in
        raise given_back from exc
    except QuotaWaitTooLong as exc:
        raise ModelCallError(str(exc), cause_code="model_rate_limited", retriable=True) from exc
    except QuotaTooSmall as exc:
        raise ModelCallError(str(exc), cause_code="runtime_config_error", retriable=False) from exc


def _release_quota(held: Reservation, exc: BaseException) -> None:
    """A failed call gives its reservation back; a 429 blocks its rules for ``Retry-After``."""
    if getattr(exc, "status_code", None) == 429 or type(exc).__name__ == "RateLimitError":
        quota_rejected([rule.name for rule in held.rules])
        held.rejected(retry_after_of(exc))
    else:
        held.settle(0, 0)


def retry_after_of(exc: BaseException) -> float | None:
    """The seconds a provider's 429 asks to wait (``retry-after-ms`` or ``retry-after``
    seconds, on the error's headers or its HTTP response), if it says."""
    for headers in (
        getattr(exc, "headers", None),
        getattr(getattr(exc, "response", None), "headers", None),
    ):
        if not headers:
            continue
        try:
            millis = headers.get("retry-after-ms")
            if millis is not None:
                return float(millis) / 1000
            seconds = headers.get("retry-after")
            if seconds is not None:
                return float(seconds)
        except (TypeError, ValueError, AttributeError):
            continue  # an HTTP date or a header object we cannot read: the default applies
    return None


def _elapsed_ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
