"""The HTTP API's approval routes (:mod:`little_dist.approvals`): ``GET /v1/approvals``
(scope ``runs:read``) lists the pending ones, ``POST /v1/approvals/{id}`` (scope
``approvals:decide``) approves or rejects one, as ``little approvals approve|reject`` does.

Who decided is the body's ``by``, else the token's name (else its id); the token's id is
recorded with the decision either way, so a ``by`` never hides which token spoke. An id that
names no approval is a 404, one decided before (or whose run has ended) a 409
``approval_decided``. A token restricted to workflows sees and decides the approvals of
their runs only (:mod:`.run_access`): another run's approval is a 404 as an unknown one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query
from fastapi.responses import JSONResponse

from little_dist.approvals import (
    ApprovalDecidedError,
    ApprovalNotFoundError,
    decide_approval,
    list_approvals,
    run_id_of,
)
from little_dist.approvals.records import APPROVAL_ID_PATTERN
from little_dist.http.auth import require
from little_dist.http.fleet_access import FleetAccess
from little_dist.http.models import ApprovalInfo, ApprovalList, DecideApproval
from little_dist.http.problems import Problem
from little_dist.http.run_access import check_run_visible, run_visible, visible_run_ids
from little_dist.http.tokens import TokenRecord

__all__ = ["add_approval_routes"]

ApprovalId = Annotated[
    str,
    Path(
        max_length=200,
        description="the approval id ('apr_' + 16 hex digits + '.' + the run id)",
        json_schema_extra={"pattern": APPROVAL_ID_PATTERN.pattern},
    ),
]


def _active_run_ids(fleet: FleetAccess) -> list[str]:
    """The fleet's active runs (the set the sweeps walk): only they can wait for a person."""
    from little_dist.fleet.sweeper import ActiveRuns
    from little_dist.world.fleet_keys import active_runs_key

    return ActiveRuns(fleet.redis, active_runs_key(fleet.settings.signal_stream)).members()


def _checked_run_id(run_id: str) -> str:
    from little_dist.ids import InvalidIdError, validate_run_id

    try:
        return validate_run_id(run_id)
    except InvalidIdError as exc:
        raise Problem(400, str(exc), errors=[{"query": "runId", "detail": str(exc)}]) from None


def add_approval_routes(
    app: FastAPI, fleet: FleetAccess, problems: Callable[..., dict[int | str, dict[str, Any]]]
) -> None:
    """Add the approval routes to ``app`` (``problems``: the app's declared problem answers)."""

    @app.get(
        "/v1/approvals",
        response_model=ApprovalList,
        tags=["approvals"],
        responses=problems(400, 401, 403, 404, 422, 429, 503),
    )
    def approvals(
        token: Annotated[TokenRecord, Depends(require("runs:read"))],
        run_id: Annotated[
            str | None,
            Query(alias="runId", max_length=100, description="only this run's approvals"),
        ] = None,
    ) -> ApprovalList:
        """The approvals waiting for a person, oldest first: the held tool call (its run,
        step, tool and arguments), the rule, and its deadline."""
        world = fleet.client.world
        if run_id is not None:
            checked = _checked_run_id(run_id)
            if world.last_sequence(checked) == 0:
                raise Problem(404, f"Run not found: {checked}")
            check_run_visible(world, token, checked)
            runs = [checked]
        else:
            runs = visible_run_ids(world, token, _active_run_ids(fleet))
        pending = list_approvals(world, run_ids=runs)
        return ApprovalList.model_validate({"approvals": [a.to_json() for a in pending]})

    @app.post(
        "/v1/approvals/{approval_id}",
        response_model=ApprovalInfo,
        tags=["approvals"],
        responses=problems(400, 401, 403, 404, 409, 422, 429, 503),
    )
    def decide(
        approval_id: ApprovalId,
        body: DecideApproval,
        token: Annotated[TokenRecord, Depends(require("approvals:decide"))],
    ) -> JSONResponse:
        """Approve (the call runs) or reject (it fails as a rule's deny does) a held tool
        call; the step resumes on any worker. The decision is recorded in the run's log."""
        world = fleet.client.world
        if not run_visible(world, token, run_id_of(approval_id)):
            raise ApprovalNotFoundError(approval_id, f"no run {run_id_of(approval_id)}")
        try:
            decided = decide_approval(
                fleet.client.world,
                approval_id,
                allow=body.decision == "approve",
                by=body.by or token.name or f"token {token.id}",
                via="http",
                reason=body.reason,
                token_id=token.id,
            )
        except ApprovalDecidedError as exc:
            raise Problem(409, str(exc), code="approval_decided") from None
        return JSONResponse(ApprovalInfo.model_validate(decided.to_json()).model_dump())
