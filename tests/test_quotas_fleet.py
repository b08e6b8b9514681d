"""Provider quotas on the real fleet: two worker processes (four slots each) share one key's
token quota through Redis, against the scripted provider enforcing the same quota (the
simulator, Redis-backed, shared by both workers). Periods of one second keep it quick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_dist.testing.provider_quota import ProviderQuota
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.quota_fleet_app import build_script, fan

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

TOKENS_PER_SECOND = 600  # a call is about 95 tokens: six calls a second
RUNS, ITEMS = 3, 8


def busiest_window(served: list[tuple[float, int]], period: float) -> int:
    """The most tokens the provider saw arrive within any ``period`` seconds."""
    most = 0
    for start, _ in served:
        most = max(most, sum(t for at, t in served if start <= at < start + period))
    return most


def test_concurrent_runs_on_one_key_never_exceed_its_tokens_per_period(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    quota = ProviderQuota(
        tokens=TOKENS_PER_SECOND,
        period=1,
        redis_url=fleet_env.redis_url,
        name=f"{fleet_env.key_prefix}sim",
    )
    script = build_script(quota, latency=0.05).save(tmp_path / "script.json")
    rules = {"rules": [{"name": f"{fleet_env.key_prefix}key", "provider": "scripted",
                        "tokens": f"{TOKENS_PER_SECOND}/second"}]}  # fmt: skip
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.quota_fleet_app",
            "LITTLE_SCRIPTED_MODEL": str(script),
            "LITTLE_QUOTAS": json.dumps(rules),
        }
    )
    try:
        for _ in range(2):
            start_worker(fleet_env, app="tests.quota_fleet_app", concurrency=4)
        start_scheduler(fleet_env)
        client = fleet_env.client()
        run_ids = [
            client.submit(fan, {"keys": [f"r{run}-{item}" for item in range(ITEMS)], "pad": ""})
            for run in range(RUNS)
        ]
        states = [client.wait(run_id, timeout=120) for run_id in run_ids]
        assert [state.status for state in states] == ["completed"] * RUNS, states[0].error
        branches = [branch for state in states for branch in state.output]
        assert [b["status"] for b in branches] == ["completed"] * RUNS * ITEMS, branches
        served = quota.served()
        assert len(served) == RUNS * ITEMS
        assert quota.refused() == 0
        total = sum(tokens for _, tokens in served)
        # The quota bound the fleet (eight slots would have sent everything in well under a
        # second), and no second of it saw more than the quota.
        span = max(at for at, _ in served) - min(at for at, _ in served)
        assert span >= total / TOKENS_PER_SECOND - 1.5
        assert busiest_window(served, 1.0) <= TOKENS_PER_SECOND
    finally:
        quota.reset()
