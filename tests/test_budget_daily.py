"""An operator's daily dollar ceiling per API key (``LITTLE_QUOTAS`` ``daily``): every run of
the key spends from it, each call holding its worst case before it is sent and settling at
its price; a call that would pass it is not sent (``daily_budget_exceeded``)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from little_dist import run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.observability import FleetMetrics
from little_dist.quotas import QuotaConfigError, parse_quotas
from little_dist.quotas.daily import DailyCeiling, MemoryDailyBackend
from little_dist.quotas.limiter import DailyBudgetExceeded, QuotaLimiter
from little_dist.quotas.rules import CallIdentity
from little_dist.world.in_process import MemoryWorld
from tests.budget_app import build_script, fan, worst_case_floor
from tests.test_metrics import metrics, sample

__all__ = ["metrics"]  # the fixture, re-exported for pytest

KEYS = [f"k{i}" for i in range(10)]


def daily(monkeypatch: pytest.MonkeyPatch, usd: float, name: str) -> None:
    ceiling = {"name": name, "provider": "scripted", "model": "quota", "usd": usd}
    monkeypatch.setenv("LITTLE_QUOTAS", json.dumps({"daily": [ceiling]}))


def _run(world: MemoryWorld, run_id: str) -> Any:
    try:
        return run_workflow(
            fan, {"keys": KEYS, "pad": ""}, world=world, run_id=run_id, max_workers=3
        ).state
    except RunFailedError as failed:
        return failed.result.state


def _refused(world: MemoryWorld, run_id: str) -> int:
    return sum(
        1
        for e in world.list_events(run_id)
        if e.type == "StepFailed" and e.payload["error"]["causeCode"] == "daily_budget_exceeded"
    )


def test_two_concurrent_runs_share_a_keys_daily_ceiling(
    monkeypatch: pytest.MonkeyPatch, metrics: FleetMetrics
) -> None:
    usd = 9 * worst_case_floor  # a few calls' worst case, far fewer than the runs' 20 calls
    daily(monkeypatch, usd, "scripted-day-shared")
    world = MemoryWorld()
    script = build_script(None, latency=0.02)
    states: dict[str, Any] = {}
    with script.installed():
        threads = [
            threading.Thread(target=lambda r=r: states.__setitem__(r, _run(world, r)))
            for r in ("run_day_a", "run_day_b")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    sent = len(script.calls)
    refused = _refused(world, "run_day_a") + _refused(world, "run_day_b")
    assert 0 < sent < 2 * len(KEYS) and sent + refused == 2 * len(KEYS)
    spent = states["run_day_a"].spent_usd + states["run_day_b"].spent_usd
    assert 0 < spent <= usd
    for run_id in ("run_day_a", "run_day_b"):
        assert states[run_id].status == "completed"  # (all_settled: every branch ended)
    assert sample(metrics, "little_budget_refusals_total", scope="key_daily") == refused


def test_a_call_over_the_ceiling_fails_its_step_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    daily(monkeypatch, worst_case_floor / 2, "scripted-day-tiny")  # no call fits
    world = MemoryWorld()
    script = build_script(None)
    with script.installed():
        state = _run(world, "run_day_tiny")
    assert len(script.calls) == 0
    assert _refused(world, "run_day_tiny") == len(KEYS)
    attempts = [
        e
        for e in world.list_events("run_day_tiny")
        if e.type == "StepAttemptStarted" and e.payload["stepPath"].endswith(".ask")
    ]
    assert len(attempts) == len(KEYS)  # terminal: never retried
    assert state.spent_usd == 0


def test_the_limiter_holds_the_worst_case_then_settles_the_price_once() -> None:
    rules = parse_quotas(json.dumps({"daily": [{"name": "d", "provider": "p", "usd": 1.0}]}))
    days = iter(["2026-01-01", "2026-01-01", "2026-01-01", "2026-01-02"])
    backend = MemoryDailyBackend()
    limiter = QuotaLimiter(rules, MemoryQuotaBackendStub(), daily=backend, today=lambda: next(days))
    call = CallIdentity("p", "m")
    ceiling = rules.daily[0]
    first = limiter.reserve_daily(call, 0.75)
    assert first is not None and backend.spent(ceiling, "2026-01-01") == 0.75
    with pytest.raises(DailyBudgetExceeded, match=r"'d' \(\$1 a UTC day\) for 2026-01-01"):
        limiter.reserve_daily(call, 0.5)
    first.settle(0.25)
    first.settle(0.5)  # (once)
    assert backend.spent(ceiling, "2026-01-01") == 0.25
    assert limiter.reserve_daily(call, 0.5) is not None  # the price freed the rest
    assert limiter.reserve_daily(call, 0.9) is not None  # a new UTC day
    assert limiter.reserve_daily(CallIdentity("other", "m"), 5.0) is None  # not its calls


class MemoryQuotaBackendStub:
    """No rate rules in these tests: the rate backend is never asked."""


@pytest.mark.parametrize(
    ("daily_", "message"),
    [
        ({"usd": 0}, r"daily\[0\]\.usd: expected a positive number"),
        ({"usd": "5"}, r"daily\[0\]\.usd: expected a positive number"),
        ({"usd": 5, "tokens": 3}, r"daily\[0\]: unknown field\(s\) tokens"),
        ({"usd": 5, "provider": ""}, r"daily\[0\]\.provider: expected a non-empty string"),
    ],
)
def test_a_bad_daily_ceiling_is_refused_in_one_line(daily_: dict[str, Any], message: str) -> None:
    with pytest.raises(QuotaConfigError, match=message):
        parse_quotas(json.dumps({"daily": [daily_]}))
    assert parse_quotas(json.dumps({"daily": [{"usd": 5}]})).daily == (
        DailyCeiling(name="*/*/*/day", usd=5.0),
    )
