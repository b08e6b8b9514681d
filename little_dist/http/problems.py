"""RFC 9457 problem details: every refusal of the HTTP API is ``application/problem+json``.

A problem names what went wrong (``title``, ``detail``) and where (``errors``: one entry per
bad field, with a JSON pointer into the body, or the header, path or query parameter that
was wrong). No handler lets a traceback out: an unexpected error is a 500 problem that says
only that, and the traceback goes to the server's log. An engine error's message is
redacted as the logs are (:mod:`little_dist.redaction`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from little_dist.errors import (
    ConflictError,
    InvalidInputError,
    LeaseLostError,
    LittleError,
    NotFoundError,
    RunEndedError,
    StorageUnavailableError,
)
from little_dist.limits import InputLimitError
from little_dist.local_runner import RunMismatchError
from little_dist.redaction import redact

__all__ = ["PROBLEM_JSON", "Problem", "install_problem_handlers", "problem_response"]

PROBLEM_JSON: Final = "application/problem+json"
_LOG = logging.getLogger("little_dist.http")
_UNPARSED: Final = "There was an error parsing the body"


class Problem(Exception):
    """A refusal to answer as a problem: ``status``, ``detail`` and where (``errors``)."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        errors: Sequence[Mapping[str, Any]] = (),
        headers: Mapping[str, str] | None = None,
        title: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = list(errors)
        self.headers = dict(headers or {})
        self.title = title
        self.code = code


def problem_response(
    request: Request,
    status: int,
    detail: str,
    *,
    errors: Sequence[Mapping[str, Any]] = (),
    headers: Mapping[str, str] | None = None,
    title: str | None = None,
    code: str | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
    }
    if code is not None:
        body["code"] = code
    if errors:
        body["errors"] = [dict(error) for error in errors]
    return JSONResponse(
        body, status_code=status, headers=dict(headers or {}), media_type=PROBLEM_JSON
    )


def _pointer(loc: Sequence[Any]) -> dict[str, Any]:
    """Where a validation error is: ``{"pointer": "/budgetUsd"}`` in the body, else the
    parameter (``{"header": "last-event-id"}``, ``{"path": "run_id"}``...)."""
    where, *rest = loc or ("body",)
    if where == "body":
        parts = [str(part).replace("~", "~0").replace("/", "~1") for part in rest]
        return {"pointer": "/" + "/".join(parts) if parts else ""}
    return {str(where): ".".join(str(part) for part in rest)}


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    found = []
    for error in exc.errors():
        loc = error.get("loc", ())
        message = str(error.get("msg", "invalid"))
        if error.get("type") == "json_invalid":
            # (its loc is the body and the character where the parse stopped)
            ctx = error.get("ctx") or {}
            where = f" at character {loc[1]}" if len(loc) > 1 else ""
            message = f"malformed JSON{where}: {ctx.get('error', message)}"
            loc = ("body",)
        entry = _pointer(loc)
        entry["detail"] = message
        found.append(entry)
    return found


def _status_of(exc: LittleError) -> int:
    if isinstance(exc, InputLimitError):
        return 413
    # A run id of a run that has ended, submitted again with what its log lacks (another
    # budget or deadline): its log takes no more events.
    if isinstance(exc, RunMismatchError | ConflictError | LeaseLostError):
        return 409
    if isinstance(exc, InvalidInputError):
        return 422
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, StorageUnavailableError):
        return 503
    return 500


def _allowed(request: Request) -> str:
    """The methods of every route on the request's path (Starlette's 405 names only the
    first route's, where a path has one route per method)."""
    path = request.url.path
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods and route.path_regex.match(path):
            methods.update(route.methods)
    methods.discard("HEAD")  # (Starlette's implied HEAD of a GET, not in the document)
    return ", ".join(sorted(methods))


def _code_of(exc: LittleError) -> str | None:
    if isinstance(exc, RunMismatchError):
        return "run_mismatch"
    if isinstance(exc, RunEndedError):
        return "run_ended"
    return None


def install_problem_handlers(app: FastAPI) -> None:
    """Every error of ``app`` answered as a problem."""

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> JSONResponse:
        return problem_response(
            request,
            exc.status,
            exc.detail,
            errors=exc.errors,
            headers=exc.headers,
            title=exc.title,
            code=exc.code,
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = _validation_errors(exc)
        malformed = any(e["detail"].startswith("malformed JSON") for e in errors)
        detail = "the request body is not JSON" if malformed else "the request is invalid"
        return problem_response(request, 400 if malformed else 422, detail, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 400 and detail == _UNPARSED:
            # FastAPI's word for a body json cannot read (nested deeper than it recurses)
            detail = "the request body cannot be parsed as JSON (nested too deeply?)"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = _allowed(request)
        return problem_response(request, exc.status_code, detail, headers=headers)

    @app.exception_handler(LittleError)
    async def _little(request: Request, exc: LittleError) -> JSONResponse:
        status = _status_of(exc)
        if status == 500:
            _LOG.error("request %s failed", request.url.path, exc_info=exc)
        retry = {"Retry-After": "5"} if status == 503 else None
        code = _code_of(exc)
        return problem_response(request, status, redact(str(exc)), headers=retry, code=code)

    @app.exception_handler(RedisConnectionError)
    @app.exception_handler(RedisTimeoutError)
    async def _redis(request: Request, exc: Exception) -> JSONResponse:
        # The tokens and idempotency keys are read straight from Redis (the world's own
        # calls say StorageUnavailableError, handled above).
        detail = f"the fleet's Redis is unreachable: {type(exc).__name__}"
        return problem_response(request, 503, detail, headers={"Retry-After": "5"})

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        _LOG.error("request %s failed", request.url.path, exc_info=exc)
        return problem_response(request, 500, "the server failed to answer; see its log")
