"""The ``/v1/schedules`` routes: make, list and delete the fleet's schedules.

Making one needs ``schedules:write`` (and, for a token restricted to some workflows, one of
them); listing needs ``runs:read``; deleting ``schedules:write``. What a schedule is and
when it ticks: :mod:`little_dist.fleet.schedule_specs`; who starts its runs: the schedulers
(:mod:`little_dist.fleet.schedules`). Every refusal is a problem naming the field.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path
from fastapi.responses import JSONResponse, Response

from little_dist.errors import InvalidInputError
from little_dist.fleet.schedule_specs import Schedule, ScheduleInputError, schedule_view
from little_dist.fleet.schedule_store import ScheduleStore, Stored, check_schedule_id
from little_dist.http.auth import require
from little_dist.http.fleet_access import FleetAccess
from little_dist.http.problems import Problem
from little_dist.http.schedule_models import CreateSchedule, ScheduleInfo, ScheduleList
from little_dist.http.tokens import TokenRecord

__all__ = ["add_schedule_routes", "schedule_info"]

Problems = Callable[..., dict[int | str, dict[str, Any]]]

ScheduleId = Annotated[
    str,
    Path(
        description="the schedule id ('sch_' + 16 hex digits)",
        json_schema_extra={"pattern": "^sch_[0-9a-f]{16}$"},
    ),
]


def schedule_info(stored: Stored) -> ScheduleInfo:
    return ScheduleInfo.model_validate(schedule_view(stored.schedule, stored.last_tick))


def _checked(body: CreateSchedule, fleet: FleetAccess, token: TokenRecord) -> Schedule:
    if not token.may_submit(body.workflow):
        detail = f"the token may not start runs of {body.workflow!r}"
        raise Problem(403, detail, errors=[{"pointer": "/workflow", "detail": detail}])
    workflow = fleet.registry.get(body.workflow) if fleet.registry is not None else None
    if workflow is None:
        known = ", ".join(fleet.workflow_ids()[:20]) or "none"
        detail = f"unknown workflow {body.workflow!r} (this server's app defines: {known})"
        raise Problem(422, detail, errors=[{"pointer": "/workflow", "detail": detail}])
    run_input = {} if body.input is None else body.input
    try:
        run_input = workflow.validate_input(run_input, limits=fleet.settings.limits)
    except InvalidInputError as exc:
        raise Problem(422, str(exc), errors=[{"pointer": "/input", "detail": str(exc)}]) from exc
    try:
        return Schedule.made(
            workflow=body.workflow,
            now=time.time(),
            input=run_input,
            cron=body.cron,
            every_seconds=body.everySeconds,
            time_zone=body.timeZone,
            catch_up=body.catchUp,
            callback_url=body.callbackUrl,
        )
    except ScheduleInputError as exc:
        where = {"pointer": f"/{exc.field}", "detail": str(exc)}
        raise Problem(422, str(exc), errors=[where]) from exc
    except InvalidInputError as exc:  # (the callback URL)
        where = {"pointer": "/callbackUrl", "detail": str(exc)}
        raise Problem(422, str(exc), errors=[where]) from exc


def add_schedule_routes(app: FastAPI, fleet: FleetAccess, problems: Problems) -> None:
    """Add the routes to ``app`` (``problems``: the responses of the status codes given)."""

    def store() -> ScheduleStore:
        return ScheduleStore(fleet.redis, fleet.settings.signal_stream)

    def checked_id(schedule_id: str) -> str:
        try:
            return check_schedule_id(schedule_id)
        except InvalidInputError as exc:
            detail = str(exc)
            raise Problem(400, detail, errors=[{"path": "schedule_id", "detail": detail}]) from exc

    @app.post(
        "/v1/schedules",
        status_code=201,
        response_model=ScheduleInfo,
        tags=["schedules"],
        responses=problems(400, 401, 403, 413, 422, 429, 503),
    )
    def create_schedule(
        body: CreateSchedule,
        token: Annotated[TokenRecord, Depends(require("schedules:write"))],
    ) -> JSONResponse:
        """Make a schedule: the schedulers start a run of the workflow at each tick."""
        schedule = store().create(_checked(body, fleet, token))
        info = schedule_info(Stored(schedule, schedule.created_at))
        return JSONResponse(
            info.model_dump(exclude_none=True),
            status_code=201,
            headers={"Location": f"/v1/schedules/{schedule.id}"},
        )

    @app.get(
        "/v1/schedules",
        response_model=ScheduleList,
        response_model_exclude_none=True,
        tags=["schedules"],
        responses=problems(401, 403, 429, 503),
    )
    def list_schedules(
        token: Annotated[TokenRecord, Depends(require("runs:read"))],
    ) -> ScheduleList:
        """Every schedule, oldest first, with its last and next tick."""
        del token
        return ScheduleList(schedules=[schedule_info(stored) for stored in store().list()])

    @app.delete(
        "/v1/schedules/{schedule_id}",
        status_code=204,
        response_class=Response,
        tags=["schedules"],
        responses=problems(400, 401, 403, 404, 429, 503),
    )
    def delete_schedule(
        schedule_id: ScheduleId,
        token: Annotated[TokenRecord, Depends(require("schedules:write"))],
    ) -> Response:
        """Delete a schedule (the runs it started stay)."""
        del token
        checked = checked_id(schedule_id)
        if not store().delete(checked):
            raise Problem(404, f"Schedule not found: {checked}")
        return Response(status_code=204)
