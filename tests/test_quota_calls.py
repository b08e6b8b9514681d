"""The model call seam in process (``run_workflow``, the in-memory limiter from
``LITTLE_QUOTAS``) against the scripted provider's own rate limit (the simulator)."""

from __future__ import annotations

import json
import uuid
from itertools import pairwise
from typing import Any

import pytest

from little_dist import run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.harness.model_calls import import_litellm, retry_after_of
from little_dist.testing.provider_quota import ProviderQuota
from little_dist.world.in_process import MemoryWorld
from tests.quota_fleet_app import build_script, one


def quotas(monkeypatch: pytest.MonkeyPatch, **rule: Any) -> None:
    """This test's rules (a fresh name: a fresh in-memory window)."""
    named = {"name": f"test-{uuid.uuid4().hex[:10]}", "provider": "scripted", **rule}
    monkeypatch.setenv("LITTLE_QUOTAS", json.dumps({"rules": [named]}))


def run_one(item: str) -> Any:
    """The run's state, failed or not."""
    try:
        return run_workflow(one, {"item": item}, world=MemoryWorld()).state
    except RunFailedError as failed:
        return failed.result.state


def test_the_simulator_answers_429_with_retry_after_beyond_its_limit() -> None:
    quota = ProviderQuota(requests=2, tokens=10_000, period=1)
    litellm = import_litellm()
    with build_script(quota).installed():
        for _ in range(2):
            litellm.completion(model="scripted/quota", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(litellm.RateLimitError) as caught:
            litellm.completion(model="scripted/quota", messages=[{"role": "user", "content": "hi"}])
    assert 0 < (retry_after_of(caught.value) or 0) <= 1.0
    assert quota.refused() == 1 and len(quota.served()) == 2


def test_without_the_limiter_calls_over_the_providers_limit_get_429s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LITTLE_QUOTAS", raising=False)
    quota = ProviderQuota(requests=1, period=2)
    with build_script(quota).installed():
        assert run_one("a").status == "completed"
        failed = run_one("b")  # three attempts at once, each refused
    assert failed.status == "failed"
    assert quota.refused() == 3


def test_calls_wait_in_place_for_quota_and_the_provider_never_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quotas(monkeypatch, requests=1, period=1)
    quota = ProviderQuota(requests=1, period=1)
    with build_script(quota).installed():
        results = [run_one(item) for item in "abc"]
    assert [result.status for result in results] == ["completed"] * 3
    assert quota.refused() == 0
    times = [at for at, _ in quota.served()]
    assert all(later - earlier >= 0.95 for earlier, later in pairwise(times))


def test_a_429_blocks_the_key_for_its_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    # The limiter's own rule never binds; the provider's limit (1 call in 2 s) does. The 429
    # blocks the key: the step's next attempt waits out the Retry-After instead of trying
    # again at once (which would be refused again: see the test above).
    quotas(monkeypatch, requests=100, period=60)
    quota = ProviderQuota(requests=1, period=2)
    with build_script(quota).installed():
        assert run_one("a").status == "completed"
        second = run_one("b")
    assert second.status == "completed"
    assert quota.refused() == 1
    (first_at, _), (second_at, _) = quota.served()
    assert second_at - first_at >= 1.9


def test_a_quota_no_call_can_fit_fails_the_step_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quotas(monkeypatch, tokens=20, period=60)  # max_tokens alone is 64
    with build_script(ProviderQuota(requests=100)).installed():
        result = run_one("a")
    assert result.status == "failed"
    error = result.error or {}
    assert error.get("causeCode") == "runtime_config_error"
    assert "more than quota" in str(error.get("message"))
