"""Tokens to dollars: the single place a model call is priced.

Pure: rates come from the bundled registry (:mod:`little_dist.model_registry`) or from a
registry or fallback the caller passes in; nothing here does IO or imports a provider SDK.
The rules are upstream's (``pricing.ts``):

- Rates are USD per :data:`TOKENS_PER_PRICE_UNIT` (one million) tokens.
- ``cached_input_tokens`` is a *subset of* ``input_tokens`` and ``reasoning_tokens`` a
  subset of ``output_tokens`` (reasoning is billed as output, never twice).
- A model the registry does not know costs ``None`` -- unknown, never ``0``. A scope that
  made no model calls is a genuine ``0``.
- Totals stay ``None`` only while *nothing* in them could be priced; once one call is
  priced, the total is the sum of the priced calls and ``unpriced_calls`` says how many
  were left out.

Float arithmetic keeps upstream's evaluation order so that sums agree to the last bit
with what the TypeScript engine reports for the same log.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from little_dist.model_registry import ModelInfo, ModelPricing, get_model_info_for

__all__ = [
    "TOKENS_PER_PRICE_UNIT",
    "ModelIdentity",
    "ModelUsage",
    "PriceFallback",
    "PricedModelCall",
    "PricingTotals",
    "UsageTotals",
    "add_priced_call",
    "cache_hit_share",
    "cost_for_tokens",
    "empty_usage_totals",
    "format_cost",
    "format_share",
    "js_to_fixed",
    "merge_usage_totals",
    "price_model_call",
    "unknown_usage_totals",
]

TOKENS_PER_PRICE_UNIT = 1_000_000
"""Registry rates are quoted per this many tokens; every token->dollar step divides by it."""

Number: TypeAlias = int | float
PriceFallback: TypeAlias = Callable[[str], ModelPricing | None]
"""Rates for a ``provider/model`` key the registry lacks, or ``None`` (stays unpriced)."""


class ModelIdentity(BaseModel):
    """The model that served a call, as recorded on its event (``{provider, modelId}``).

    ``provider`` is whatever the model object reported, e.g. ``openai.responses``;
    normalizing it to a registry key is the registry lookup's job.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    provider: str | None = None
    model_id: str | None = Field(default=None, alias="modelId")

    @classmethod
    def from_key(cls, key: str) -> ModelIdentity:
        """Parse ``"provider/model"``; the model id keeps any further slashes."""
        provider, slash, model_id = key.partition("/")
        return cls(provider=provider or None, model_id=model_id if slash and model_id else None)

    @classmethod
    def from_payload(cls, value: object) -> ModelIdentity:
        """Read an event's ``model`` field leniently: non-strings count as absent."""
        if not isinstance(value, Mapping):
            return cls()
        provider = value.get("provider")
        model_id = value.get("modelId")
        return cls(
            provider=provider if isinstance(provider, str) else None,
            model_id=model_id if isinstance(model_id, str) else None,
        )

    @property
    def key(self) -> str | None:
        """``provider/model`` as reported, or ``None`` when either half is missing."""
        if not self.provider or not self.model_id:
            return None
        return f"{self.provider}/{self.model_id}"


def _number_value(value: object) -> Number:
    # Upstream's numberValue: any finite JS number, else 0. bool is not a number in JS.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return value


def _token_count(value: Number) -> Number:
    # Upstream's tokenCount: non-positive and non-finite counts become 0; fractions stay.
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return value if value > 0 else 0


class ModelUsage(BaseModel):
    """Token counts of one model call, as the harness records them.

    Build it from an event's usage object with :meth:`from_payload`, which accepts both
    AI SDK shapes: v6 flat fields (``cachedInputTokens``, ``reasoningTokens``) and v7
    details (``inputTokenDetails.cacheReadTokens``, ``outputTokenDetails.reasoningTokens``).
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    input_tokens: Number = Field(default=0, alias="inputTokens")
    output_tokens: Number = Field(default=0, alias="outputTokens")
    cached_input_tokens: Number = Field(default=0, alias="cachedInputTokens")
    reasoning_tokens: Number = Field(default=0, alias="reasoningTokens")

    @classmethod
    def from_payload(cls, usage: Mapping[str, Any]) -> ModelUsage:
        """Normalize a recorded usage object; junk values count as 0 rather than failing."""
        cached = usage.get("cachedInputTokens")
        if cached is None:
            cached = _detail(usage.get("inputTokenDetails"), "cacheReadTokens")
        reasoning = usage.get("reasoningTokens")
        if reasoning is None:
            reasoning = _detail(usage.get("outputTokenDetails"), "reasoningTokens")
        return cls(
            input_tokens=_number_value(usage.get("inputTokens")),
            output_tokens=_number_value(usage.get("outputTokens")),
            cached_input_tokens=_number_value(cached),
            reasoning_tokens=_number_value(reasoning),
        )


def _detail(details: object, key: str) -> object:
    return details.get(key) if isinstance(details, Mapping) else None


class PricedModelCall(BaseModel):
    """One call converted into dollars; ``model_dump()`` gives upstream's wire shape."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    cost_usd: float | None = Field(alias="costUsd")
    """Dollars for this call, or ``None`` when the model has no pricing."""
    input_tokens: Number = Field(alias="inputTokens")
    output_tokens: Number = Field(alias="outputTokens")
    cached_input_tokens: Number = Field(alias="cachedInputTokens")
    reasoning_tokens: Number = Field(alias="reasoningTokens")
    uncached_input_tokens: Number = Field(alias="uncachedInputTokens")
    """Input tokens billed at the full input rate (input minus cache hits)."""
    cached_input_rate_fell_back: bool = Field(alias="cachedInputRateFellBack")
    """True when cache hits were billed at the full input rate for want of a cache rate."""


class UsageTotals(BaseModel):
    """Running totals for a step, a session or a whole run (upstream's ``UsageTotals``)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

    input_tokens: Number = Field(alias="inputTokens")
    output_tokens: Number = Field(alias="outputTokens")
    cached_input_tokens: Number = Field(alias="cachedInputTokens")
    reasoning_tokens: Number = Field(alias="reasoningTokens")
    cost_usd: float | None = Field(alias="costUsd")
    """Summed dollars of the priced calls; ``None`` when nothing could be priced."""
    priced_calls: int = Field(alias="pricedCalls")
    unpriced_calls: int = Field(alias="unpricedCalls")


PricingTotals = UsageTotals
"""Alias of :class:`UsageTotals` under the name the design notes use."""


def empty_usage_totals() -> UsageTotals:
    """Totals of a scope that provably made no model calls: a genuine ``$0``."""
    return UsageTotals(
        input_tokens=0,
        output_tokens=0,
        cached_input_tokens=0,
        reasoning_tokens=0,
        cost_usd=0,
        priced_calls=0,
        unpriced_calls=0,
    )


def unknown_usage_totals() -> UsageTotals:
    """Totals of a scope whose usage could not be recovered: zeros, but cost unknown."""
    return empty_usage_totals().model_copy(update={"cost_usd": None})


def _identity(model: str | ModelIdentity | Mapping[str, Any]) -> ModelIdentity:
    if isinstance(model, ModelIdentity):
        return model
    if isinstance(model, str):
        return ModelIdentity.from_key(model)
    return ModelIdentity.from_payload(model)


def _pricing_for(
    identity: ModelIdentity,
    registry: Mapping[str, ModelInfo] | None,
    fallback: PriceFallback | None,
) -> ModelPricing | None:
    if not identity.provider or not identity.model_id:
        return None
    info = get_model_info_for(identity.provider, identity.model_id, registry)
    if info is not None:
        return info.pricing
    if fallback is None:
        return None
    return fallback(f"{identity.provider}/{identity.model_id}")


def cost_for_tokens(
    pricing: ModelPricing, *, uncached_input: Number, cached_input: Number, output: Number
) -> float:
    """Dollars for token counts at ``pricing``'s rates (USD per 1M tokens).

    The one formula that turns tokens into dollars; cached input falls back to the input rate
    when the model has no cached rate. Same operand order as upstream, ``((a + b) + c) / 1e6``
    in IEEE doubles, so sums match to the last bit.
    """
    cached_rate = pricing.input if pricing.cached_input is None else pricing.cached_input
    return (
        float(uncached_input) * pricing.input
        + float(cached_input) * cached_rate
        + float(output) * pricing.output
    ) / TOKENS_PER_PRICE_UNIT


def price_model_call(
    model: str | ModelIdentity | Mapping[str, Any],
    usage: ModelUsage | Mapping[str, Any],
    *,
    registry: Mapping[str, ModelInfo] | None = None,
    fallback: PriceFallback | None = None,
) -> PricedModelCall:
    """Price one model call.

    ``model`` is a ``"provider/model"`` key, a :class:`ModelIdentity`, or an event's
    ``{provider, modelId}`` object. ``usage`` is a :class:`ModelUsage` or a recorded usage
    object. ``registry`` replaces the bundled registry; ``fallback`` is asked for rates
    only when the registry has none (for example :func:`little_dist.litellm_prices.
    litellm_price_fallback`). Without rates the call is priced ``None``, never ``0``.
    """
    counts = usage if isinstance(usage, ModelUsage) else ModelUsage.from_payload(usage)
    input_tokens = _token_count(counts.input_tokens)
    output_tokens = _token_count(counts.output_tokens)
    reasoning_tokens = min(_token_count(counts.reasoning_tokens), output_tokens)
    cached_input_tokens = min(_token_count(counts.cached_input_tokens), input_tokens)
    uncached_input_tokens = input_tokens - cached_input_tokens

    pricing = _pricing_for(_identity(model), registry, fallback)
    cost_usd: float | None = None
    if pricing is not None:
        cost_usd = cost_for_tokens(
            pricing,
            uncached_input=uncached_input_tokens,
            cached_input=cached_input_tokens,
            output=output_tokens,
        )

    return PricedModelCall(
        cost_usd=cost_usd,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached_input_tokens,
        reasoning_tokens=reasoning_tokens,
        uncached_input_tokens=uncached_input_tokens,
        cached_input_rate_fell_back=pricing is not None and pricing.cached_input is None,
    )


def _combined_cost(
    priced_calls: int, unpriced_calls: int, left: float | None, right: float | None
) -> float | None:
    if priced_calls == 0:
        return 0 if unpriced_calls == 0 else None
    return (left or 0) + (right or 0)


def add_priced_call(totals: UsageTotals, call: PricedModelCall) -> UsageTotals:
    """Fold one priced call into running totals; an unpriced call never becomes ``$0``."""
    priced = totals.priced_calls + (0 if call.cost_usd is None else 1)
    unpriced = totals.unpriced_calls + (1 if call.cost_usd is None else 0)
    return UsageTotals(
        input_tokens=totals.input_tokens + call.input_tokens,
        output_tokens=totals.output_tokens + call.output_tokens,
        cached_input_tokens=totals.cached_input_tokens + call.cached_input_tokens,
        reasoning_tokens=totals.reasoning_tokens + call.reasoning_tokens,
        cost_usd=_combined_cost(priced, unpriced, totals.cost_usd, call.cost_usd),
        priced_calls=priced,
        unpriced_calls=unpriced,
    )


def merge_usage_totals(a: UsageTotals, b: UsageTotals) -> UsageTotals:
    """Merge a child scope's totals into a parent's (``a`` first, as upstream adds them)."""
    priced = a.priced_calls + b.priced_calls
    unpriced = a.unpriced_calls + b.unpriced_calls
    return UsageTotals(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cached_input_tokens=a.cached_input_tokens + b.cached_input_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
        cost_usd=_combined_cost(priced, unpriced, a.cost_usd, b.cost_usd),
        priced_calls=priced,
        unpriced_calls=unpriced,
    )


def cache_hit_share(totals: UsageTotals | Mapping[str, Any]) -> float:
    """Share of input tokens served from cache, in ``[0, 1]``; ``0`` when there was no input.

    Accepts :class:`UsageTotals` (or any totals-like model) or a ``{inputTokens,
    cachedInputTokens}`` mapping.
    """
    if isinstance(totals, Mapping):
        input_tokens = totals["inputTokens"]
        cached = totals["cachedInputTokens"]
    else:
        input_tokens = totals.input_tokens
        cached = totals.cached_input_tokens
    return 0 if input_tokens == 0 else cached / input_tokens


_TO_FIXED_CONTEXT = Context(prec=400)


def js_to_fixed(value: float, digits: int) -> str:
    """JavaScript's ``Number.prototype.toFixed``.

    JS rounds the *exact* binary value and takes the larger candidate on a tie, so
    ``6.25.toFixed(1)`` is ``"6.3"`` where Python's ``"%.1f"`` gives ``"6.2"``.
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if abs(value) >= 1e21:
        # JS falls back to ToString here; repr spells these magnitudes the same way.
        return repr(float(value))
    if value == 0:
        value = 0.0  # -0 prints without a sign in JS
    quantum = Decimal(1).scaleb(-digits)
    exact = Decimal(float(value))
    return format(exact.quantize(quantum, rounding=ROUND_HALF_UP, context=_TO_FIXED_CONTEXT), "f")


def format_cost(cost_usd: float | None) -> str:
    """Six decimals; ``n/a`` when unknown; ``<0.000001`` for real money too small to show.

    The tiny case is read off the rounding itself (``toFixed(6)`` rounds at 5e-7), so a
    step that spent something never reads like a genuine ``0.000000``.
    """
    if cost_usd is None:
        return "n/a"
    rendered = js_to_fixed(cost_usd, 6)
    return "<0.000001" if cost_usd > 0 and float(rendered) == 0 else rendered


def format_share(share: float) -> str:
    """A ``[0, 1]`` share as a percentage with one decimal (``0.8`` -> ``80.0%``)."""
    return f"{js_to_fixed(share * 100, 1)}%"
