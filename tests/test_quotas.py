"""Provider quotas: the rules, both backends (one shared body), the limiter, and the model
call seam in process against the scripted provider's own limit."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from little_dist.quotas import (
    Amounts,
    CallIdentity,
    MemoryQuotaBackend,
    QuotaBackend,
    QuotaConfigError,
    QuotaLimiter,
    QuotaRule,
    QuotaRules,
    QuotaTooSmall,
    QuotaWaitTooLong,
    RedisQuotaBackend,
    key_fingerprint,
    parse_quotas,
)
from little_dist.quotas.redis_backend import KEY_PREFIX
from little_dist.settings import SettingsError, load_quota_settings, load_settings

# -- rules -------------------------------------------------------------------------------------


def test_rules_take_numbers_and_rate_strings_and_match_calls() -> None:
    rules = parse_quotas(
        json.dumps(
            {
                "defaultOutputTokens": 256,
                "rules": [
                    {"name": "oa", "provider": "openai", "requests": "600/minute",
                     "tokens": "150000/minute", "concurrent": 32},
                    {"name": "mini", "provider": "openai", "model": "gpt-4o-mini*",
                     "inputTokens": 100, "outputTokens": 20, "period": 2},
                    {"name": "k", "key": key_fingerprint("sk-1"), "requests": "5 per second"},
                ],
            }
        )
    )  # fmt: skip
    oa, mini, k = rules.rules
    assert (oa.requests, oa.tokens, oa.concurrent, oa.period) == (600, 150000, 32, 60.0)
    assert (mini.input_tokens, mini.output_tokens, mini.period) == (100, 20, 2.0)
    assert (k.requests, k.period) == (5, 1.0)
    assert rules.default_output_tokens == 256
    names = [r.name for r in rules.for_call(CallIdentity("openai", "gpt-4o-mini-2024"))]
    assert names == ["oa", "mini"]
    assert [r.name for r in rules.for_call(CallIdentity("x", "y", key_fingerprint("sk-1")))] == [
        "k"
    ]
    assert key_fingerprint("sk-1") != "sk-1" and key_fingerprint(None) == "default"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{nope", "not valid JSON"),
        ('{"rules": [{"name": "a"}]}', "limits nothing"),
        ('{"rules": [{"tokens": "100/second", "requests": "5/minute"}]}', "different periods"),
        ('{"rules": [{"tokens": "lots"}]}', "rules[0].tokens: expected a whole number"),
        ('{"rules": [{"tokens": 1, "colour": 2}]}', "unknown field(s) colour"),
        ('{"rules": [{"name": "a", "tokens": 1}, {"name": "a", "tokens": 2}]}', "two rules"),
        ("/no/such/quotas.json", "not JSON and not a readable file"),
    ],
)
def test_bad_rules_are_refused_with_one_line(text: str, reason: str) -> None:
    with pytest.raises(QuotaConfigError, match=re.escape(reason)):
        parse_quotas(text)
    with pytest.raises(SettingsError) as caught:
        load_settings({"LITTLE_QUOTAS": text})
    (line,) = caught.value.problems
    assert line.startswith("LITTLE_QUOTAS=") and reason in line


def test_quota_settings_read_alone_and_from_a_file(tmp_path: Any) -> None:
    path = tmp_path / "quotas.json"
    path.write_text('{"rules": [{"name": "f", "requests": 3}]}')
    found = load_quota_settings({"LITTLE_QUOTAS": str(path), "LITTLE_QUOTA_MAX_WAIT": "2"})
    assert found.quota_max_wait == 2.0 and found.quota_lease == 900.0
    assert parse_quotas(found.quotas or "").rules[0].requests == 3
    assert load_quota_settings({}).quotas is None


# -- both backends ---------------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest, redis_url: str) -> Iterator[QuotaBackend]:
    if request.param == "memory":
        yield MemoryQuotaBackend()
        return
    client = redis.Redis.from_url(redis_url)
    yield RedisQuotaBackend(client)
    for key in client.scan_iter(match=KEY_PREFIX + "test-*"):
        client.delete(key)
    client.close()


def rule(**limits: Any) -> QuotaRule:
    return QuotaRule(name=f"test-{uuid.uuid4().hex[:12]}", **limits)


def test_a_reservation_takes_from_every_rule_or_from_none(backend: QuotaBackend) -> None:
    roomy, tight = rule(tokens=1000, period=5), rule(tokens=100, period=5)
    assert backend.reserve([roomy, tight], "a", Amounts(1, 60, 20), 10) == 0
    # 80 + 80 > 100 on the tight rule: refused, and the roomy one was not charged either.
    assert backend.reserve([roomy, tight], "b", Amounts(1, 60, 20), 10) > 0
    assert backend.reserve([roomy], "c", Amounts(1, 900, 20), 10) == 0  # 80 + 920 = 1000
    assert backend.reserve([roomy], "d", Amounts(1, 1, 0), 10) > 0


def test_settling_replaces_the_estimate_with_the_usage(backend: QuotaBackend) -> None:
    limit = rule(tokens=100, input_tokens=70, period=5)
    assert backend.reserve([limit], "a", Amounts(1, 50, 40), 10) == 0
    assert backend.reserve([limit], "b", Amounts(1, 30, 20), 10) > 0  # input 80 > 70
    backend.settle([limit], "a", Amounts(1, 50, 40), Amounts(1, 10, 5))
    assert backend.reserve([limit], "b", Amounts(1, 30, 20), 10) == 0  # 15 + 50 tokens
    # Settling twice (or a reservation that left) changes nothing.
    backend.settle([limit], "a", Amounts(1, 50, 40), Amounts(1, 10, 5))
    assert backend.reserve([limit], "c", Amounts(1, 30, 5), 10) == 0  # 65 + 35 = 100
    assert backend.reserve([limit], "d", Amounts(1, 1, 0), 10) > 0


def test_the_wait_is_until_the_oldest_settled_call_leaves_its_window(
    backend: QuotaBackend,
) -> None:
    limit = rule(requests=2, period=0.6)
    for name in ("a", "b"):
        assert backend.reserve([limit], name, Amounts(1, 0, 0), 10) == 0
        backend.settle([limit], name, Amounts(1, 0, 0), Amounts(1, 0, 0))
    settled = time.monotonic()
    wait = backend.reserve([limit], "c", Amounts(1, 0, 0), 10)
    assert 0.5 < wait <= 0.6
    time.sleep(max(0.0, wait - (time.monotonic() - settled)) + 0.02)
    assert backend.reserve([limit], "c", Amounts(1, 0, 0), 10) == 0


def test_concurrent_calls_are_counted_while_in_flight(backend: QuotaBackend) -> None:
    limit = rule(concurrent=2, period=5)
    assert backend.reserve([limit], "a", Amounts(), 10) == 0
    assert backend.reserve([limit], "b", Amounts(), 10) == 0
    wait = backend.reserve([limit], "c", Amounts(), 10)
    assert 0 < wait <= 0.25  # an unknown end: a short poll
    backend.settle([limit], "a", Amounts(), Amounts())
    assert backend.reserve([limit], "c", Amounts(), 10) == 0


def test_a_reservation_never_settled_stops_counting_after_its_lease(
    backend: QuotaBackend,
) -> None:
    limit = rule(requests=1, concurrent=1, period=0.3)
    assert backend.reserve([limit], "dead", Amounts(), 0.2) == 0  # its worker died
    assert backend.reserve([limit], "b", Amounts(), 0.2) > 0
    time.sleep(0.55)  # lease (0.2 s) and one period (0.3 s)
    assert backend.reserve([limit], "b", Amounts(), 0.2) == 0


def test_a_block_stops_every_call_of_its_rules(backend: QuotaBackend) -> None:
    blocked, other = rule(requests=100, period=5), rule(requests=100, period=5)
    backend.block([blocked], 0.4)
    wait = backend.reserve([blocked, other], "a", Amounts(), 10)
    assert 0.3 < wait <= 0.4
    assert backend.reserve([other], "b", Amounts(), 10) == 0
    time.sleep(wait + 0.02)
    assert backend.reserve([blocked, other], "a", Amounts(), 10) == 0


def test_a_block_in_redis_is_seen_by_every_client(redis_url: str) -> None:
    limit = rule(requests=100, period=5)
    first, second = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url)
    try:
        RedisQuotaBackend(first).block([limit], 0.5)
        assert RedisQuotaBackend(second).reserve([limit], "a", Amounts(), 10) > 0.3
    finally:
        for key in first.scan_iter(match=KEY_PREFIX + limit.name + "*"):
            first.delete(key)
        first.close()
        second.close()


# -- the limiter -------------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def limiter_of(*rules: QuotaRule, max_wait: float = 5.0) -> tuple[QuotaLimiter, FakeTime]:
    fake = FakeTime()
    backend = MemoryQuotaBackend(clock=fake.clock)
    made = QuotaLimiter(
        QuotaRules(tuple(rules)), backend, max_wait=max_wait, clock=fake.clock, sleep=fake.sleep
    )
    return made, fake


CALL = CallIdentity("openai", "gpt-4o")


def test_the_limiter_waits_in_place_then_admits() -> None:
    limiter, fake = limiter_of(rule(requests=1, period=2))
    first = limiter.reserve(CALL, Amounts(1, 10, 10))
    assert first is not None and first.waited == 0
    first.settle(8, 3)
    second = limiter.reserve(CALL, Amounts(1, 10, 10))
    assert second is not None and second.waited == pytest.approx(2.0)
    assert max(fake.slept) <= 0.5  # slices: cancellation is looked at while waiting


def test_the_limiter_gives_up_past_its_max_wait_and_on_cancellation() -> None:
    limiter, _ = limiter_of(rule(requests=1, period=30), max_wait=5)
    held = limiter.reserve(CALL, Amounts())
    assert held is not None
    held.settle(0, 0)
    with pytest.raises(QuotaWaitTooLong, match=r"expected in 30\.00 s") as caught:
        limiter.reserve(CALL, Amounts())
    assert caught.value.expected_in == pytest.approx(30.0)
    limiter, _ = limiter_of(rule(requests=1, period=3), max_wait=5)
    assert limiter.reserve(CALL, Amounts()) is not None
    assert limiter.reserve(CALL, Amounts(), cancelled=lambda: True) is None


def test_a_call_larger_than_a_whole_period_is_refused_at_once() -> None:
    limiter, fake = limiter_of(rule(tokens=100, period=60))
    with pytest.raises(QuotaTooSmall, match="needs 120 tokens"):
        limiter.reserve(CALL, Amounts(1, 100, 20))
    assert fake.slept == []


def test_calls_no_rule_matches_are_not_limited() -> None:
    limiter, _ = limiter_of(QuotaRule(name="other", provider="anthropic", requests=1))
    assert limiter.reserve(CALL, Amounts()) is None


def test_a_429_blocks_the_rules_for_its_retry_after() -> None:
    limiter, _ = limiter_of(rule(requests=100, period=60))
    held = limiter.reserve(CALL, Amounts())
    assert held is not None
    held.rejected(1.5)
    again = limiter.reserve(CALL, Amounts())
    assert again is not None and again.waited == pytest.approx(1.5)


def test_the_example_in_the_operations_guide_is_valid() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    section = docs.split("\n## Provider quotas\n", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"export LITTLE_QUOTAS='(.*?)'\n", section, re.S)
    (rule,) = parse_quotas(example).rules
    assert (rule.requests, rule.tokens, rule.concurrent, rule.period) == (600, 150000, 32, 60)


def test_an_unreachable_store_fails_the_reservation_and_never_the_settlement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from little_dist.errors import StorageUnavailableError
    from little_dist.quotas import Reservation

    # No retries: redis-py's default backs off for seconds before it gives up.
    unreachable = redis.Redis(port=1, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    gone = RedisQuotaBackend(unreachable)
    limit = rule(requests=5)
    limiter = QuotaLimiter(QuotaRules((limit,)), gone)
    with pytest.raises(StorageUnavailableError, match="quota store"):
        limiter.reserve(CALL, Amounts())
    held = Reservation(limiter, (limit,), "r1", Amounts())
    held.rejected(2.0)  # the call is over: logged, not raised
    assert "not recorded" in caplog.text and "not settled" in caplog.text
