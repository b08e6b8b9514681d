"""The HTTP API's routes: ``make_app(fleet)`` (see :mod:`little_dist.http`).

``/v1`` routes need a bearer token with their scope (:mod:`.auth`); ``/healthz``,
``/readyz`` and ``/metrics`` (:mod:`.metrics`) need none. The live run viewer's pages are
under ``/ui`` (:mod:`.viewer`). Submission and status are the client's (``Client.submit``,
``Client.status``, as ``little submit``/``little status``); events are the world's log.
Every refusal is a problem (:mod:`.problems`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Final

from anyio import to_thread
from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse

from little_dist import __version__
from little_dist.authoring import WorkflowDefinition
from little_dist.errors import InvalidInputError, LittleError
from little_dist.fleet.callback_urls import check_callback_url
from little_dist.fleet.run_listing import list_runs
from little_dist.http.approval_routes import add_approval_routes
from little_dist.http.auth import require
from little_dist.http.body_limit import BodyLimit
from little_dist.http.cursors import MAX_PAGE, PAGE, RunStatusWord, decode_cursor, encode_cursor
from little_dist.http.event_stream import Watchers, ndjson_events, sse_events
from little_dist.http.fleet_access import FleetAccess
from little_dist.http.health import check_redis, check_s3
from little_dist.http.idempotency import MAX_KEY_LENGTH, body_hash
from little_dist.http.metrics import ApiMetrics, RequestMetrics
from little_dist.http.models import (
    CancelAccepted,
    CancelRun,
    Health,
    ProblemDetails,
    RunAccepted,
    RunList,
    RunStatus,
    SubmitRun,
    WorkflowInfo,
    Workflows,
)
from little_dist.http.problems import PROBLEM_JSON, Problem, install_problem_handlers
from little_dist.http.run_access import check_run_visible, run_visible
from little_dist.http.schedule_routes import add_schedule_routes
from little_dist.http.tokens import TokenRecord
from little_dist.http.viewer.routes import install_viewer
from little_dist.ids import RUN_ID_PATTERN, InvalidIdError, validate_run_id
from little_dist.limits import InputLimits
from little_dist.local_runner import new_run_id

__all__ = ["make_app"]

_PROBLEM: Final = {"model": ProblemDetails, "content": {PROBLEM_JSON: {}}}


def _callback_url(url: str) -> None:
    """A callback URL the fleet will not POST to is a 422 naming ``/callbackUrl``."""
    try:
        check_callback_url(url, "callbackUrl")
    except InvalidInputError as exc:
        detail = str(exc)
        raise Problem(422, detail, errors=[{"pointer": "/callbackUrl", "detail": detail}]) from exc


def _problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {**_PROBLEM, "description": _WHY[code]} for code in codes}


_WHY: Final = {
    400: "malformed request (not JSON, a bad run id or Last-Event-ID)",
    401: "no bearer token, or one that is not valid",
    403: "the token lacks the route's scope (or may not submit that workflow)",
    404: "no such run (or approval, or schedule), or a run of a workflow the token is not "
    "restricted to",
    409: "the Idempotency-Key was used with another body, the run id with another input, "
    "the run to cancel has ended, or the approval was decided already",
    413: "over one of the fleet's input limits (or the body over twice the input's)",
    422: "the body is invalid (a wrong type, an unknown workflow id, ...)",
    429: "the token's rate is used up (see Retry-After)",
    503: "the fleet's storage is unreachable",
}

# (The pattern is documented, not enforced by FastAPI: a run id that breaks it is a 400
# naming the rule, from validate_run_id, not a generic 422.)
RunId = Annotated[
    str,
    Path(
        description="the run id ('run_' + 1-80 of A-Z a-z 0-9 _ -)",
        json_schema_extra={"pattern": RUN_ID_PATTERN.pattern},
    ),
]


def body_limit(limits: InputLimits) -> int:
    """The largest request body read: twice the input limit (JSON's escapes and spacing
    make a body longer than the input's canonical JSON, which the limit counts) and room
    for the other fields."""
    return 2 * limits.max_input_bytes + 64 * 1024


def _run_id(run_id: str, *, where: dict[str, str]) -> str:
    try:
        return validate_run_id(run_id)
    except InvalidIdError as exc:
        raise Problem(400, str(exc), errors=[{**where, "detail": str(exc)}]) from None


def _by_id(workflow: WorkflowDefinition) -> str:
    return workflow.id


def _urls(run_id: str) -> dict[str, str]:
    return {"self": f"/v1/runs/{run_id}", "events": f"/v1/runs/{run_id}/events"}


def make_app(fleet: FleetAccess) -> FastAPI:
    """The API over ``fleet`` (closed when the app shuts down)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await fleet.aclose()
            await run_in_threadpool(fleet.close)

    app = FastAPI(
        title="little-dist",
        version=__version__,
        description="Submit runs to a little-dist fleet, read and watch them.",
        lifespan=lifespan,
    )
    app.state.fleet = fleet
    watchers = Watchers()
    metrics = ApiMetrics(lambda: watchers.open)
    app.state.metrics = metrics
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, limit=body_limit(fleet.settings.limits))
    app.add_middleware(RequestMetrics, metrics=metrics)
    install_viewer(app, fleet)

    @app.get("/metrics", include_in_schema=False)
    def metrics_route() -> Response:
        """Prometheus metrics of this process: requests by route and status, their
        latency, event streams open (:mod:`.metrics`); no token, as the probes."""
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    @app.get("/healthz", response_model=Health, tags=["health"])
    def healthz() -> Health:
        """The process is up (no storage is asked)."""
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        tags=["health"],
        responses={503: {"model": Health, "description": _WHY[503]}},
    )
    def readyz() -> Any:
        """Redis and S3 are reachable from this process."""
        checks = {"redis": check_redis(fleet.redis), "s3": check_s3(fleet.settings)}
        ok = all(value == "ok" for value in checks.values())
        health = Health(status="ok" if ok else "unavailable", checks=checks)
        return health if ok else JSONResponse(health.model_dump(), status_code=503)

    @app.get(
        "/v1/workflows",
        response_model=Workflows,
        tags=["workflows"],
        responses=_problems(401, 403, 429, 503),
    )
    def workflows(token: Annotated[TokenRecord, Depends(require("runs:read"))]) -> Workflows:
        """The workflows this server's app defines: what ``POST /v1/runs`` accepts by id."""
        del token
        registry = fleet.registry
        found = [] if registry is None else sorted(registry.workflows.values(), key=_by_id)
        return Workflows(
            workflows=[
                WorkflowInfo(
                    id=workflow.id,
                    description=workflow.description,
                    inputSchema=workflow.input_schema,
                    outputSchema=workflow.output_schema,
                    planned=workflow.plan is None,
                )
                for workflow in found
            ]
        )

    @app.post(
        "/v1/runs",
        status_code=202,
        response_model=RunAccepted,
        tags=["runs"],
        responses=_problems(400, 401, 403, 409, 413, 422, 429, 503),
    )
    def submit_run(
        body: SubmitRun,
        token: Annotated[TokenRecord, Depends(require("runs:submit"))],
        idempotency_key: Annotated[
            str | None,
            Header(
                min_length=1,
                max_length=MAX_KEY_LENGTH,
                description="the same key and body answer the same run",
            ),
        ] = None,
    ) -> JSONResponse:
        """Submit a run of a workflow the served app defines; 202 with its id and URLs."""
        if not token.may_submit(body.workflow):
            detail = (
                f"the token may not submit runs of {body.workflow!r} "
                f"(only of {', '.join(token.workflows)})"
            )
            raise Problem(403, detail, errors=[{"pointer": "/workflow", "detail": detail}])
        if fleet.registry is None or fleet.registry.get(body.workflow) is None:
            known = ", ".join(fleet.workflow_ids()[:20]) or "none"
            detail = f"unknown workflow {body.workflow!r} (this server's app defines: {known})"
            raise Problem(422, detail, errors=[{"pointer": "/workflow", "detail": detail}])
        if body.callbackUrl is not None:
            _callback_url(body.callbackUrl)
        run_id = _run_id(body.runId, where={"pointer": "/runId"}) if body.runId else new_run_id()
        claim = None
        if idempotency_key is not None:
            digest = body_hash(body.model_dump(exclude_none=True))
            claim = fleet.idempotency().claim(idempotency_key, digest, run_id)
            if claim.conflict:
                detail = "this Idempotency-Key was used with another body"
                raise Problem(
                    409,
                    detail,
                    errors=[{"header": "idempotency-key", "detail": detail}],
                    code="idempotency_conflict",
                )
            run_id = claim.run_id
        run_input = {} if body.input is None else body.input
        try:
            run_id = fleet.submit(
                body.workflow,
                run_input,
                run_id,
                body.budgetUsd,
                body.deadline,
                callback_url=body.callbackUrl,
            )
        except LittleError:
            if claim is not None and claim.fresh and idempotency_key is not None:
                fleet.idempotency().release(idempotency_key, run_id)
            raise
        accepted = RunAccepted.model_validate({"runId": run_id, "urls": _urls(run_id)})
        return JSONResponse(
            accepted.model_dump(), status_code=202, headers={"Location": f"/v1/runs/{run_id}"}
        )

    @app.get(
        "/v1/runs",
        response_model=RunList,
        tags=["runs"],
        responses=_problems(400, 401, 403, 422, 429, 503),
    )
    def list_runs_route(
        token: Annotated[TokenRecord, Depends(require("runs:read"))],
        status: Annotated[RunStatusWord | None, Query(description="only runs with it")] = None,
        workflow: Annotated[
            str | None,
            Query(max_length=200, description="only runs of workflows whose id matches (a glob)"),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="runs per page")] = PAGE,
        cursor: Annotated[
            str | None, Query(max_length=400, description="a page's nextCursor")
        ] = None,
    ) -> RunList:
        """The fleet's runs, newest first, as ``little runs --json``, a page at a time (a
        token restricted to workflows: runs of those only)."""
        client = fleet.client
        shown = list_runs(
            client.world,
            status=status,
            workflow=workflow,
            limit=limit,
            before=None if cursor is None else decode_cursor(cursor),
            pricing_fallback=client.pricing_fallback,
            workflows=token.workflows or None,
        )
        last = shown[-1] if len(shown) == limit else None
        return RunList.model_validate(
            {
                "runs": [summary.to_json() for summary in shown],
                "nextCursor": None if last is None else encode_cursor(last),
            }
        )

    @app.get(
        "/v1/runs/{run_id}",
        response_model=RunStatus,
        tags=["runs"],
        responses=_problems(400, 401, 403, 404, 429, 503),
    )
    def run_status(
        run_id: RunId, token: Annotated[TokenRecord, Depends(require("runs:read"))]
    ) -> JSONResponse:
        """The run at a glance, as ``little status --json``: status, steps, cost, output,
        and for a failed run why (``failure``), and what it waits for (``waiting``)."""
        checked = _run_id(run_id, where={"path": "run_id"})
        check_run_visible(fleet.client.world, token, checked)
        return JSONResponse(fleet.client.status(checked).to_json())

    @app.get(
        "/v1/runs/{run_id}/report",
        tags=["runs"],
        responses={
            200: {
                "content": {"application/json": {"schema": {"type": "object"}}},
                "description": "the report, as `little report --json` prints it",
            },
            **_problems(400, 401, 403, 404, 429, 503),
        },
    )
    def run_report(
        run_id: RunId, token: Annotated[TokenRecord, Depends(require("runs:read"))]
    ) -> JSONResponse:
        """The run's report, as ``little report --json``: attempts, tokens, dollars and
        duration per step, its timeline, why it failed, its budget and sub-runs."""
        checked = _run_id(run_id, where={"path": "run_id"})
        check_run_visible(fleet.client.world, token, checked)
        return JSONResponse(fleet.client.report(checked))

    @app.post(
        "/v1/runs/{run_id}/cancel",
        status_code=202,
        response_model=CancelAccepted,
        tags=["runs"],
        responses=_problems(400, 401, 403, 404, 409, 422, 429, 503),
    )
    def cancel_run(
        run_id: RunId,
        token: Annotated[TokenRecord, Depends(require("runs:cancel"))],
        body: CancelRun | None = None,
    ) -> JSONResponse:
        """Ask the run to stop, as ``little cancel``: it fails with causeCode ``cancelled``."""
        checked = _run_id(run_id, where={"path": "run_id"})
        client = fleet.client
        check_run_visible(client.world, token, checked)
        if not client.cancel(checked, reason=body.reason if body is not None else None):
            status = client.status(checked).status
            raise Problem(409, f"run {checked} has already ended ({status})", code="run_ended")
        accepted = CancelAccepted(runId=checked, cancelRequested=True)
        return JSONResponse(accepted.model_dump(), status_code=202)

    @app.get(
        "/v1/runs/{run_id}/events",
        tags=["runs"],
        response_class=StreamingResponse,
        responses={
            200: {
                "content": {"text/event-stream": {}, "application/x-ndjson": {}},
                "description": "the run's events: SSE (id: sequence, event: type, data: JSON), "
                "live until its end; or NDJSON (Accept: application/x-ndjson), what its log "
                "holds now",
            },
            **_problems(400, 401, 403, 404, 429, 503),
        },
    )
    async def run_events(
        request: Request,
        run_id: RunId,
        token: Annotated[TokenRecord, Depends(require("runs:read"))],
        last_event_id: Annotated[
            str | None, Header(description="the last sequence received: resume after it")
        ] = None,
        accept: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> StreamingResponse:
        """The run's events as Server-Sent Events, live until its end event (or as NDJSON,
        what its log holds now)."""
        del request
        checked = _run_id(run_id, where={"path": "run_id"})
        after = _last_event_id(last_event_id)
        world = fleet.client.world
        last = await to_thread.run_sync(world.last_sequence, checked, limiter=watchers.limiter)
        if last and token.workflows:
            visible = await to_thread.run_sync(
                run_visible, world, token, checked, limiter=watchers.limiter
            )
            last = last if visible else 0
        if last == 0:
            raise Problem(404, f"Run not found: {checked}")
        if after > last:
            detail = f"Last-Event-ID {after} is past the run's last event ({last})"
            raise Problem(400, detail, errors=[{"header": "last-event-id", "detail": detail}])
        if accept is not None and "application/x-ndjson" in accept:
            return StreamingResponse(
                ndjson_events(world, checked, after, watchers), media_type="application/x-ndjson"
            )
        return StreamingResponse(
            sse_events(world, checked, after, watchers),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    add_approval_routes(app, fleet, _problems)
    add_schedule_routes(app, fleet, _problems)
    return app


def _last_event_id(value: str | None) -> int:
    if value is None or value.strip() == "":
        return 0
    text = value.strip()
    if not text.isdigit() or len(text) > 18:
        detail = f"Last-Event-ID must be an event sequence (a whole number), got {value[:40]!r}"
        raise Problem(400, detail, errors=[{"header": "last-event-id", "detail": detail}])
    return int(text)
