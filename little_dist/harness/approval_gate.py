"""A tool call an ``ask`` rule holds and no approver function answers: ask a person.

The harness side of :mod:`little_dist.approvals` (read it for the whole story). Called by
the permission gate of :func:`~little_dist.harness.tool_calls.run_tool_call` when the
ruleset says ``ask`` and ``on_ask`` is not set. It returns the person's decision as a
:class:`~little_dist.permissions.PermissionDecision` once one is recorded (the memo of the
step's earlier attempts may hold it already); on a fleet worker (the attempt has a sub-run
host, so it can suspend) it raises :class:`~little_dist.harness.errors.SubRunPending` for
the approval id instead of waiting, and the attempt gives its slot back; in process the
calling thread waits, as an approver function would make it wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist import occurrences
from little_dist.approvals import approval_id_for, find_approval, wait_for_decision
from little_dist.event_types.engine import APPROVAL_REQUESTED
from little_dist.harness.errors import HarnessCancelled, SubRunPending
from little_dist.permissions import PermissionDecision, PermissionRule

if TYPE_CHECKING:
    from little_dist.harness.types import HarnessContext

__all__ = ["ask_a_person"]

_log = logging.getLogger("little.approvals")


def ask_a_person(
    ctx: HarnessContext, call_id: str, fields: Mapping[str, Any], rule: PermissionRule
) -> PermissionDecision:
    """The decision on the held call (see the module docstring); ``fields`` are the call's
    (``tool_name``, ``args``, ``args_hash``, ``turn``, ``call_index``, ``caller``)."""
    recorder = ctx.recorder
    tool_name = fields["tool_name"]
    approval_id = approval_id_for(
        ctx.run_id,
        recorder.step_path,
        fields["turn"],
        fields["call_index"],
        tool_name,
        fields["args_hash"],
    )
    decided = ctx.memo.approval_decision(approval_id)
    if decided is None:
        if not ctx.memo.approval_requested(approval_id):
            recorder.append(
                APPROVAL_REQUESTED,
                _request(ctx, approval_id, call_id, fields, rule),
                occurrences.approval_requested(approval_id),
                durable=True,
            )
        if ctx.sub_runs is not None:
            # On a fleet worker: the attempt suspends waiting for the decision.
            raise SubRunPending([approval_id])
        decided = _wait_here(ctx, approval_id, tool_name)
    return _decision(rule, approval_id, decided)


def _request(
    ctx: HarnessContext,
    approval_id: str,
    call_id: str,
    fields: Mapping[str, Any],
    rule: PermissionRule,
) -> dict[str, Any]:
    recorder = ctx.recorder
    payload: dict[str, Any] = {
        "approvalId": approval_id,
        "stepPath": recorder.step_path,
        "attempt": recorder.attempt,
        "callId": call_id,
        "toolName": fields["tool_name"],
        "caller": fields["caller"],
        "callIndex": fields["call_index"],
        "argsHash": fields["args_hash"],
        "args": fields["args"],
        "rule": rule.to_json(),
    }
    if fields["caller"] == "model":
        payload["turn"] = fields["turn"]
    if rule.timeout_ms is not None:
        # The clock is read once, by the attempt that asks first: a retry keeps this one.
        payload["deadlineAt"] = int(time.time() * 1000) + rule.timeout_ms
        payload["onTimeout"] = rule.on_timeout
    return payload


def _wait_here(ctx: HarnessContext, approval_id: str, tool_name: str) -> dict[str, Any]:
    # Whoever runs this (`little run`) learns what it waits for and how to answer.
    _log.warning(
        "tool %r of step %s waits for a person: little approvals approve|reject %s",
        tool_name,
        ctx.recorder.step_path,
        approval_id,
    )
    world = ctx.recorder.world
    approval = wait_for_decision(world, find_approval(world, approval_id), cancelled=ctx.cancelled)
    if approval is None:
        raise HarnessCancelled(
            f"step {ctx.recorder.step_path} was cancelled while tool {tool_name!r} waited for "
            f"approval {approval_id}"
        )
    return {
        "decision": approval.decision,
        "decidedBy": approval.decided_by,
        "reason": approval.reason,
        "via": approval.via,
    }


def _decision(
    rule: PermissionRule, approval_id: str, decided: Mapping[str, Any]
) -> PermissionDecision:
    allowed = decided.get("decision") == "allow"
    by, why = decided.get("decidedBy"), decided.get("reason")
    if decided.get("via") == "timeout":
        reason = "timed_out"
    else:
        reason = "approved" if allowed else "rejected"
    return PermissionDecision(
        "ask",
        "allow" if allowed else "deny",
        reason,  # type: ignore[arg-type]
        rule,
        approval_id=approval_id,
        decided_by=by if isinstance(by, str) else None,
        why=why if isinstance(why, str) else None,
    )
