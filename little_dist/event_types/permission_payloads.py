"""Payload of ``harness.permission.decided``: one tool call's permission decision (see
:mod:`little_dist.permissions`). Upstream's ``permission.ts`` records none; the shape keeps
upstream's vocabulary (``tool``, ``action``, the rule as upstream writes it)."""

from __future__ import annotations

from typing import Any, Literal

from little_dist.event_types.base import NonEmptyStr, NonNegativeInt, Payload, PositiveInt

__all__ = ["HarnessPermissionDecidedPayload"]


class HarnessPermissionDecidedPayload(Payload):
    """``action``: what the ruleset said; ``decision``: what happened to the call;
    ``reason``: ``rule``, ``approved``, ``rejected``, ``timed_out``, ``no_approver``,
    ``approver_failed`` or ``no_rule``; ``rule``: the rule that settled it (``{tool, action,
    args?, timeout?, onTimeout?}``); ``approvalId``: the person's decision it applies
    (:mod:`little_dist.approvals`)."""

    call_id: NonEmptyStr
    tool_name: NonEmptyStr
    caller: Literal["model", "code"]
    action: Literal["allow", "deny", "ask"]
    decision: Literal["allow", "deny"]
    reason: NonEmptyStr
    rule: dict[str, Any] | None = None
    args_hash: NonEmptyStr | None = None
    turn: PositiveInt | None = None
    call_index: NonNegativeInt | None = None
    step_path: NonEmptyStr | None = None
    attempt: PositiveInt | None = None
    approval_id: NonEmptyStr | None = None
