"""Approvals on the fleet (real ``little worker``, ``little scheduler`` and ``little serve``
processes, Redis and S3): an ``ask`` that no approver answers suspends its step (the slot is
freed: a 1-slot worker runs other work meanwhile), a person's decision over HTTP resumes it
on another worker after the first was SIGKILLed, a rejection from the CLI fails the call as a
rule's deny does, and a rule's deadline applies its default. The app is
:mod:`tests.approvals_fleet_app`."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from little_dist.events import Event
from little_dist.subruns.links import STEP_SUSPENDED
from tests.fleet_processes import FleetEnv, FleetProcess, fleet_env, start_scheduler, start_worker
from tests.http_service import is_problem, little, start_serve, token_store

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

APP = "tests.approvals_fleet_app"
REQUESTED = "little.approval.requested"
DECIDED = "little.approval.decided"


def _of(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def _wait_until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _suspended(fleet: FleetEnv, run_id: str) -> str:
    """Wait until the run's step is suspended for a person; the approval id."""
    world = fleet.world()
    _wait_until("the step to suspend", lambda: bool(_of(world.list_events(run_id), STEP_SUSPENDED)))
    events = world.list_events(run_id)
    (requested,) = _of(events, REQUESTED)
    (suspended,) = _of(events, STEP_SUSPENDED)
    approval_id: str = requested.payload["approvalId"]
    assert suspended.payload["waitingFor"] == [approval_id]
    assert approval_id.endswith(f".{run_id}")
    return approval_id


def _workers_of(events: list[Event]) -> list[str]:
    return [e.payload["workerId"] for e in events if e.type == "StepAttemptStarted"]


def _names(worker: FleetProcess) -> str:
    return f"worker:{socket.gethostname()}:{worker.pid}:"


def _failed_call(events: list[Event]) -> dict[str, Any]:
    (failed,) = _of(events, "harness.tool_call.failed")
    error: dict[str, Any] = failed.payload["error"]
    return error


def test_an_ask_frees_its_slot_and_an_http_approval_resumes_it_on_another_worker(
    fleet_env: FleetEnv,
) -> None:
    from tests.approvals_fleet_app import ask, quick

    fleet_env.env["LITTLE_APP"] = APP
    start_scheduler(fleet_env)
    first = start_worker(fleet_env, app=APP, concurrency=1)
    served = start_serve(fleet_env, app=APP)
    redis, store = token_store(fleet_env)
    client = fleet_env.client()
    try:
        run_id = client.submit(ask, {})
        approval_id = _suspended(fleet_env, run_id)
        # The one slot is free: other work runs to its end while the refund waits.
        other = client.submit(quick, {})
        assert client.wait(other, timeout=60).status == "completed"
        assert client.status(run_id).status == "running"
        reader = store.create(["runs:read"], name="viewer").token
        decider = store.create(["approvals:decide"], name="ops-bot").token
        with served.client(reader) as http:
            (listed,) = http.get("/v1/approvals").json()["approvals"]
            assert (listed["approvalId"], listed["toolName"], listed["status"]) == (
                approval_id,
                "refund",
                "pending",
            )
            assert listed["args"] == {"account": "acme-42", "amount": 42}
            # A token without the scope may look, not decide.
            body = is_problem(
                http.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"}), 403
            )
            assert "approvals:decide" in body["detail"]
        with served.client() as http:
            is_problem(http.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"}), 401)
        first.kill()  # SIGKILL: the step resumes on another worker
        second = start_worker(fleet_env, app=APP, concurrency=1)
        with served.client(decider) as http:
            answer = http.post(
                f"/v1/approvals/{approval_id}",
                json={"decision": "approve", "reason": "known customer", "by": "ada"},
            )
            assert answer.status_code == 200, answer.text
            decided = answer.json()
            assert (decided["status"], decided["decidedBy"], decided["via"]) == (
                "approved",
                "ada",
                "http",
            )
            # Decided once: a second decision is a conflict, a bad id not found.
            again = http.post(f"/v1/approvals/{approval_id}", json={"decision": "reject"})
            assert is_problem(again, 409)["code"] == "approval_decided"
            assert "already approved by ada" in again.json()["detail"]
            for bad in ("apr_0000000000000000." + run_id, "nonsense", "apr_x.run_nobody"):
                missing = is_problem(
                    http.post(f"/v1/approvals/{bad}", json={"decision": "approve"}), 404
                )
                assert "approval not found" in missing["detail"]
            bad_body = http.post(f"/v1/approvals/{approval_id}", json={"decision": "maybe"})
            assert is_problem(bad_body, 422)["errors"][0]["pointer"] == "/decision"
        state = client.wait(run_id, timeout=90)
        assert state.status == "completed", state.error
        assert state.output == {"refunded": 42, "account": "acme-42"}
        events = fleet_env.world().list_events(run_id)
        (decision,) = _of(events, DECIDED)
        assert decision.payload["decidedBy"] == "ada"
        assert decision.payload["reason"] == "known customer"
        assert decision.payload["tokenId"] == store.verify(decider).id  # type: ignore[union-attr]
        workers = _workers_of(events)
        assert len(workers) == 2
        assert workers[0].startswith(_names(first))
        assert workers[1].startswith(_names(second))
        (ran,) = _of(events, "harness.tool_call.succeeded")
        assert ran.payload["attempt"] == 2
        (gate,) = _of(events, "harness.permission.decided")
        assert (gate.payload["reason"], gate.payload["approvalId"]) == ("approved", approval_id)
        with served.client(reader) as http:
            assert http.get("/v1/approvals").json() == {"approvals": []}
    finally:
        redis.close()


def test_a_rejection_from_the_cli_fails_the_call_as_a_deny_rule_does(
    fleet_env: FleetEnv,
) -> None:
    from tests.approvals_fleet_app import ask, deny

    fleet_env.env["LITTLE_APP"] = APP
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=1)
    client = fleet_env.client()
    denied = client.submit(deny, {})
    run_id = client.submit(ask, {})
    approval_id = _suspended(fleet_env, run_id)
    listed = little(fleet_env, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    assert approval_id in listed.stdout and "refund" in listed.stdout
    for bad, why in (("nonsense", "approval not found"), (approval_id[:-3], "no run")):
        wrong = little(fleet_env, "approvals", "approve", bad)
        assert wrong.returncode == 1
        assert why in wrong.stderr and "Traceback" not in wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1
    rejected = little(
        fleet_env, "approvals", "reject", approval_id, "--reason", "not today", "--by", "bob"
    )
    assert rejected.returncode == 0, rejected.stderr
    assert rejected.stdout.strip() == f"approval {approval_id} rejected by bob"
    twice = little(fleet_env, "approvals", "approve", approval_id)
    assert twice.returncode == 1 and "already rejected by bob" in twice.stderr
    state = client.wait(run_id, timeout=90)
    by_rule = client.wait(denied, timeout=60)
    assert state.status == by_rule.status == "failed"
    world = fleet_env.world()
    rejection = _failed_call(world.list_events(run_id))
    rule_deny = _failed_call(world.list_events(denied))
    shape = ("name", "causeCode", "retriable")
    assert [rejection[k] for k in shape] == [rule_deny[k] for k in shape]
    assert rejection["causeCode"] == "permission_denied" and rejection["retriable"] is False
    prefix = "tool 'refund' was denied by the workflow's permission rules"
    assert rejection["message"].startswith(prefix)
    assert rule_deny["message"].startswith(prefix)
    assert "rejected by bob: not today" in rejection["message"]
    assert state.error["causeCode"] == by_rule.error["causeCode"] == "permission_denied"


def test_a_rules_deadline_applies_its_default(fleet_env: FleetEnv) -> None:
    from tests.approvals_fleet_app import allow_later, deny_later

    fleet_env.env["LITTLE_APP"] = APP
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=1)
    client = fleet_env.client()
    allowed = client.submit(allow_later, {})
    refused = client.submit(deny_later, {})
    world = fleet_env.world()
    for run_id, status, decision in ((allowed, "completed", "allow"), (refused, "failed", "deny")):
        state = client.wait(run_id, timeout=90)
        assert state.status == status, state.error
        events = world.list_events(run_id)
        (requested,) = _of(events, REQUESTED)
        (decided,) = _of(events, DECIDED)
        assert (decided.payload["decision"], decided.payload["via"]) == (decision, "timeout")
        # (the worker's clock sets the deadline, the world's the record: a few ms apart)
        assert abs(requested.payload["deadlineAt"] - _ms(requested.recorded_at) - 2000) < 1000
        assert _ms(decided.recorded_at) >= requested.payload["deadlineAt"]
        (gate,) = _of(events, "harness.permission.decided")
        assert gate.payload["reason"] == "timed_out"
        assert _of(events, STEP_SUSPENDED)  # it waited without a slot
    assert (
        "nobody decided its approval in time" in _failed_call(world.list_events(refused))["message"]
    )


def _ms(recorded_at: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(recorded_at.replace("Z", "+00:00")).timestamp() * 1000)
