"""Per-call usage and cost for the fold, without building pydantic models per event.

:func:`little_dist.pricing.price_model_call` is the reference; this module applies the same
rules on raw payload values so that the fold stays cheap: registry rates are looked up once
per ``(provider, modelId)`` pair and cached, token counts are read straight off the payload.
``tests/test_run_state.py`` checks, property-based, that both give identical numbers.

Totals are plain lists in the order of :data:`TOTAL_FIELDS` so a step can carry and extend
them in place (the fold copies a step before it mutates a shared one).
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias

from little_dist.model_registry import ModelPricing, get_model_info_for
from little_dist.pricing import cost_for_tokens

__all__ = ["TOTAL_FIELDS", "Totals", "add_call", "empty_totals", "price_call", "totals_json"]

Totals: TypeAlias = list[Any]
"""``[input, output, cachedInput, reasoning, costUsd, pricedCalls, unpricedCalls]``."""

TOTAL_FIELDS = (
    "inputTokens",
    "outputTokens",
    "cachedInputTokens",
    "reasoningTokens",
    "costUsd",
    "pricedCalls",
    "unpricedCalls",
)

_INF = math.inf

# Registry lookups are pure functions of the bundled registry, so caching them for the life
# of the process is safe; the cache is bounded by the number of distinct models seen.
_PRICING_CACHE: dict[tuple[str, str], ModelPricing | None] = {}


def _pricing_for(provider: str, model_id: str) -> ModelPricing | None:
    key = (provider, model_id)
    try:
        return _PRICING_CACHE[key]
    except KeyError:
        pass
    info = get_model_info_for(provider, model_id)
    pricing = None if info is None else info.pricing
    _PRICING_CACHE[key] = pricing
    return pricing


def _tokens(value: object) -> int | float:
    # pricing's numberValue + tokenCount: finite positive numbers only; bool is not a number.
    cls = value.__class__
    if cls is int:
        return value if value > 0 else 0  # type: ignore[operator,return-value]
    if cls is float:
        return value if 0 < value < _INF else 0  # type: ignore[operator,return-value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _tokens(int(value) if isinstance(value, int) else float(value))
    return 0


def price_call(
    model: object, usage: dict[str, Any]
) -> tuple[int | float, int | float, int | float, int | float, float | None]:
    """``(input, output, cachedInput, reasoning, costUsd)`` of one recorded model call."""
    input_tokens = _tokens(usage.get("inputTokens"))
    output_tokens = _tokens(usage.get("outputTokens"))
    cached = usage.get("cachedInputTokens")
    if cached is None:
        details = usage.get("inputTokenDetails")
        cached = details.get("cacheReadTokens") if isinstance(details, dict) else None
    reasoning = usage.get("reasoningTokens")
    if reasoning is None:
        details = usage.get("outputTokenDetails")
        reasoning = details.get("reasoningTokens") if isinstance(details, dict) else None
    cached_tokens = min(_tokens(cached), input_tokens)
    reasoning_tokens = min(_tokens(reasoning), output_tokens)

    cost: float | None = None
    if isinstance(model, dict):
        provider = model.get("provider")
        model_id = model.get("modelId")
        if provider and model_id and provider.__class__ is str and model_id.__class__ is str:
            pricing = _pricing_for(provider, model_id)
            if pricing is not None:
                cost = cost_for_tokens(
                    pricing,
                    uncached_input=input_tokens - cached_tokens,
                    cached_input=cached_tokens,
                    output=output_tokens,
                )
    return input_tokens, output_tokens, cached_tokens, reasoning_tokens, cost


def empty_totals() -> Totals:
    """A scope with no model calls: a genuine ``0`` dollars."""
    return [0, 0, 0, 0, 0, 0, 0]


def add_call(
    totals: Totals,
    call: tuple[int | float, int | float, int | float, int | float, float | None],
) -> None:
    """Fold one priced call into ``totals`` in place (pricing.add_priced_call's rules)."""
    totals[0] += call[0]
    totals[1] += call[1]
    totals[2] += call[2]
    totals[3] += call[3]
    cost = call[4]
    if cost is None:
        totals[6] += 1
        if totals[5] == 0:
            totals[4] = None  # unknown until some call in the scope is priced
    else:
        totals[5] += 1
        previous = totals[4]
        totals[4] = (previous or 0) + cost


def totals_json(totals: Totals) -> dict[str, Any]:
    return dict(zip(TOTAL_FIELDS, totals, strict=True))
