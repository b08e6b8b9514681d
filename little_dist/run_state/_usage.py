"""Per-call usage and cost for the fold, without building pydantic models per event.

:func:`little_dist.pricing.price_model_call` is the reference; this module applies the same
rules on raw payload values so that the fold stays cheap: registry rates are looked up once
per ``(provider, modelId)`` pair and cached, token counts are read straight off the payload.
``tests/test_run_state.py`` checks, property-based, that both give identical numbers.

Where rates come from is a :class:`Pricer`: the bundled registry first, then an optional
fallback (``provider/model`` -> rates) for models the registry lacks, for example
:func:`little_dist.litellm_prices.litellm_price_fallback`. This module never imports a
fallback; the IO layer passes one in. Without a fallback an unknown model stays unpriced
(``None``), which is upstream's behaviour and what the conformance vectors pin.

Totals are plain lists in the order of :data:`TOTAL_FIELDS` so a step can carry and extend
them in place (the fold copies a step before it mutates a shared one).
"""

from __future__ import annotations

import math
import weakref
from typing import Any, TypeAlias

from little_dist.model_registry import ModelPricing, get_model_info_for
from little_dist.pricing import PriceFallback, cost_for_tokens

__all__ = [
    "REGISTRY_PRICER",
    "TOTAL_FIELDS",
    "Pricer",
    "Totals",
    "add_call",
    "empty_totals",
    "price_call",
    "pricer_for",
    "totals_json",
]

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


class Pricer:
    """Rates per ``(provider, modelId)``: the registry's, else the fallback's; cached.

    The registry is bundled package data, so its answers never change. A fallback is asked
    at most once per model for the life of the pricer (a miss is cached too), which keeps a
    slow source such as litellm's cost map off the fold's per-event path.
    """

    __slots__ = ("__weakref__", "_cache", "fallback")

    def __init__(self, fallback: PriceFallback | None = None) -> None:
        self.fallback = fallback
        self._cache: dict[tuple[str, str], ModelPricing | None] = {}

    def pricing(self, provider: str, model_id: str) -> ModelPricing | None:
        """Rates for one model, or ``None`` when neither source has them."""
        key = (provider, model_id)
        try:
            return self._cache[key]
        except KeyError:
            pass
        info = get_model_info_for(provider, model_id)
        pricing = None if info is None else info.pricing
        if pricing is None and self.fallback is not None:
            pricing = self.fallback(f"{provider}/{model_id}")
        # Plain dict assignment: concurrent readers at worst compute the same value twice.
        self._cache[key] = pricing
        return pricing


REGISTRY_PRICER = Pricer()
"""Registry rates only (upstream's behaviour); shared, since its answers are fixed."""

# One pricer per fallback, so that every run folded with the same fallback shares one cache.
# Weak keys: a fallback the caller drops takes its cache with it.
_PRICERS: weakref.WeakKeyDictionary[PriceFallback, Pricer] = weakref.WeakKeyDictionary()


def pricer_for(fallback: PriceFallback | None) -> Pricer:
    """The shared :class:`Pricer` for ``fallback`` (registry only when ``None``)."""
    if fallback is None:
        return REGISTRY_PRICER
    try:
        pricer = _PRICERS.get(fallback)
        if pricer is None:
            pricer = _PRICERS[fallback] = Pricer(fallback)
        return pricer
    except TypeError:  # not weak-referenceable (e.g. a builtin): a private cache
        return Pricer(fallback)


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
    model: object, usage: dict[str, Any], pricer: Pricer = REGISTRY_PRICER
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
            pricing = pricer.pricing(provider, model_id)
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
