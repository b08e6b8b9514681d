"""Fallback rates from litellm's bundled cost map, for models the registry lacks.

Not part of the pure core: it reads litellm's cost map, and only when a fallback is
actually consulted. When litellm is already loaded (a process that calls models) its live
``litellm.model_cost`` is used, registrations included; otherwise the map litellm bundles
(``model_prices_and_context_window_backup.json``, what litellm itself loads with
``LITELLM_LOCAL_MODEL_COST_MAP=True``) is read straight from the installed package, which
takes milliseconds where importing litellm takes seconds -- so ``little report`` stays fast.
Nothing here fetches over the network.

Pass :func:`litellm_price_fallback` as ``fallback=`` to
:func:`little_dist.pricing.price_model_call`, as ``pricing_fallback=`` to the run-state fold,
the report, :func:`~little_dist.run_workflow`, :func:`~little_dist.local_runner.run_version`
or the fleet's :class:`~little_dist.fleet.client.Client` (the entry points that do IO pass it
by default; the pure fold never does). Upstream has no such fallback, so the conformance
suite never uses it; registry rates always win when both exist.

litellm quotes USD per token; the registry quotes USD per one million tokens. The
conversion goes through :class:`decimal.Decimal` so that ``2e-06`` becomes ``2.0`` and not
``1.9999999999999998``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from little_dist.model_registry import ModelPricing, model_registry_keys
from little_dist.pricing import TOKENS_PER_PRICE_UNIT

__all__ = [
    "litellm_price_fallback",
    "pricing_from_litellm_entry",
]


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


_BUNDLED_MAP = "model_prices_and_context_window_backup.json"


@functools.cache
def _bundled_cost_map() -> Mapping[str, Any] | None:
    """litellm's bundled cost map, read without importing litellm; ``None`` if not found."""
    try:
        spec = importlib.util.find_spec("litellm")  # locates the package, runs none of it
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        try:
            data = json.loads((Path(folder) / _BUNDLED_MAP).read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def _load_cost_map() -> Mapping[str, Any]:
    loaded = sys.modules.get("litellm")
    live = getattr(loaded, "model_cost", None)
    if isinstance(live, Mapping):
        return live
    bundled = _bundled_cost_map()
    if bundled is not None:
        return bundled
    # An unusual install (zipped, renamed map): import litellm, which fetches its price map
    # over the network at import unless told otherwise.
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
