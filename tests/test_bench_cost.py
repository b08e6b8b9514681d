"""The cost benchmark's own measuring (bench/cost.py): what it reads is what is there."""

from __future__ import annotations

import uuid

import pytest

from bench.cost import archive_rates, parse_s3_requests, say_rss, snapshot
from bench.fleet import Report

METRICS = """# HELP SeaweedFS_s3_request_total Counter of s3 requests.
# TYPE SeaweedFS_s3_request_total counter
SeaweedFS_s3_request_total{bucket="",code="200",type="LIST"} 1
SeaweedFS_s3_request_total{bucket="little-cost",code="200",type="GET"} 2
SeaweedFS_s3_request_total{bucket="little-cost",code="412",type="PUT"} 3
SeaweedFS_s3_request_total{bucket="other",code="200",type="PUT"} 9
"""


def test_s3_requests_are_counted_for_the_bucket_by_type_and_code() -> None:
    counts = parse_s3_requests(METRICS, "little-cost")
    assert counts == {("GET", "200"): 2, ("PUT", "412"): 3}


@pytest.mark.integration
def test_snapshot_attributes_keys_to_runs_with_their_bytes_and_ttls(redis_url: str) -> None:
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis_url)
    prefix = f"little-test:cost-{uuid.uuid4().hex[:8]}:"
    try:
        client.xadd(f"{prefix}{{run_a}}:events", {"e": "x" * 100})
        client.set(f"{prefix}{{run_a}}:ended", "1", ex=60)
        client.set(f"{prefix}version:v1", "d")
        keys = {key.name.removeprefix(prefix): key for key in snapshot(client, prefix)}
    finally:
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
    assert set(keys) == {"{run_a}:events", "{run_a}:ended", "version:v1"}
    assert keys["{run_a}:events"].run == "run_a" and keys["version:v1"].run is None
    assert keys["{run_a}:events"].size > 100
    assert keys["version:v1"].ttl_ms == -1 and 0 < keys["{run_a}:ended"].ttl_ms <= 60_000
    assert (keys["{run_a}:events"].kind, keys["{run_a}:ended"].kind) == ("stream", "string")


def test_archive_throughput_is_the_drain_rate_against_the_completion_rate() -> None:
    # 10 s of load: 200 runs ended (20/s); 90 waited when the last ended, gone in 5 s of
    # which 2 s were the archive delay every run waits: 30 archived/s with a backlog.
    samples = [(float(t), 20 * t, 20 * t, 5) for t in range(11)]
    rates = archive_rates(samples, [(90, 5.0)], archive_delay=2.0)
    assert rates is not None
    completion, archive = rates
    assert completion == pytest.approx(20.0) and archive == pytest.approx(30.0)
    assert archive_rates(samples, [(0, 0.1)], archive_delay=2.0) is None  # nothing waited
    assert archive_rates([(0.0, 0, 0, 0)], [(9, 3.0)], archive_delay=2.0) is None


def test_rss_is_judged_on_the_later_window_not_the_warm_up() -> None:
    # KiB at: start, after 640 runs, after 2,000 more, after 2,000 more. The scheduler grows
    # 16 MiB while warming up, then 0.5 MiB a 1,000 runs: flat. A worker that keeps growing
    # 3 MiB a 1,000 runs in the later window misses the target.
    mib = 1024
    start, measured, half, end = (
        [100 * mib, 200 * mib],
        [110 * mib, 210 * mib],
        [116 * mib, 216 * mib],
        [117 * mib, 222 * mib],
    )
    report = Report()
    say_rss(report, ["scheduler", "worker-0"], [start, measured, half, end], 640, 2000)
    (line,) = report.lines
    assert "scheduler 117.0 MiB (warm-up: +15.62 over the first 640" in line
    assert "then +0.50 MiB/1,000 runs" in line and "then +3.00 MiB/1,000 runs" in line
    assert line.endswith("MISSED")
    report = Report()
    say_rss(report, ["scheduler"], [[start[0]], [measured[0]], [half[0]], [end[0]]], 640, 2000)
    assert report.lines[0].endswith("OK")
