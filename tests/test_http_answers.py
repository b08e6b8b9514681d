"""What the HTTP client makes of ``little serve``'s answers, without a server: problems as
the fleet client's errors, SSE text as messages, status JSON back as the view."""

from __future__ import annotations

import pytest

from little_dist.errors import (
    ConflictError,
    InvalidInputError,
    LittleError,
    NotFoundError,
    StorageUnavailableError,
)
from little_dist.fleet.http_answers import (
    ApiAccessError,
    ApiConflictError,
    ApiError,
    ApiRateLimitedError,
    SseMessage,
    error_of,
    problem_of,
    sse_messages,
    status_view,
)
from little_dist.fleet.run_status import RunStatusView
from little_dist.local_runner import RunMismatchError
from little_dist.report.failure import RunFailure
from little_dist.world.base import RunNotFoundError


@pytest.mark.parametrize(
    ("status", "problem", "run_id", "kind"),
    [
        (404, {"detail": "Run not found: run_a"}, "run_a", RunNotFoundError),
        (404, {"detail": "no such page"}, None, NotFoundError),
        (400, {"detail": "bad"}, None, InvalidInputError),
        (413, {"detail": "too big"}, None, InvalidInputError),
        (422, {"detail": "invalid"}, None, InvalidInputError),
        (409, {"detail": "another input", "code": "run_mismatch"}, "run_a", RunMismatchError),
        (409, {"detail": "key reused", "code": "idempotency_conflict"}, None, ApiConflictError),
        (401, {"detail": "a bearer token is required"}, None, ApiAccessError),
        (403, {"detail": "the token lacks the scope 'runs:cancel'"}, None, ApiAccessError),
        (503, {"detail": "Redis is unreachable"}, None, StorageUnavailableError),
        (500, {"detail": "the server failed"}, None, ApiError),
    ],
)
def test_each_refusal_is_the_error_the_fleet_client_raises(
    status: int, problem: dict[str, str], run_id: str | None, kind: type[LittleError]
) -> None:
    error = error_of(status, problem, what="GET /v1/x", run_id=run_id)
    assert type(error) is kind
    if kind not in (RunNotFoundError, RunMismatchError):
        assert str(error).startswith(f"GET /v1/x: {status} {problem['detail']}")


def test_a_conflict_is_not_retryable_and_a_rate_limit_says_when_to_retry() -> None:
    conflict = error_of(409, {"detail": "x"}, what="POST /v1/runs")
    assert isinstance(conflict, ConflictError) and not conflict.retryable
    limited = error_of(429, {"detail": "used up"}, what="POST /v1/runs", retry_after="17")
    assert isinstance(limited, ApiRateLimitedError) and limited.retryable
    assert limited.retry_after == 17 and "Retry-After: 17" in str(limited)


def test_an_invalid_request_names_where() -> None:
    problem = {
        "detail": "the request is invalid",
        "errors": [
            {"pointer": "/budgetUsd", "detail": "Input should be greater than 0"},
            {"header": "idempotency-key", "detail": "too long"},
        ],
    }
    error = error_of(422, problem, what="POST /v1/runs")
    assert "pointer /budgetUsd: Input should be greater than 0" in str(error)
    assert "header idempotency-key: too long" in str(error)


def test_a_body_that_is_not_a_problem_becomes_its_detail() -> None:
    assert problem_of("<html>Bad Gateway</html>") == {"detail": "<html>Bad Gateway</html>"}
    assert problem_of("") == {"detail": "no body"}
    assert problem_of('{"detail": "x", "code": "run_ended"}')["code"] == "run_ended"


def test_sse_text_is_read_as_messages_and_keep_alives() -> None:
    lines = [
        ": keep-alive",
        "",
        "id: 7",
        "event: StepCompleted",
        'data: {"a":',
        "data: 1}",
        "",
        "data: no id",
        "",
    ]
    assert list(sse_messages(lines)) == [
        None,
        SseMessage(7, "StepCompleted", '{"a":\n1}'),
        SseMessage(None, "message", "no id"),
    ]


def test_a_status_reads_back_as_the_view_it_was_printed_from() -> None:
    view = RunStatusView(
        run_id="run_a",
        status="failed",
        workflow_version_id="wfv_1",
        event_count=9,
        started_at="2026-12-05T00:00:00.000Z",
        finished_at="2026-12-05T00:00:01.000Z",
        steps={"s0": "completed", "s1": "failed"},
        error={"name": "Error", "message": "kaput", "causeCode": "tool_error"},
        cost_usd=0.25,
        cancel_requested=True,
        failure=RunFailure("tool_error", "kaput", "s1"),
        late_calls=2,
        deadline="2026-12-05T00:10:00.000Z",
        deadline_cause="deadline_exceeded",
        budget_usd=1.0,
        spent_usd=0.25,
        reserved_usd=0.5,
        sub_runs_usd=0.1,
    )
    assert status_view(view.to_json()) == view
    completed = RunStatusView(
        run_id="run_b",
        status="completed",
        workflow_version_id=None,
        event_count=3,
        started_at=None,
        finished_at=None,
        output=None,
        has_output=True,
    )
    assert status_view(completed.to_json()) == completed
