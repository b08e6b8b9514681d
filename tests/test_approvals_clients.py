"""Approvals from Python and what a waiting run says of itself, on a real fleet (Redis, S3, a
worker, the scheduler, ``little serve``): ``Client.approvals``, ``approve`` and ``reject`` on
the fleet's ``Client`` and on ``Client(url, token=)``, with the same answers and errors; and
``little status``, ``GET /v1/runs/{id}`` and ``little report`` (JSON and HTML) naming the
call a run waits for, since when, its deadline and the commands that answer it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from little_dist.approvals import ApprovalDecidedError, ApprovalNotFoundError
from little_dist.fleet.client import Client
from little_dist.fleet.http_answers import ApiAccessError
from little_dist.subruns.links import STEP_SUSPENDED
from little_dist.world.base import RunNotFoundError
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.http_service import little, start_serve, token_store

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

APP = "tests.approvals_fleet_app"


def _wait_until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_approvals_from_both_clients_and_a_waiting_runs_status(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    from tests.approvals_fleet_app import ask

    fleet_env.env["LITTLE_APP"] = APP
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP)
    served = start_serve(fleet_env, app=APP)
    redis, store = token_store(fleet_env)
    try:
        decider = store.create(["runs:read", "approvals:decide"], name="ops-bot").token
        reader = store.create(["runs:read"]).token
    finally:
        redis.close()
    world = fleet_env.world()
    with fleet_env.client() as client:
        first, second = client.submit(ask, {}), client.submit(ask, {})
        for run_id in (first, second):
            _wait_until(
                f"{run_id} to suspend",
                lambda run_id=run_id: any(
                    e.type == STEP_SUSPENDED for e in world.list_events(run_id)
                ),
            )
        pending = client.approvals()
        assert {a.run_id for a in pending} == {first, second}
        assert pending == sorted(pending, key=lambda a: (a.requested_at, a.approval_id))
        (mine,) = client.approvals(run_id=first)
        assert (mine.tool_name, mine.step_path, mine.args, mine.pending) == (
            "refund",
            "pay",
            {"account": "acme-42", "amount": 42},
            True,
        )
        with pytest.raises(RunNotFoundError):
            client.approvals(run_id="run_nobody_here")

        # What the waiting run says of itself: which call, since when, how to answer.
        view = client.status(first)
        (waiting,) = view.waiting
        assert (waiting["approvalId"], waiting["toolName"], waiting["stepPath"]) == (
            mine.approval_id,
            "refund",
            "pay",
        )
        assert waiting["since"] == mine.requested_at and waiting["deadline"] is None
        assert waiting["answer"]["approve"].startswith(
            f"little approvals approve {mine.approval_id}"
        )
        shown = little(fleet_env, "status", first)
        assert shown.returncode == 0, shown.stderr
        assert "running (waiting for approval)" in shown.stdout
        assert f"step pay calls refund: waiting since {mine.requested_at}, no deadline" in (
            shown.stdout
        )
        assert f"little approvals reject {mine.approval_id}" in shown.stdout
        page = tmp_path / "report.html"
        made = little(fleet_env, "report", first, "--html", str(page))
        assert made.returncode == 0, made.stderr
        html = page.read_text()
        assert "Waiting for approval" in html and mine.approval_id in html
        assert client.report(first)["waiting"] == [waiting]

        decided = client.approve(mine.approval_id, reason="known customer", by="ada")
        assert (decided.decision, decided.decided_by, decided.via, decided.reason) == (
            "allow",
            "ada",
            "api",
            "known customer",
        )
        with pytest.raises(ApprovalDecidedError, match="already approved by ada"):
            client.reject(mine.approval_id)
        assert client.wait(first, timeout=60).status == "completed"
        assert client.status(first).waiting == ()
        assert [a.run_id for a in client.approvals()] == [second]

    with Client(served.url, token=decider) as http:
        with served.client(decider) as raw:
            assert raw.get(f"/v1/runs/{second}").json()["waiting"][0]["toolName"] == "refund"
        (theirs,) = http.approvals()
        assert theirs.run_id == second and theirs.args == {"account": "acme-42", "amount": 42}
        assert http.approvals(run_id=second) == [theirs]
        assert http.approvals(run_id=first) == []  # decided already
        (http_view,) = http.status(second).waiting
        assert http_view["approvalId"] == theirs.approval_id
        with pytest.raises(RunNotFoundError):
            http.approvals(run_id="run_nobody_here")
        with pytest.raises(ApprovalNotFoundError):
            http.approve(f"apr_{'0' * 16}.{second}")
        with Client(served.url, token=reader) as looker:
            assert looker.approvals() == [theirs]
            with pytest.raises(ApiAccessError, match="approvals:decide"):
                looker.reject(theirs.approval_id)
        rejected = http.reject(theirs.approval_id, reason="not this one")
        assert (rejected.decision, rejected.decided_by, rejected.via) == ("deny", "ops-bot", "http")
        with pytest.raises(ApprovalDecidedError, match="already rejected"):
            http.approve(theirs.approval_id)
        state = http.wait(second, timeout=60)
    failed = [e for e in world.list_events(second) if e.type == "harness.tool_call.failed"]
    assert failed and failed[0].payload["error"]["causeCode"] == "permission_denied"
    assert state.status == "failed"
