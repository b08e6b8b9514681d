"""The HTTP API's request and response bodies (its OpenAPI document is built from these).

Field names are the engine's JSON names (``runId``, ``budgetUsd``); a body with a field not
listed here, or of the wrong type, is refused (strict: ``"1"`` is not a number).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from little_dist.ids import RUN_ID_PATTERN

__all__ = [
    "ApprovalInfo",
    "ApprovalList",
    "CancelAccepted",
    "CancelRun",
    "DecideApproval",
    "Health",
    "ProblemDetails",
    "ProblemError",
    "RunAccepted",
    "RunList",
    "RunListed",
    "RunStatus",
    "RunUrls",
    "SubmitRun",
    "WorkflowInfo",
    "Workflows",
]


class SubmitRun(BaseModel):
    """``POST /v1/runs``: which workflow (an id the served app defines), its input."""

    model_config = ConfigDict(extra="forbid", strict=True)

    workflow: str = Field(
        min_length=1, max_length=200, description="the id of a workflow the served app defines"
    )
    input: Any = Field(default=None, description="the run's input (JSON; default {})")
    runId: str | None = Field(
        default=None,
        description="the run id to use ('run_' + 1-80 of A-Z a-z 0-9 _ -); submitting again "
        "with the same id and input answers the same run",
        json_schema_extra={"pattern": RUN_ID_PATTERN.pattern},
    )
    budgetUsd: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="the run's dollar ceiling"
    )
    deadline: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="when the run must end at the latest: a duration from now ('10m', '1h') "
        "or an ISO 8601 time with its zone; past it the run fails with causeCode "
        "deadline_exceeded",
    )
    callbackUrl: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="an http(s) URL the fleet POSTs the run's end to when it ends (signed "
        "with HMAC-SHA256: webhook-id, webhook-timestamp, webhook-signature headers), "
        "retried with backoff; every attempt is recorded in the run's log",
    )


class CancelRun(BaseModel):
    """``POST /v1/runs/{id}/cancel``: why (recorded with the cancel request)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str | None = Field(default=None, max_length=1000)


class CancelAccepted(BaseModel):
    """``202``: the cancel is recorded; the run fails with causeCode ``cancelled`` (a step
    already running is left to finish, and what it commits after the end is refused)."""

    runId: str
    cancelRequested: bool


class WorkflowInfo(BaseModel):
    """A workflow ``POST /v1/runs`` accepts: its id, what it is for, its input schema."""

    id: str
    description: str
    inputSchema: Any = Field(description="the JSON Schema its input must match")
    outputSchema: Any
    planned: bool = Field(description="planned by the fleet's planner (no fixed plan)")


class Workflows(BaseModel):
    workflows: list[WorkflowInfo]


class RunListed(BaseModel):
    """A run in a listing, as ``little runs --json`` prints it."""

    runId: str
    workflow: str | None
    status: str = Field(description="running, completed, failed or cancelled")
    startedAt: str
    finishedAt: str | None
    durationMs: float | None
    costUsd: float | None


class RunList(BaseModel):
    runs: list[RunListed]
    nextCursor: str | None = Field(
        description="the cursor of the next page (null: this page is the last)"
    )


class RunUrls(BaseModel):
    self: str
    events: str


class RunAccepted(BaseModel):
    """``202``: the run is submitted (or was, under the same id or ``Idempotency-Key``)."""

    runId: str
    urls: RunUrls


class RunStatus(BaseModel):
    """A run at a glance, as ``little status --json`` prints it."""

    model_config = ConfigDict(extra="allow")

    runId: str
    status: str = Field(description="pending, running, completed or failed")
    workflowVersionId: str | None
    eventCount: int
    startedAt: str | None
    finishedAt: str | None
    steps: dict[str, str]
    costUsd: float | None
    cancelRequested: bool
    planning: bool
    output: Any = Field(default=None, description="the run's output, once it completed")
    error: Any = Field(default=None, description="the run's error, once it failed")
    failure: dict[str, Any] | None = Field(
        default=None, description="why it failed: causeCode, message, stepPath"
    )
    waiting: list[dict[str, Any]] | None = Field(
        default=None,
        description="the tool calls it waits for a person's decision on: approvalId, "
        "stepPath, toolName, args, rule, since, deadline, onTimeout, answer (the commands)",
    )


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)


class ProblemError(BaseModel):
    """Where one thing is wrong: ``pointer`` (a JSON pointer into the body) or the
    ``header``/``path``/``query`` parameter, and what (``detail``)."""

    model_config = ConfigDict(extra="allow")

    detail: str
    pointer: str | None = None
    header: str | None = None
    path: str | None = None
    query: str | None = None


class ProblemDetails(BaseModel):
    """An RFC 9457 problem (``application/problem+json``)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    code: str | None = Field(
        default=None,
        description="which refusal, for programs: run_mismatch (the run id was used with "
        "another input), idempotency_conflict, run_ended (the run has ended: it takes no "
        "cancel, and its id no submission with another budget or deadline)",
    )
    instance: str | None = None
    errors: list[ProblemError] | None = None


class DecideApproval(BaseModel):
    """``POST /v1/approvals/{id}``: a person's decision on a tool call an ``ask`` rule held."""

    model_config = ConfigDict(extra="forbid", strict=True)

    decision: Literal["approve", "reject"] = Field(
        description="approve: the call runs; reject: it fails as a rule's deny does"
    )
    reason: str | None = Field(
        default=None, min_length=1, max_length=2000, description="why (recorded in the log)"
    )
    by: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="who decided (recorded; default: the token's name)",
    )


class ApprovalInfo(BaseModel):
    """One approval: the held call, its rule and deadline, and the decision once made."""

    approvalId: str
    runId: str
    stepPath: str
    toolName: str
    args: Any = None
    rule: dict[str, Any] | None = None
    requestedAt: str
    deadlineAt: int | None = Field(
        default=None, description="Unix ms past which the rule's onTimeout applies"
    )
    onTimeout: Literal["deny", "allow"] | None = None
    status: Literal["pending", "approved", "rejected"]
    decidedBy: str | None = None
    reason: str | None = None
    via: str | None = Field(default=None, description="cli, http, api or timeout")
    decidedAt: str | None = None


class ApprovalList(BaseModel):
    """``GET /v1/approvals``: the pending approvals of runs still going, oldest first."""

    approvals: list[ApprovalInfo]
