"""``/metrics`` of ``little serve``: its requests by route template and status, their
latency, and the event streams open now, scraped from the process as Prometheus would."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fleet_processes import FleetEnv, fleet_env
from tests.http_service import RUN, start_serve, token_store

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest


def _samples(http: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = http.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _count(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], **labels: str) -> float:
    key = ("little_api_requests_total", tuple(sorted(labels.items())))
    return samples.get(key, 0.0)


def _watchers(http: httpx.Client) -> float:
    return _samples(http)[("little_api_sse_watchers", ())]


def test_requests_are_counted_by_route_template_and_status_and_streams_open(
    fleet_env: FleetEnv,
) -> None:
    served = start_serve(fleet_env)  # no worker: a run stays running, its stream open
    redis, tokens = token_store(fleet_env)
    try:
        token = tokens.create(["runs:submit", "runs:read"]).token
    finally:
        redis.close()
    with served.client() as anonymous, served.client(token) as http:
        assert anonymous.get("/v1/runs").status_code == 401
        run_id = http.post("/v1/runs", json=RUN).json()["runId"]
        for _ in range(3):
            assert http.get(f"/v1/runs/{run_id}").status_code == 200
        assert http.get("/v1/runs/run_nobody").status_code == 404
        assert http.get("/no/such/path").status_code == 404
        samples = _samples(http)
        assert _count(samples, method="GET", route="/v1/runs", status="401") == 1
        assert _count(samples, method="POST", route="/v1/runs", status="202") == 1
        assert _count(samples, method="GET", route="/v1/runs/{run_id}", status="200") == 3
        assert _count(samples, method="GET", route="/v1/runs/{run_id}", status="404") == 1
        assert _count(samples, method="GET", route="unmatched", status="404") == 1
        # No run id in any label: the route is its template.
        assert not any(run_id in value for _, labels in samples for _, value in labels)
        latency = (
            "little_api_request_duration_seconds_count",
            (("method", "GET"), ("route", "/v1/runs/{run_id}")),
        )
        assert samples[latency] == 4
        assert samples[("little_process_info", (("process", "api"),))] == 1
        assert _watchers(http) == 0

        with http.stream("GET", f"/v1/runs/{run_id}/events") as stream:
            assert stream.status_code == 200
            # (Held: an iterator dropped is closed, and httpx closes the connection with it,
            # which the server now notices at once.)
            lines = stream.iter_lines()
            next(lines)  # the first event came: the stream is open
            assert _watchers(http) == 1
            lines.close()
        # The server lets go of a stream its client left (at the latest when its wait for
        # the run's next event ends, 10 s).
        deadline = time.monotonic() + 20
        while _watchers(http) != 0:
            assert time.monotonic() < deadline, "the stream was still counted open after 20 s"
            time.sleep(0.3)
        samples = _samples(http)
        assert _count(samples, method="GET", route="/v1/runs/{run_id}/events", status="200") == 1
