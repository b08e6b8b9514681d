"""The HTTP API's approval routes (:mod:`little_dist.approvals`): ``GET /v1/approvals``
(scope ``runs:read``) lists the pending ones, ``POST /v1/approvals/{id}`` (scope
``approvals:decide``) approves or rejects one, as ``little approvals approve|reject`` does.

Who decided is the body's ``by``, else the token's name (else its id); the token's id is
recorded with the decision either way, so a ``by`` never hides which token spoke. An id that
names no approval is a 404, one decided before (or whose run has ended) a 409
``approval_decided``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path
from fastapi.responses import JSONResponse

from little_dist.approvals import ApprovalDecidedError, decide_approval, list_approvals
from little_dist.approvals.records import APPROVAL_ID_PATTERN
from little_dist.http.auth import require
from little_dist.http.fleet_access import FleetAccess
from little_dist.http.models import ApprovalInfo, ApprovalList, DecideApproval
from little_dist.http.problems import Problem
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


def add_approval_routes(
    app: FastAPI, fleet: FleetAccess, problems: Callable[..., dict[int | str, dict[str, Any]]]
) -> None:
    """Add the approval routes to ``app`` (``problems``: the app's declared problem answers)."""

    @app.get(
        "/v1/approvals",
        response_model=ApprovalList,
        tags=["approvals"],
        responses=problems(401, 403, 429, 503),
    )
    def approvals(token: Annotated[TokenRecord, Depends(require("runs:read"))]) -> ApprovalList:
        """The approvals waiting for a person, oldest first: the held tool call (its run,
        step, tool and arguments), the rule, and its deadline."""
        del token
        world = fleet.client.world
        pending = list_approvals(world, run_ids=_active_run_ids(fleet))
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
