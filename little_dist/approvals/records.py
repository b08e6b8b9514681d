"""What a run's log says of its approvals: ids, the two events' payloads, and the fold of
them into :class:`Approval` records. Pure: no IO, no clock (times come in as arguments).

An approval id names the call and the run it waits in: ``apr_<16 hex>.<run id>``. The hex
is a digest of the call's memo key (run, step path, model turn, call index, tool name,
arguments digest), so every attempt of the step that makes the same call names the same approval (a
resumed attempt finds the decision; a retried one does not ask twice); the run id makes the
id enough to find the approval in any world without an index.

Payloads (engine events, camelCase as upstream's)::

    little.approval.requested  {approvalId, stepPath, attempt, callId, toolName, caller,
                                callIndex, turn?, argsHash, args, rule,
                                deadlineAt?, onTimeout?}          # deadlineAt: Unix ms
    little.approval.decided    {approvalId, stepPath, decision: "allow"|"deny",
                                decidedBy, via: "cli"|"http"|"api"|"timeout", reason?,
                                tokenId?}                         # tokenId: via http

When a decision was made is its event's ``recordedAt``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from little_dist import occurrences
from little_dist.canonical import sha256_digest
from little_dist.errors import NotFoundError
from little_dist.event_types.engine import APPROVAL_DECIDED, APPROVAL_REQUESTED
from little_dist.events import EventInput

__all__ = [
    "APPROVAL_EVENT_TYPES",
    "APPROVAL_ID_PATTERN",
    "MAX_REASON_CHARS",
    "Approval",
    "ApprovalNotFoundError",
    "Via",
    "approval_from_json",
    "approval_id_for",
    "approvals_of",
    "decision_event",
    "run_id_of",
    "timeout_decision",
]

APPROVAL_EVENT_TYPES: Final = frozenset({APPROVAL_REQUESTED, APPROVAL_DECIDED})
APPROVAL_ID_PATTERN: Final = re.compile(r"apr_([0-9a-f]{16})\.(run_[A-Za-z0-9_-]{1,80})")
#: The longest ``reason`` (and ``decidedBy``) recorded, in characters.
MAX_REASON_CHARS: Final = 2000

Via = Literal["cli", "http", "api", "timeout"]


class ApprovalNotFoundError(NotFoundError):
    """No approval with that id (a malformed id, an unknown run, a call that never asked)."""

    def __init__(self, approval_id: str, detail: str = "") -> None:
        shown = approval_id if len(approval_id) <= 120 else approval_id[:117] + "..."
        super().__init__(f"approval not found: {shown!r}" + (f" ({detail})" if detail else ""))
        self.approval_id = approval_id


def approval_id_for(
    run_id: str,
    step_path: str,
    turn: int | None,
    call_index: int,
    tool_name: str,
    args_hash: str,
) -> str:
    """The approval id of one tool call of run ``run_id``: the same in every attempt of the
    step that makes the same call (its memo key), another for any other call."""
    key = {
        "run": run_id,
        "step": step_path,
        "turn": turn,
        "callIndex": call_index,
        "tool": tool_name,
        "argsHash": args_hash,
    }
    digest = sha256_digest({"approvalOf": key}).removeprefix("sha256:")
    return f"apr_{digest[:16]}.{run_id}"


def run_id_of(approval_id: str) -> str:
    """The run an approval id names; :class:`ApprovalNotFoundError` for a malformed id."""
    if not isinstance(approval_id, str):
        raise ApprovalNotFoundError(repr(approval_id), "not a string")
    match = APPROVAL_ID_PATTERN.fullmatch(approval_id)
    if match is None:
        raise ApprovalNotFoundError(
            approval_id, "an approval id reads 'apr_' + 16 hex digits + '.' + the run id"
        )
    return match.group(2)


@dataclass(frozen=True)
class Approval:
    """One approval as the log tells it: the request, and the decision once recorded."""

    approval_id: str
    run_id: str
    step_path: str
    tool_name: str
    args: Any
    rule: Mapping[str, Any] | None
    requested_at: str
    attempt: int | None = None
    #: Unix ms past which ``on_timeout`` applies (``None``: it waits for a person).
    deadline_at: int | None = None
    on_timeout: Literal["deny", "allow"] = "deny"
    decision: Literal["allow", "deny"] | None = None
    decided_by: str | None = None
    reason: str | None = None
    via: str | None = None
    decided_at: str | None = None

    @property
    def pending(self) -> bool:
        return self.decision is None

    def due(self, now_ms: int) -> bool:
        """Pending past its deadline: its ``on_timeout`` is to be recorded."""
        return self.pending and self.deadline_at is not None and now_ms >= self.deadline_at

    def to_json(self) -> dict[str, Any]:
        """As ``little approvals list --json`` and ``GET /v1/approvals`` show it."""
        return {
            "approvalId": self.approval_id,
            "runId": self.run_id,
            "stepPath": self.step_path,
            "toolName": self.tool_name,
            "args": self.args,
            "rule": dict(self.rule) if self.rule is not None else None,
            "requestedAt": self.requested_at,
            "deadlineAt": self.deadline_at,
            "onTimeout": self.on_timeout if self.deadline_at is not None else None,
            "status": "pending" if self.decision is None else _STATUS[self.decision],
            "decidedBy": self.decided_by,
            "reason": self.reason,
            "via": self.via,
            "decidedAt": self.decided_at,
        }


_STATUS: Final = {"allow": "approved", "deny": "rejected"}


def _text(payload: Mapping[str, Any], name: str) -> str | None:
    value = payload.get(name)
    return value if isinstance(value, str) else None


def approvals_of(run_id: str, events: Iterable[Any]) -> list[Approval]:
    """The approvals of run ``run_id`` its ``events`` record, in request order (events or
    their envelopes with ``type``, ``payload``, ``recorded_at``; others are skipped)."""
    found: dict[str, Approval] = {}
    decided: dict[str, tuple[Mapping[str, Any], str]] = {}
    for event in events:
        kind = getattr(event, "type", None)
        if kind not in APPROVAL_EVENT_TYPES:
            continue
        payload = getattr(event, "payload", None)
        if not isinstance(payload, Mapping):
            continue
        approval_id = _text(payload, "approvalId")
        at = str(getattr(event, "recorded_at", ""))
        if approval_id is None:
            continue
        if kind == APPROVAL_DECIDED:
            decided.setdefault(approval_id, (payload, at))
        elif approval_id not in found:
            deadline = payload.get("deadlineAt")
            attempt = payload.get("attempt")
            found[approval_id] = Approval(
                approval_id=approval_id,
                run_id=run_id,
                step_path=_text(payload, "stepPath") or "",
                tool_name=_text(payload, "toolName") or "",
                args=payload.get("args"),
                rule=payload.get("rule") if isinstance(payload.get("rule"), Mapping) else None,
                requested_at=at,
                attempt=attempt if isinstance(attempt, int) else None,
                deadline_at=deadline if isinstance(deadline, int) else None,
                on_timeout="allow" if payload.get("onTimeout") == "allow" else "deny",
            )
    result = []
    for approval_id, approval in found.items():
        if approval_id in decided:
            payload, at = decided[approval_id]
            approval = _decided(approval, payload, at)
        result.append(approval)
    return result


def _decided(approval: Approval, payload: Mapping[str, Any], at: str) -> Approval:
    return replace(
        approval,
        decision="allow" if payload.get("decision") == "allow" else "deny",
        decided_by=_text(payload, "decidedBy"),
        reason=_text(payload, "reason"),
        via=_text(payload, "via"),
        decided_at=at,
    )


def decision_event(
    approval: Approval,
    *,
    allow: bool,
    by: str,
    via: Via,
    reason: str | None = None,
    token_id: str | None = None,
) -> EventInput:
    """The ``little.approval.decided`` of ``approval`` (first one recorded stands);
    ``token_id``: the HTTP API token it came with."""
    payload: dict[str, Any] = {
        "approvalId": approval.approval_id,
        "stepPath": approval.step_path,
        "decision": "allow" if allow else "deny",
        "decidedBy": by[:MAX_REASON_CHARS],
        "via": via,
    }
    if reason:
        payload["reason"] = reason[:MAX_REASON_CHARS]
    if token_id:
        payload["tokenId"] = token_id
    return EventInput(
        type=APPROVAL_DECIDED,
        occurrence_id=occurrences.approval_decided(approval.approval_id),
        payload=payload,
    )


def timeout_decision(approval: Approval) -> EventInput:
    """The decision a passed deadline records: the rule's ``onTimeout``."""
    assert approval.deadline_at is not None
    return decision_event(
        approval,
        allow=approval.on_timeout == "allow",
        by="deadline",
        via="timeout",
        reason=f"nobody decided before its deadline; the rule's onTimeout is {approval.on_timeout}",
    )


def approval_from_json(data: Mapping[str, Any]) -> Approval:
    """An :class:`Approval` from :meth:`Approval.to_json`'s shape (``GET /v1/approvals``'s
    items), for a client of the HTTP API."""
    status = data.get("status")
    decision: Literal["allow", "deny"] | None = (
        "allow" if status == "approved" else "deny" if status == "rejected" else None
    )
    deadline, rule = data.get("deadlineAt"), data.get("rule")
    return Approval(
        approval_id=str(data["approvalId"]),
        run_id=str(data["runId"]),
        step_path=str(data.get("stepPath") or ""),
        tool_name=str(data.get("toolName") or ""),
        args=data.get("args"),
        rule=dict(rule) if isinstance(rule, Mapping) else None,
        requested_at=str(data.get("requestedAt") or ""),
        deadline_at=deadline if isinstance(deadline, int) else None,
        on_timeout="allow" if data.get("onTimeout") == "allow" else "deny",
        decision=decision,
        decided_by=_text(data, "decidedBy"),
        reason=_text(data, "reason"),
        via=_text(data, "via"),
        decided_at=_text(data, "decidedAt"),
    )
