"""The bundled model registry: per-model rates in USD per one million tokens.

``model_registry.json`` beside this module is upstream's registry, copied as data with
upstream's field names (``pricing.input``, ``pricing.cachedInput``, ``contextWindow``,
``pricingSource``, ``unverified``, ...). It is read once, on first use, through
``importlib.resources``; nothing else here touches the filesystem.

Lookup follows upstream's contract: the key ``provider/model`` is lower-cased and, when the
provider carries AI-SDK style sub-model suffixes (``openai.responses``, ``deepseek.chat``),
trailing dot-segments of the *provider* are stripped one at a time, most specific first.
The model id is never touched, because model ids legitimately contain dots (``gpt-4.1``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from little_dist.errors import InvalidInputError

__all__ = [
    "ModelInfo",
    "ModelPricing",
    "ModelRegistryError",
    "bundled_registry",
    "get_model_info_for",
    "model_registry_keys",
    "parse_registry",
]

_REGISTRY_RESOURCE = "model_registry.json"


class ModelRegistryError(InvalidInputError):
    """A registry entry that does not have the shape of upstream's ``ModelInfo``."""


class ModelPricing(BaseModel):
    """Rates in USD per one million tokens.

    ``cached_input`` is optional on purpose: without a published cache-read rate, cache
    hits are billed at the full ``input`` rate rather than at an invented discount.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cached_input: float | None = Field(default=None, alias="cachedInput", ge=0, allow_inf_nan=False)
    currency: Literal["USD"] = "USD"


class ModelInfo(BaseModel):
    """One registry entry, field for field as upstream's ``ModelInfo``."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    description: str = ""
    capabilities: tuple[str, ...] = ()
    pricing: ModelPricing
    context_window: int | None = Field(default=None, alias="contextWindow")
    pricing_source: str | None = Field(default=None, alias="pricingSource")
    pricing_verified_at: str | None = Field(default=None, alias="pricingVerifiedAt")
    # Upstream spells the flag as the literal ``true`` or leaves it out.
    unverified: Literal[True] | None = None


def parse_registry(raw: Mapping[str, Any]) -> dict[str, ModelInfo]:
    """Validate a registry given as upstream's JSON shape (key -> ModelInfo object).

    Keys are kept exactly as given; lookups lower-case only the candidate keys, as
    upstream does, so a registry should be written with lower-case keys.
    """
    parsed: dict[str, ModelInfo] = {}
    for key, entry in raw.items():
        if not isinstance(key, str):
            raise ModelRegistryError(f"model registry key {key!r} is not a string")
        try:
            parsed[key] = ModelInfo.model_validate(entry)
        except ValidationError as error:
            raise ModelRegistryError(f"model registry entry {key!r} is invalid: {error}") from error
    return parsed


@cache
def bundled_registry() -> Mapping[str, ModelInfo]:
    """The registry shipped in the package (read once, then cached)."""
    text = resources.files("little_dist").joinpath(_REGISTRY_RESOURCE).read_text("utf-8")
    return parse_registry(json.loads(text))


def model_registry_keys(provider_id: str, model_id: str) -> tuple[str, ...]:
    """Registry keys to try for one ``(provider, model)`` pair, most specific first.

    ``("openai.responses", "gpt-4.1")`` gives ``("openai.responses/gpt-4.1",
    "openai/gpt-4.1")``. Stripping stops when the last dot is at index 0 or absent, so a
    provider like ``.leading`` is tried only as written.
    """
    keys: list[str] = []
    provider = provider_id
    while True:
        keys.append(f"{provider}/{model_id}".lower())
        last_dot = provider.rfind(".")
        if last_dot <= 0:
            return tuple(keys)
        provider = provider[:last_dot]


def get_model_info_for(
    provider_id: str,
    model_id: str,
    registry: Mapping[str, ModelInfo] | None = None,
) -> ModelInfo | None:
    """Look a model up in ``registry`` (the bundled one by default); ``None`` if absent."""
    entries = bundled_registry() if registry is None else registry
    for key in model_registry_keys(provider_id, model_id):
        info = entries.get(key)
        if info is not None:
            return info
    return None
