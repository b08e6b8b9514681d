"""The caches long-lived processes keep, bounded by count and by weight (little_dist.lru)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from little_dist.lru import LruCache, TextKeyedCache


def sized(max_items: int = 10, max_weight: int | None = 100) -> LruCache[str, list[int]]:
    """A cache of lists weighed by their length (they may grow while cached)."""
    return LruCache(max_items, max_weight, weigh=len)


def test_the_least_recently_used_go_first_past_the_count() -> None:
    cache = sized(max_items=2, max_weight=None)
    cache["a"], cache["b"] = [1], [2]
    cache.move_to_end("a")
    cache["c"] = [3]
    assert list(cache) == ["a", "c"]
    assert cache.get("b") is None and cache.get("b", []) == []


def test_the_oldest_go_past_the_weight() -> None:
    cache = sized(max_weight=10)
    cache["a"] = [0] * 4
    cache["b"] = [0] * 4
    assert cache.weight == 8
    cache["c"] = [0] * 4  # 12 > 10: a goes
    assert list(cache) == ["b", "c"] and cache.weight == 8


def test_an_entry_is_weighed_again_when_touched() -> None:
    cache = sized(max_weight=10)
    cache["a"] = growing = [0]
    cache["b"] = [0] * 3
    growing.extend([0] * 8)  # a grew while in use
    assert cache.weight == 4  # (as last weighed)
    cache.move_to_end("a")  # 9 + 3 > 10: b goes, a stays
    assert list(cache) == ["a"] and cache.weight == 9


def test_the_entry_used_last_is_weighed_again_when_the_next_one_is_used() -> None:
    # A run is stored before it folds its events: its use is over once another is used.
    cache = sized(max_weight=10)
    cache["a"] = first = []
    first.extend([0] * 7)
    cache["b"] = second = []
    assert cache.weight == 7  # a weighed again, as it is now
    second.extend([0] * 7)
    cache["c"] = []  # b weighs 7 now: 14 > 10, a (the oldest) goes
    assert list(cache) == ["b", "c"] and cache.weight == 7


def test_the_entry_in_hand_stays_even_when_it_alone_is_over_the_budget() -> None:
    cache = sized(max_weight=10)
    cache["a"] = [0] * 3
    cache["huge"] = [0] * 50
    assert list(cache) == ["huge"] and cache.weight == 50
    cache["b"] = [0]  # the huge one is the oldest now
    assert list(cache) == ["b"] and cache.weight == 1


def test_replacing_pop_and_popitem_keep_the_weight_right() -> None:
    cache = sized()
    cache["a"] = [0] * 5
    cache["a"] = [0] * 2
    cache["b"] = [0] * 3
    assert cache.weight == 5 and len(cache) == 2
    assert cache.pop("a") == [0, 0] and cache.weight == 3
    assert cache.pop("a", None) is None
    with pytest.raises(KeyError):
        cache.pop("a")
    assert cache.popitem(last=False) == ("b", [0, 0, 0]) and cache.weight == 0
    cache["c"] = [1]
    cache.clear()
    assert len(cache) == 0 and cache.weight == 0 and "c" not in cache


def test_without_a_weigher_only_the_count_bounds() -> None:
    cache: LruCache[int, str] = LruCache(3)
    for key in range(10):
        cache[key] = "x" * 1000
    assert list(cache) == [7, 8, 9] and cache.weight == 0
    assert list(cache.values()) == ["x" * 1000] * 3
    assert cache[9] == "x" * 1000
    with pytest.raises(ValueError, match="max_items must be at least 1"):
        LruCache(0)


def test_a_text_keyed_cache_builds_once_and_stays_within_both_bounds() -> None:
    built: list[str] = []

    def build(key: str) -> Any:
        built.append(key)
        return key.upper()

    cache: TextKeyedCache[str] = TextKeyedCache(max_items=3, max_chars=10)
    assert cache.get_or_build("ab", lambda: build("ab")) == "AB"
    assert cache.get_or_build("ab", lambda: build("ab")) == "AB"
    assert built == ["ab"]
    for key in ("cd", "ef", "gh"):
        cache.get_or_build(key, lambda key=key: build(key))
    assert len(cache) == 3 and cache.chars == 6  # the oldest went past the count
    cache.get_or_build("0123456789", lambda: build("0123456789"))
    assert len(cache) == 1 and cache.chars == 10  # and past the length


def test_a_text_keyed_cache_is_safe_to_share_between_threads() -> None:
    cache: TextKeyedCache[int] = TextKeyedCache(max_items=50, max_chars=10_000)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for index in range(2000):
                key = str((index * 7 + offset) % 200)
                assert cache.get_or_build(key, lambda key=key: int(key)) == int(key)
        except BaseException as error:  # (reported below)
            errors.append(error)

    threads = [threading.Thread(target=work, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(cache) <= 50
    assert cache.chars == sum(len(key) for key in cache._entries)


def test_the_plan_cache_is_bounded_by_count_and_by_the_length_of_its_lwir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from little_dist.compiler import compile_lwir
    from little_dist.scheduling import step_graph as plans
    from tests.workflows_for_tests import chain_lwir

    for index in range(100):
        plans.plan_for(compile_lwir(chain_lwir(1), input={"count": index}))
    assert len(plans._plans) == 64
    assert plans._plans_chars == sum(size for _, size in plans._plans.values())
    big = compile_lwir(chain_lwir(40), input={})
    monkeypatch.setattr(plans, "_CACHE_LWIR_CHARS", len(big.canonical_json) * 2)
    plans.plan_for(big)
    assert plans._plans_chars <= len(big.canonical_json) * 2
    assert plans.plan_for(big) is plans.plan_for(big)  # (the one in hand stays)


def test_one_bounded_cache_holds_the_compiled_schemas_of_every_check() -> None:
    from little_dist.compiler import compile_lwir
    from little_dist.harness.output_modes import output_findings
    from little_dist.lwir import schema as lwir_schema
    from little_dist.runtime.outputs import schema_problems
    from little_dist.scheduling.schema_checks import (
        SCHEMA_CHECKS,
        SCHEMA_CHECKS_ITEMS,
        compiled_schema,
    )
    from little_dist.scheduling.step_graph import plan_for, schema_error
    from tests.workflows_for_tests import chain_lwir

    plan = plan_for(compile_lwir(chain_lwir(1), input={}))
    for index in range(SCHEMA_CHECKS_ITEMS + 100):
        schema = {"type": "object", "required": [f"p{index}"]}
        # The run input's check, the harness's and decide's compile the schema once...
        assert schema_problems(schema, {}) == [f"(root): 'p{index}' is a required property"]
        compiled = compiled_schema(schema)
        assert output_findings({"output": {"mode": "object", "schema": schema}}, {})
        assert schema_error(plan, schema, {}) == f"'p{index}' is a required property"
        assert compiled_schema(schema) is compiled
        # ...and the one cache they share stays within its bound.
        assert len(SCHEMA_CHECKS) <= SCHEMA_CHECKS_ITEMS
    assert len(SCHEMA_CHECKS) == SCHEMA_CHECKS_ITEMS
    for index in range(4200):  # (a schema the quick meta check leaves to jsonschema)
        lwir_schema.validate_schema_value({"required": [f"p{index}"], "minimum": "x"}, "$", [])
    assert 0 < len(lwir_schema._META_CACHE) <= 4096


def test_step_schema_hashes_are_forgotten_with_their_plan() -> None:
    import gc

    from little_dist.compiler import compile_lwir
    from little_dist.runtime import harness_run
    from little_dist.scheduling import step_graph as plans
    from tests.workflows_for_tests import chain_lwir

    before = len(harness_run._schema_hashes)
    steps = plans.plan_for(compile_lwir(chain_lwir(3), input={"tag": "hashes"})).top.steps
    for step in steps:
        harness_run._schema_hash(step)
    assert len(harness_run._schema_hashes) == before + 3
    # What the bounded plan cache does to an old plan: enough newer ones push it out.
    for index in range(70):
        plans.plan_for(compile_lwir(chain_lwir(1), input={"tag": index}))
    del steps, step
    gc.collect()
    assert len(harness_run._schema_hashes) <= before
