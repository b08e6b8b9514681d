"""bench/http_api.py at its smallest size: it starts what it measures, measures both figures
and says them (the figures themselves are for a real run, not a test)."""

from __future__ import annotations

import re

import pytest

from bench.http_api import main

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_the_http_bench_runs_at_its_smallest_size(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LITTLE_BENCH_REDIS_URL", redis_url)
    sizes = "--submits 2 --clients 1 --rounds 1 --watchers 2 --runs 1 --events 2"
    assert main([*sizes.split(), "--interval", "0.05"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\(a\) submit, 2 runs .*Client\.submit \d+ runs/s; POST /v1/runs", out), out
    assert "(b) SSE, 2 watchers of 1 live runs" in out, out
    assert "0 of 4 deliveries missing" in out, out
