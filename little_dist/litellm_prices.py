"""Fallback rates from litellm's bundled cost map, for models the registry lacks.

Not part of the pure core: it imports litellm, lazily and only when a fallback is
actually consulted, and forces litellm to read its *local* cost map (no network fetch at
import). Pass :func:`litellm_price_fallback` as ``fallback=`` to
:func:`little_dist.pricing.price_model_call`. Upstream has no such fallback, so the
conformance suite never uses it; registry rates always win when both exist.

litellm quotes USD per token; the registry quotes USD per one million tokens. The
conversion goes through :class:`decimal.Decimal` so that ``2e-06`` becomes ``2.0`` and not
``1.9999999999999998``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from little_dist.model_registry import ModelPricing, model_registry_keys
from little_dist.pricing import TOKENS_PER_PRICE_UNIT

__all__ = ["litellm_price_fallback", "pricing_from_litellm_entry"]


def _per_million(per_token: object) -> float | None:
    if isinstance(per_token, bool) or not isinstance(per_token, int | float):
        return None
    if per_token < 0:
        return None
    return float(Decimal(repr(per_token)) * TOKENS_PER_PRICE_UNIT)


def pricing_from_litellm_entry(entry: Mapping[str, Any]) -> ModelPricing | None:
    """Map one litellm cost-map entry to registry rates; ``None`` without token rates."""
    input_rate = _per_million(entry.get("input_cost_per_token"))
    output_rate = _per_million(entry.get("output_cost_per_token"))
    if input_rate is None or output_rate is None:
        return None
    return ModelPricing(
        input=input_rate,
        output=output_rate,
        cached_input=_per_million(entry.get("cache_read_input_token_cost")),
    )


def _load_cost_map() -> Mapping[str, Any]:
    # litellm fetches its price map over the network at import unless told otherwise.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    cost_map: Mapping[str, Any] = litellm.model_cost
    return cost_map


def litellm_price_fallback(model_key: str) -> ModelPricing | None:
    """Rates for ``provider/model`` from litellm's local cost map, or ``None``.

    Tries the registry-style keys first (``openai.responses/gpt-4.1`` then
    ``openai/gpt-4.1``), then the bare model id -- but the bare id only when litellm
    files it under the same provider, so ``azure/x`` never borrows ``openai``'s ``x``.
    """
    provider, slash, model_id = model_key.partition("/")
    if not slash or not provider or not model_id:
        return None
    cost_map = _load_cost_map()
    candidates = model_registry_keys(provider, model_id)
    for key in candidates:
        entry = cost_map.get(key)
        if isinstance(entry, Mapping):
            return pricing_from_litellm_entry(entry)
    providers = {key.partition("/")[0] for key in candidates}
    entry = cost_map.get(model_id.lower(), cost_map.get(model_id))
    if isinstance(entry, Mapping) and str(entry.get("litellm_provider", "")).lower() in providers:
        return pricing_from_litellm_entry(entry)
    return None
