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
