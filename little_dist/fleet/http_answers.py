"""What :class:`~little_dist.fleet.http_client.HttpClient` makes of ``little serve``'s
answers: its problems (RFC 9457) as the errors the Redis ``Client`` raises, its SSE text as
events, its status JSON as a :class:`~little_dist.fleet.run_status.RunStatusView`.

::

    404 on a run                 RunNotFoundError (a NotFoundError)
    400, 413, 422                InvalidInputError (409 code run_mismatch: RunMismatchError)
    409                          ApiConflictError (a ConflictError, not retryable)
    401, 403                     ApiAccessError (the server's word: which scope is missing)
    429                          ApiRateLimitedError (retryable; ``retry_after`` seconds)
    503, unreachable             StorageUnavailableError (retryable)
    other                        ApiError
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from little_dist.approvals.store import ApprovalDecidedError
from little_dist.errors import (
    ConflictError,
    InvalidInputError,
    LittleError,
    NotFoundError,
    StorageUnavailableError,
)
from little_dist.fleet.run_status import RunStatusView
from little_dist.local_runner import RunMismatchError
from little_dist.report.failure import RunFailure
from little_dist.world.base import RunNotFoundError

__all__ = [
    "ApiAccessError",
    "ApiConflictError",
    "ApiError",
    "ApiRateLimitedError",
    "NotOverHttpError",
    "SseMessage",
    "error_of",
    "sse_messages",
    "status_view",
]


class ApiError(LittleError):
    """``little serve`` refused a request (``status``; ``problem``: its problem body)."""

    def __init__(self, message: str, *, status: int, problem: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.problem = dict(problem)


class ApiAccessError(ApiError):
    """401 (no token, or one the server does not know) or 403 (the token lacks the scope,
    or may not submit that workflow): the server's detail says which."""


class ApiRateLimitedError(ApiError):
    """429: the token's rate is used up; ``retry_after``: the seconds the server said."""

    retryable = True

    def __init__(
        self, message: str, *, status: int, problem: Mapping[str, Any], retry_after: int | None
    ) -> None:
        super().__init__(message, status=status, problem=problem)
        self.retry_after = retry_after


class ApiConflictError(ConflictError):
    """409: the ``Idempotency-Key`` was used with another body (or another conflict the
    server names in ``problem['code']``). Trying the same again does not help."""

    retryable = False

    def __init__(self, message: str, *, problem: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.status = 409
        self.problem = dict(problem)


class NotOverHttpError(LittleError):
    """What a client of the HTTP API cannot do (it reaches no Redis, S3 or broker)."""


def error_of(
    status: int,
    problem: Mapping[str, Any],
    *,
    what: str,
    run_id: str | None = None,
    retry_after: str | None = None,
) -> LittleError:
    """The error for a refused request (``what``: ``'GET /v1/runs/run_x'``)."""
    detail = str(problem.get("detail") or problem.get("title") or "no detail")
    message = f"{what}: {status} {detail}"
    code = problem.get("code")
    if status == 404 and run_id is not None:
        return RunNotFoundError(run_id)
    if status == 404:
        return NotFoundError(message)
    if status == 409 and code == "run_mismatch":
        return RunMismatchError(detail)
    if status == 409 and code == "approval_decided":
        return ApprovalDecidedError(detail)
    if status == 409:
        return ApiConflictError(message, problem=problem)
    if status in (400, 413, 422):
        errors = problem.get("errors") or []
        where = "; ".join(_where(error) for error in errors if isinstance(error, Mapping))
        return InvalidInputError(f"{message} ({where})" if where else message)
    if status in (401, 403):
        return ApiAccessError(message, status=status, problem=problem)
    if status == 429:
        seconds = int(retry_after) if retry_after and retry_after.isdigit() else None
        return ApiRateLimitedError(
            f"{message} (Retry-After: {retry_after or 'not given'})",
            status=status,
            problem=problem,
            retry_after=seconds,
        )
    if status == 503:
        return StorageUnavailableError(message)
    return ApiError(message, status=status, problem=problem)


def _where(error: Mapping[str, Any]) -> str:
    for key in ("pointer", "header", "path", "query"):
        if error.get(key) is not None:
            return f"{key} {error[key] or '/'}: {error.get('detail', '')}"
    return str(error.get("detail", ""))


@dataclass(frozen=True)
class SseMessage:
    id: int | None
    event: str
    data: str


def sse_messages(lines: Iterable[str]) -> Iterator[SseMessage | None]:
    """The messages of an SSE stream's lines; ``None`` for a comment (a keep-alive)."""
    fields: dict[str, list[str]] = {}
    for line in lines:
        if line == "":
            if "data" in fields:
                ident = "".join(fields.get("id", []))
                yield SseMessage(
                    int(ident) if ident.isdigit() else None,
                    "".join(fields.get("event", ["message"])),
                    "\n".join(fields["data"]),
                )
            fields = {}
        elif line.startswith(":"):
            yield None
        else:
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))


def status_view(data: Mapping[str, Any]) -> RunStatusView:
    """``GET /v1/runs/{id}``'s JSON (``RunStatusView.to_json``) back as the view."""
    failure = data.get("failure")
    deadline = data.get("deadline") or {}
    budget = data.get("budget") or {}
    return RunStatusView(
        run_id=str(data["runId"]),
        status=str(data["status"]),
        workflow_version_id=data.get("workflowVersionId"),
        event_count=int(data.get("eventCount", 0)),
        started_at=data.get("startedAt"),
        finished_at=data.get("finishedAt"),
        steps=dict(data.get("steps") or {}),
        output=data.get("output"),
        has_output="output" in data,
        error=data.get("error"),
        cost_usd=data.get("costUsd"),
        cancel_requested=bool(data.get("cancelRequested")),
        planning=bool(data.get("planning")),
        failure=None
        if not isinstance(failure, Mapping)
        else RunFailure(
            failure.get("causeCode"), str(failure.get("message", "")), failure.get("stepPath")
        ),
        late_calls=int(data.get("lateCalls", 0)),
        deadline=deadline.get("at"),
        deadline_cause=deadline.get("causeCode"),
        budget_usd=budget.get("budgetUsd"),
        spent_usd=float(budget.get("spentUsd", 0.0)),
        reserved_usd=float(budget.get("reservedUsd", 0.0)),
        sub_runs_usd=float(budget.get("subRunsUsd", 0.0)),
        waiting=tuple(wait for wait in data.get("waiting") or () if isinstance(wait, Mapping)),
    )


def problem_of(text: str) -> dict[str, Any]:
    """A problem body, or one made of a body that is not one (a proxy's HTML page)."""
    try:
        body = json.loads(text)
    except ValueError:
        return {"detail": text[:300] or "no body"}
    return body if isinstance(body, dict) else {"detail": text[:300]}
