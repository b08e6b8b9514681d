"""Pricing, the bundled model registry and cost formatting against upstream's vectors."""

from __future__ import annotations

import json
import math
import re
from importlib import resources
from typing import Any

import pytest

from little_dist.errors import InvalidInputError
from little_dist.model_registry import (
    ModelPricing,
    bundled_registry,
    get_model_info_for,
    model_registry_keys,
    parse_registry,
)
from little_dist.pricing import (
    TOKENS_PER_PRICE_UNIT,
    ModelIdentity,
    ModelUsage,
    PricedModelCall,
    UsageTotals,
    add_priced_call,
    cache_hit_share,
    empty_usage_totals,
    format_cost,
    format_share,
    js_to_fixed,
    merge_usage_totals,
    price_model_call,
    unknown_usage_totals,
)
from tests.conftest import load_vectors

VECTORS: dict[str, Any] = load_vectors("pricing")


def _identity_id(identity: dict[str, Any]) -> str:
    if not identity:
        return "no-identity"
    return f"{identity.get('provider')}/{identity.get('modelId')}"


def _ids(vectors: list[dict[str, Any]], key: str) -> list[str]:
    return [f"{i}-{v[key]}" for i, v in enumerate(vectors)]


def test_units() -> None:
    assert VECTORS["units"]["tokens_per_price_unit"] == TOKENS_PER_PRICE_UNIT
    assert VECTORS["units"]["currency"] == "USD"


@pytest.mark.parametrize("key", sorted(VECTORS["registry"]["entries"]))
def test_bundled_registry_entry(key: str) -> None:
    expected = VECTORS["registry"]["entries"][key]
    info = bundled_registry()[key]
    assert info.pricing.model_dump(by_alias=True, exclude_none=True) == expected["pricing"]
    assert info.unverified == expected.get("unverified")


def test_bundled_registry_has_exactly_the_vector_entries() -> None:
    assert set(bundled_registry()) == set(VECTORS["registry"]["entries"])


def test_bundled_registry_json_keeps_upstream_field_names() -> None:
    raw = json.loads(
        resources.files("little_dist").joinpath("model_registry.json").read_text("utf-8")
    )
    for key, entry in raw.items():
        assert key == key.lower()
        assert set(entry) <= {
            "description",
            "capabilities",
            "pricing",
            "contextWindow",
            "pricingSource",
            "pricingVerifiedAt",
            "unverified",
        }, key
        assert set(entry["pricing"]) <= {"input", "output", "cachedInput", "currency"}, key


def test_bundled_registry_provenance_invariants() -> None:
    # Upstream's model-registry.test.ts: every entry either cites an https pricing page
    # with a verification date, or says `unverified: true` and carries neither.
    unverified = sorted(k for k, v in bundled_registry().items() if v.unverified)
    assert unverified == [
        "azure/gpt-4o",
        "cohere/command-a",
        "meta/llama-4-maverick",
        "qwen/qwen3-coder",
    ]
    for key, info in bundled_registry().items():
        if info.unverified:
            assert info.pricing_source is None and info.pricing_verified_at is None, key
            continue
        assert info.pricing_source is not None and info.pricing_source.startswith("https://")
        assert info.pricing_verified_at is not None
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", info.pricing_verified_at), key
        assert info.pricing.input > 0 and info.pricing.output > 0, key
        if info.pricing.cached_input is not None:
            assert 0 <= info.pricing.cached_input <= info.pricing.input, key


PRICE_VECTORS: list[dict[str, Any]] = VECTORS["price_model_call"]


@pytest.mark.parametrize(
    "vector",
    PRICE_VECTORS,
    ids=[f"{i}-{_identity_id(v['identity'])}" for i, v in enumerate(PRICE_VECTORS)],
)
def test_price_model_call(vector: dict[str, Any]) -> None:
    call = price_model_call(vector["identity"], vector["usage"])
    assert call.model_dump() == vector["expected"]
    # JS numbers: the serialized cost is exactly the double upstream computed.
    if vector["expected"]["costUsd"] is None:
        assert call.cost_usd is None
    for field, check in vector["asserted"].items():
        actual = (
            call.model_dump()[field]
            if field != "cacheHitShare"
            else cache_hit_share(
                {"inputTokens": call.input_tokens, "cachedInputTokens": call.cached_input_tokens}
            )
        )
        if isinstance(check, dict):
            assert abs(actual - check["approx"]) < 0.5 * 10 ** -check["digits"]
        else:
            assert actual == check


def test_price_model_call_accepts_key_identity_and_usage_model() -> None:
    by_key = price_model_call("openai.responses/gpt-4o", ModelUsage(input_tokens=1_000_000))
    by_identity = price_model_call(
        ModelIdentity(provider="openai", model_id="gpt-4o"), {"inputTokens": 1_000_000}
    )
    assert by_key.cost_usd == by_identity.cost_usd == 2.5


@pytest.mark.parametrize("key", ["", "openai", "openai/", "/gpt-4o"])
def test_price_model_call_incomplete_key_is_unpriced(key: str) -> None:
    assert price_model_call(key, {"inputTokens": 10}).cost_usd is None


def test_priced_call_serializes_to_upstream_shape() -> None:
    call = price_model_call("openai/gpt-4o", {"inputTokens": 1000, "cachedInputTokens": 400})
    assert list(call.model_dump()) == [
        "costUsd",
        "inputTokens",
        "outputTokens",
        "cachedInputTokens",
        "reasoningTokens",
        "uncachedInputTokens",
        "cachedInputRateFellBack",
    ]
    assert PricedModelCall.model_validate(call.model_dump()) == call


def test_usage_v7_details_fall_back_only_when_flat_fields_are_absent() -> None:
    v7 = ModelUsage.from_payload(
        {
            "inputTokens": 100,
            "outputTokens": 50,
            "inputTokenDetails": {"cacheReadTokens": 40},
            "outputTokenDetails": {"reasoningTokens": 20},
        }
    )
    assert (v7.cached_input_tokens, v7.reasoning_tokens) == (40, 20)
    v6_wins = ModelUsage.from_payload(
        {
            "inputTokens": 100,
            "cachedInputTokens": 10,
            "reasoningTokens": 5,
            "inputTokenDetails": {"cacheReadTokens": 40},
            "outputTokenDetails": {"reasoningTokens": 20},
        }
    )
    assert (v6_wins.cached_input_tokens, v6_wins.reasoning_tokens) == (10, 5)
    junk = ModelUsage.from_payload(
        {"inputTokens": "12", "outputTokens": True, "cachedInputTokens": math.inf}
    )
    assert (junk.input_tokens, junk.output_tokens, junk.cached_input_tokens) == (0, 0, 0)


def test_v7_usage_prices_cache_hits_at_the_cached_rate() -> None:
    call = price_model_call(
        {"provider": "openai", "modelId": "gpt-4o"},
        {"inputTokens": 1000, "inputTokenDetails": {"cacheReadTokens": 400}},
    )
    assert call.cached_input_tokens == 400
    assert call.cost_usd == (600 * 2.5 + 400 * 1.25) / 1e6


REGISTRY_KEY_VECTORS: list[dict[str, Any]] = VECTORS["registry_keys"]


@pytest.mark.parametrize(
    "vector",
    REGISTRY_KEY_VECTORS,
    ids=[f"{v['providerId']}/{v['modelId']}" for v in REGISTRY_KEY_VECTORS],
)
def test_registry_keys(vector: dict[str, Any]) -> None:
    assert list(model_registry_keys(vector["providerId"], vector["modelId"])) == vector["expected"]


CUSTOM_VECTORS: list[dict[str, Any]] = VECTORS["lookup_custom_registry"]


@pytest.mark.parametrize(
    "vector",
    CUSTOM_VECTORS,
    ids=[f"{i}-{sorted(v['registry'])}" for i, v in enumerate(CUSTOM_VECTORS)],
)
def test_lookup_custom_registry(vector: dict[str, Any]) -> None:
    registry = parse_registry(vector["registry"])
    info = get_model_info_for(vector["providerId"], vector["modelId"], registry)
    assert (None if info is None else info.description) == vector["expected_description"]


def test_custom_registry_prices_calls() -> None:
    registry = parse_registry(
        {"acme.chat/m1": {"pricing": {"input": 1, "output": 2, "currency": "USD"}}}
    )
    call = price_model_call(
        "acme.chat/m1", {"inputTokens": 1e6, "outputTokens": 1e6}, registry=registry
    )
    assert call.cost_usd == 3.0
    assert call.cached_input_rate_fell_back is True
    assert price_model_call("openai/gpt-4o", {"inputTokens": 1}, registry=registry).cost_usd is None


def test_parse_registry_names_the_bad_entry() -> None:
    with pytest.raises(InvalidInputError, match="'acme/x'"):
        parse_registry({"acme/x": {"pricing": {"input": "cheap", "output": 1}}})


def test_fallback_is_consulted_only_for_models_the_registry_lacks() -> None:
    asked: list[str] = []

    def fallback(key: str) -> ModelPricing | None:
        asked.append(key)
        return ModelPricing(input=1, output=1)

    known = price_model_call("openai.responses/gpt-4o", {"inputTokens": 1e6}, fallback=fallback)
    assert known.cost_usd == 2.5 and asked == []
    unknown = price_model_call("acme/x", {"inputTokens": 1e6}, fallback=fallback)
    assert unknown.cost_usd == 1.0 and asked == ["acme/x"]
    assert (
        price_model_call("acme/y", {"inputTokens": 1}, fallback=lambda key: None).cost_usd is None
    )


def test_litellm_fallback_prices_a_model_upstream_lacks() -> None:
    from little_dist.litellm_prices import litellm_price_fallback

    assert get_model_info_for("openai", "gpt-4.1") is None
    pricing = litellm_price_fallback("openai.responses/gpt-4.1")
    assert pricing == ModelPricing(input=2.0, output=8.0, cached_input=0.5)
    call = price_model_call(
        "openai.responses/gpt-4.1",
        {"inputTokens": 1_000_000, "cachedInputTokens": 200_000, "outputTokens": 100_000},
        fallback=litellm_price_fallback,
    )
    assert call.cost_usd == pytest.approx(800_000 * 2e-6 + 200_000 * 5e-7 + 100_000 * 8e-6)
    # A bare model id is borrowed only under the same provider.
    assert litellm_price_fallback("acme/gpt-4.1") is None


def test_litellm_fallback_reads_the_bundled_map_without_importing_litellm() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from little_dist.litellm_prices import litellm_price_fallback as f\n"
        "p = f('openai/gpt-4.1')\n"
        "assert (p.input, p.output, p.cached_input) == (2.0, 8.0, 0.5), p\n"
        "sys.exit('litellm imported' if 'litellm' in sys.modules else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_bundled_map_is_the_one_litellm_loads_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    from little_dist import litellm_prices

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    bundled = litellm_prices._bundled_cost_map()
    assert bundled is not None
    for key in ("gpt-4.1", "gpt-4o-mini", "claude-3-5-haiku-20241022"):
        assert bundled.get(key) == litellm.model_cost.get(key)


def test_a_loaded_litellm_map_wins_over_the_bundled_file(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    from little_dist.litellm_prices import litellm_price_fallback

    fake = types.ModuleType("litellm")
    fake.model_cost = {  # type: ignore[attr-defined]
        "acme/m1": {"input_cost_per_token": 1e-6, "output_cost_per_token": 3e-6}
    }
    monkeypatch.setitem(sys.modules, "litellm", fake)
    assert litellm_price_fallback("acme/m1") == ModelPricing(input=1.0, output=3.0)
    assert litellm_price_fallback("openai/gpt-4.1") is None  # not in the live map


def test_pure_core_does_not_import_litellm() -> None:
    import subprocess
    import sys

    code = (
        "import sys, little_dist.pricing, little_dist.model_registry, little_dist.report;"
        "little_dist.pricing.price_model_call('openai/gpt-4o', {'inputTokens': 1});"
        "sys.exit(1 if 'litellm' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _totals(data: dict[str, Any]) -> UsageTotals:
    return UsageTotals.model_validate(data)


TOTALS_VECTORS: list[dict[str, Any]] = VECTORS["totals"]


@pytest.mark.parametrize("vector", TOTALS_VECTORS, ids=_ids(TOTALS_VECTORS, "op"))
def test_totals(vector: dict[str, Any]) -> None:
    op = vector["op"]
    if op == "addPricedCall*":
        totals = empty_usage_totals()
        for call in vector["calls"]:
            totals = add_priced_call(totals, price_model_call(call["identity"], call["usage"]))
    elif op == "emptyUsageTotals":
        totals = empty_usage_totals()
    elif op == "unknownUsageTotals":
        totals = unknown_usage_totals()
    elif op == "mergeUsageTotals":
        totals = merge_usage_totals(_totals(vector["a"]), _totals(vector["b"]))
    else:  # pragma: no cover - a new op in the vectors must be handled here
        pytest.fail(f"unknown totals op {op}")
    assert totals.model_dump() == vector["expected"]
    if vector["expected"]["costUsd"] is None:
        assert totals.cost_usd is None


def test_empty_totals_cost_is_a_genuine_zero_not_unknown() -> None:
    assert empty_usage_totals().cost_usd == 0
    assert unknown_usage_totals().cost_usd is None


SHARE_VECTORS: list[dict[str, Any]] = VECTORS["cache_hit_share"]


@pytest.mark.parametrize("vector", SHARE_VECTORS, ids=_ids(SHARE_VECTORS, "expected"))
def test_cache_hit_share(vector: dict[str, Any]) -> None:
    assert cache_hit_share(vector["totals"]) == vector["expected"]
    totals = empty_usage_totals().model_copy(
        update={
            "input_tokens": vector["totals"]["inputTokens"],
            "cached_input_tokens": vector["totals"]["cachedInputTokens"],
        }
    )
    assert cache_hit_share(totals) == vector["expected"]


COST_VECTORS: list[dict[str, Any]] = VECTORS["format_cost"]


@pytest.mark.parametrize("vector", COST_VECTORS, ids=_ids(COST_VECTORS, "costUsd"))
def test_format_cost(vector: dict[str, Any]) -> None:
    assert format_cost(vector["costUsd"]) == vector["expected"]


FORMAT_SHARE_VECTORS: list[dict[str, Any]] = VECTORS["format_share"]


@pytest.mark.parametrize("vector", FORMAT_SHARE_VECTORS, ids=_ids(FORMAT_SHARE_VECTORS, "share"))
def test_format_share(vector: dict[str, Any]) -> None:
    assert format_share(vector["share"]) == vector["expected"]


@pytest.mark.parametrize(
    ("value", "digits", "expected"),
    [
        (6.25, 1, "6.3"),  # exact tie: JS takes the larger candidate
        (1.005, 2, "1.00"),  # 1.005 is really 1.00499999999999989...
        (0.5, 0, "1"),
        (2.5, 0, "3"),
        (-2.5, 0, "-3"),
        (-1e-9, 6, "-0.000000"),
        (-0.0, 6, "0.000000"),
        (1e21, 2, "1e+21"),
        (123.456, 0, "123"),
    ],
)
def test_js_to_fixed(value: float, digits: int, expected: str) -> None:
    assert js_to_fixed(value, digits) == expected
