"""A token restricted to workflows (``little tokens create --workflow``) reads only the runs
of those workflows, on a real fleet and ``little serve``: any other run is a 404 that says
what an unknown run's says (its existence is not leaked), in every read (status, report,
events as SSE and NDJSON, the viewer's fragment, approvals) and in cancel and decide; lists
leave such runs out. No token is a 401, a token without the scope a 403."""

from __future__ import annotations

import time

import pytest

from little_dist.subruns.links import STEP_SUSPENDED
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_service import APP, is_problem, start_serve, token_store

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

APPS = [APP, "tests.approvals_fleet_app"]
UNKNOWN = "run_nobody_ever_ran_this"


def _reads(run_id: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Each read of one run: its path and headers."""
    return {
        "status": (f"/v1/runs/{run_id}", {}),
        "report": (f"/v1/runs/{run_id}/report", {}),
        "sse": (f"/v1/runs/{run_id}/events", {"Accept": "text/event-stream"}),
        "ndjson": (f"/v1/runs/{run_id}/events", {"Accept": "application/x-ndjson"}),
        "viewer": (f"/ui/fragments/runs/{run_id}", {}),
        "approvals": (f"/v1/approvals?runId={run_id}", {}),
    }


def test_a_token_restricted_to_workflows_sees_only_their_runs(fleet_env: FleetEnv) -> None:
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APPS)
    served = start_serve(fleet_env, app=APPS)
    redis, store = token_store(fleet_env)
    try:
        admin = store.create(["admin"]).token
        only_ask = store.create(
            ["runs:read", "runs:cancel", "approvals:decide"], workflows=["approvals.ask"]
        ).token
        only_steps = store.create(["runs:read", "approvals:decide"], workflows=["http.steps"]).token
        no_read = store.create(["runs:submit"], workflows=["approvals.ask"]).token
    finally:
        redis.close()
    with served.client(admin) as http:
        ids = {}
        for workflow, run_input in (("approvals.ask", {}), ("http.steps", {"sleep": 0})):
            answer = http.post("/v1/runs", json={"workflow": workflow, "input": run_input})
            assert answer.status_code == 202, answer.text
            ids[workflow] = answer.json()["runId"]
    asked, steps = ids["approvals.ask"], ids["http.steps"]
    world = fleet_env.world()
    deadline = time.monotonic() + 60
    while not any(e.type == STEP_SUSPENDED for e in world.list_events(asked)):
        assert time.monotonic() < deadline, "the ask did not suspend"
        time.sleep(0.1)
    (approval_id,) = [
        e.payload["approvalId"]
        for e in world.list_events(asked)
        if e.type == "little.approval.requested"
    ]

    with served.client(only_ask) as http:
        for name, (path, headers) in _reads(steps).items():
            hidden = is_problem(http.get(path, headers=headers), 404)
            unknown_path, unknown_headers = _reads(UNKNOWN)[name]
            unknown = is_problem(http.get(unknown_path, headers=unknown_headers), 404)
            assert hidden["detail"] == unknown["detail"].replace(UNKNOWN, steps), name
        for name, (path, headers) in _reads(asked).items():
            if name == "sse":
                continue  # (a live stream: its status is looked at below, unread)
            assert http.get(path, headers=headers).status_code == 200, name
        with http.stream("GET", f"/v1/runs/{asked}/events") as stream:
            assert stream.status_code == 200
        listed = http.get("/v1/runs").json()["runs"]
        assert [run["runId"] for run in listed] == [asked]
        assert steps not in http.get("/ui/fragments/runs").text
        (pending,) = http.get("/v1/approvals").json()["approvals"]
        assert pending["approvalId"] == approval_id
        is_problem(http.post(f"/v1/runs/{steps}/cancel"), 404)

    with served.client(only_steps) as http:
        assert http.get("/v1/approvals").json()["approvals"] == []
        assert [run["runId"] for run in http.get("/v1/runs").json()["runs"]] == [steps]
        hidden = is_problem(
            http.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"}), 404
        )
        assert "approval not found" in hidden["detail"]
    with served.client(no_read) as http:
        for path, headers in _reads(asked).values():
            assert "runs:read" in is_problem(http.get(path, headers=headers), 403)["detail"]
    with served.client() as http:
        for path, headers in _reads(asked).values():
            is_problem(http.get(path, headers=headers), 401)
    with served.client(only_ask) as http:
        answer = http.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert answer.status_code == 200, answer.text
