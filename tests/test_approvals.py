"""Approvals in process: an ``ask`` that no approver function answers waits for a person's
decision (little_dist.approvals), recorded in the run's log; approve runs the call, reject
fails it as a rule's deny does, a deadline applies the rule's default."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from little_dist.approvals import (
    ApprovalDecidedError,
    ApprovalNotFoundError,
    decide_approval,
    find_approval,
    list_approvals,
    run_id_of,
)
from little_dist.event_types import typed
from little_dist.permissions import tool_permissions
from little_dist.testing import ScriptedModel
from little_dist.world.in_process import MemoryWorld
from tests.harness_helpers import RUN, of_type
from tests.test_permissions import decisions, run_refund_then_lookup


def _decide_when_asked(world: MemoryWorld, *, allow: bool, reason: str | None = None) -> Any:
    """A person in another thread: waits for the pending request, then decides it."""
    done: dict[str, Any] = {}

    def person() -> None:
        for _ in range(500):
            pending = list_approvals(world)
            if pending:
                done["listed"] = pending
                done["decided"] = decide_approval(
                    world, pending[0].approval_id, allow=allow, by="ada", via="api", reason=reason
                )
                return
            time.sleep(0.01)

    thread = threading.Thread(target=person)
    thread.start()
    return thread, done


def test_an_approved_call_runs_and_the_decision_is_in_the_log(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    thread, done = _decide_when_asked(world, allow=True, reason="small amount")
    permissions = tool_permissions([{"tool": "refund", "action": "ask"}], "t")
    calls, world, _ = _run(scripted_model, permissions, world)
    thread.join(5)
    assert [name for name, _ in calls.seen] == ["refund", "lookup"]
    (listed,) = done["listed"]
    assert listed.tool_name == "refund" and listed.args == {"amount": 5} and listed.pending
    assert run_id_of(listed.approval_id) == RUN
    events = world.list_events(RUN)
    (requested,) = of_type(events, "little.approval.requested")
    (decided,) = of_type(events, "little.approval.decided")
    assert decided.payload == {
        "approvalId": listed.approval_id,
        "stepPath": "triage",
        "decision": "allow",
        "decidedBy": "ada",
        "via": "api",
        "reason": "small amount",
    }
    assert requested.payload["rule"] == {"tool": "refund", "action": "ask"}
    first = decisions(world)[0]
    assert (first["decision"], first["reason"], first["approvalId"]) == (
        "allow",
        "approved",
        listed.approval_id,
    )
    typed(of_type(events, "harness.permission.decided")[0])
    after = find_approval(world, listed.approval_id)
    assert after.decided_by == "ada" and after.decided_at == decided.recorded_at
    assert list_approvals(world) == []  # nothing pending any more


def test_a_rejected_call_fails_as_a_rule_deny_does(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    thread, _ = _decide_when_asked(world, allow=False, reason="too risky")
    permissions = tool_permissions([{"tool": "refund", "action": "ask"}], "t")
    calls, world, _ = _run(scripted_model, permissions, world)
    thread.join(5)
    assert calls.seen == [("lookup", {"account_id": "A1"})]  # refund never ran
    (failed,) = of_type(world.list_events(RUN), "harness.tool_call.failed")
    error = failed.payload["error"]
    assert (error["name"], error["causeCode"], error["retriable"]) == (
        "ToolPermissionDeniedError",
        "permission_denied",
        False,
    )
    assert "denied by the workflow's permission rules" in error["message"]
    assert "rejected by ada: too risky" in error["message"]
    seen = json.loads(scripted_model.calls[1].tool_results[0]["content"])
    assert seen["error"] == error["message"]
    assert decisions(world)[0]["reason"] == "rejected"


def test_a_deadline_with_allow_runs_the_call(scripted_model: ScriptedModel) -> None:
    permissions = tool_permissions(
        [{"tool": "refund", "action": "ask", "timeout": "200ms", "onTimeout": "allow"}], "t"
    )
    calls, world, _ = _run(scripted_model, permissions, MemoryWorld())
    assert [name for name, _ in calls.seen] == ["refund", "lookup"]
    (decided,) = of_type(world.list_events(RUN), "little.approval.decided")
    assert (decided.payload["decision"], decided.payload["via"]) == ("allow", "timeout")
    (requested,) = of_type(world.list_events(RUN), "little.approval.requested")
    assert requested.payload["onTimeout"] == "allow"
    assert requested.payload["rule"]["timeout"] == 200
    assert decisions(world)[0]["reason"] == "timed_out"


def test_a_decision_is_taken_once_and_bad_ids_are_not_found(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    thread, done = _decide_when_asked(world, allow=True)
    _run(scripted_model, tool_permissions([{"tool": "refund", "action": "ask"}], "t"), world)
    thread.join(5)
    approval_id = done["decided"].approval_id
    with pytest.raises(ApprovalDecidedError, match="already approved by ada"):
        decide_approval(world, approval_id, allow=False, by="bob", via="api")
    for bad in ("apr_nothex.run_x", "nonsense", approval_id.replace(RUN, "run_other")):
        with pytest.raises(ApprovalNotFoundError, match="approval not found"):
            find_approval(world, bad)
    other = approval_id[:4] + "0" * 16 + approval_id[20:]
    with pytest.raises(ApprovalNotFoundError, match="asked for no such approval"):
        decide_approval(world, other, allow=True, by="bob", via="api")


def _run(scripted_model: ScriptedModel, permissions: Any, world: MemoryWorld) -> Any:
    return run_refund_then_lookup(scripted_model, permissions, world)


def test_in_process_without_an_approver_a_run_waits_for_little_approvals(tmp_path: Any) -> None:
    # run_workflow with no on_ask on a LocalWorld: the step's thread waits; `little approvals`
    # in another process lists the request and approves it, and the run completes.
    from little_dist import run_workflow
    from little_dist.world.local import LocalWorld
    from tests import zygote
    from tests.approvals_fleet_app import ask
    from tests.fleet_processes import ROOT

    data = tmp_path / "world"
    world = LocalWorld(data)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(r=run_workflow(ask, {}, world=world)))
    thread.start()

    def little(*args: str) -> Any:
        return zygote.run(["approvals", *args, "--data-dir", str(data)], cwd=ROOT, timeout=60)

    try:
        deadline = time.monotonic() + 60
        while not list_approvals(world):
            assert time.monotonic() < deadline, "the run never asked"
            time.sleep(0.05)
        listed = little("list", "--json")
        assert listed.returncode == 0, listed.stderr
        (shown,) = json.loads(listed.stdout)
        assert (shown["toolName"], shown["status"]) == ("refund", "pending")
        approved = little("approve", shown["approvalId"], "--reason", "ok", "--json")
        assert approved.returncode == 0, approved.stderr
        assert json.loads(approved.stdout)["status"] == "approved"
        thread.join(60)
        assert result["r"].status == "completed"
        assert result["r"].output == {"refunded": 42, "account": "acme-42"}
        missing = little("reject", "apr_0000000000000000.run_nobody")
        assert missing.returncode == 1 and "no run run_nobody" in missing.stderr
        assert "Traceback" not in missing.stderr
        usage = little("approve")
        assert usage.returncode == 2 and "Traceback" not in usage.stderr
    finally:
        thread.join(1)
        if thread.is_alive():  # (the test failed: let the waiting run go)
            for approval in list_approvals(world):
                decide_approval(world, approval.approval_id, allow=False, by="t", via="api")
            thread.join(30)


def test_the_fold_resumes_a_step_suspended_for_a_person_once_decided() -> None:
    # Pure core: little.approval.decided ends the wait as a child's end does, also when it
    # was recorded before the suspension was (a fast person).
    from little_dist.events import EventInput
    from little_dist.runtime.failures import step_suspended
    from tests.test_scheduling_sim import Sim, lwir_doc, tool

    def decided(approval_id: str) -> EventInput:
        return EventInput(
            type="little.approval.decided",
            payload={"approvalId": approval_id, "stepPath": "a", "decision": "allow"},
            occurrence_id=f"approval-decided:{approval_id}",
        )

    for early in (False, True):
        sim = Sim(lwir_doc([tool("a")]))
        (first,) = sim.decide().dispatch
        sim.start(first)
        approval = "apr_0123456789abcdef.run_sim"
        if early:
            sim.append([decided(approval)])
        sim.append([step_suspended("a", {"id": "a"}, 1, [approval])])
        if not early:
            assert sim.state.steps["a"].waiting_for == {approval}
            assert sim.decide().dispatch == ()
            sim.append([decided(approval)])
        assert sim.state.steps["a"].waiting_for == frozenset()
        (resume,) = sim.decide().dispatch
        assert (resume.step_path, resume.attempt) == ("a", 2)


def test_a_runs_deadlines_are_applied_once_due_and_forgotten_once_decided() -> None:
    from little_dist.approvals.deadlines import ApprovalDeadlines
    from little_dist.events import EventInput

    world = MemoryWorld()
    approval_id = "apr_0123456789abcdef." + RUN
    (requested,) = world.append_batch(
        RUN,
        [
            EventInput(
                type="little.approval.requested",
                payload={
                    "approvalId": approval_id,
                    "stepPath": "pay",
                    "toolName": "refund",
                    "deadlineAt": 5_000,
                    "onTimeout": "allow",
                },
                occurrence_id=f"approval:{approval_id}",
            )
        ],
    )
    deadlines = ApprovalDeadlines(RUN)
    deadlines.note(requested, requested.payload)
    assert deadlines and not deadlines.apply(world, 4_999)
    assert of_type(world.list_events(RUN), "little.approval.decided") == []
    assert deadlines.apply(world, 5_000)
    (decided,) = of_type(world.list_events(RUN), "little.approval.decided")
    assert (decided.payload["decision"], decided.payload["decidedBy"]) == ("allow", "deadline")
    deadlines.note(decided, decided.payload)
    assert not deadlines and not deadlines.apply(world, 9_999)
    assert find_approval(world, approval_id).via == "timeout"
