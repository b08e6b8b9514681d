"""What a run waits for a person for: :func:`waiting_for_approval`, shown by ``little
status`` (and ``GET /v1/runs/{id}``'s ``waiting``), ``little report`` (``--json``'s
``waiting``, ``--html``'s note) and the viewer.

A run whose step is suspended on an ``ask`` rule looks "running" with nothing moving; these
say which call (step, tool, arguments), since when, until when (the rule's deadline and
what then applies) and how to answer it: the CLI commands and the HTTP route.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from little_dist.approvals import approvals_of
from little_dist.events import RUN_END_EVENT_TYPES
from little_dist.run_limits import iso_ms

__all__ = ["waiting_for_approval", "waiting_line"]


def waiting_for_approval(run_id: str, events: Iterable[Any]) -> list[dict[str, Any]]:
    """The pending approvals of run ``run_id`` its ``events`` record, oldest first, as JSON
    (none once the run has ended: its waiting step ended with it)."""
    listed = list(events)
    if any(getattr(event, "type", None) in RUN_END_EVENT_TYPES for event in listed):
        return []
    waiting = []
    for approval in approvals_of(run_id, listed):
        if not approval.pending:
            continue
        ident = approval.approval_id
        waiting.append(
            {
                "approvalId": ident,
                "stepPath": approval.step_path,
                "toolName": approval.tool_name,
                "args": approval.args,
                "rule": dict(approval.rule) if approval.rule is not None else None,
                "since": approval.requested_at,
                "deadline": None if approval.deadline_at is None else iso_ms(approval.deadline_at),
                "onTimeout": approval.on_timeout if approval.deadline_at is not None else None,
                "answer": {
                    "approve": f"little approvals approve {ident} --reason '...'",
                    "reject": f"little approvals reject {ident} --reason '...'",
                    "http": f"POST /v1/approvals/{ident}",
                },
            }
        )
    return waiting


def waiting_line(wait: Mapping[str, Any]) -> str:
    """One pending approval in a line: which call, since when, until when."""
    until = (
        f", deadline {wait['deadline']} (then {wait['onTimeout']})"
        if wait.get("deadline")
        else ", no deadline"
    )
    return f"step {wait['stepPath']} calls {wait['toolName']}: waiting since {wait['since']}{until}"
