"""The viewer's routes on the API's app: :func:`install_viewer` (kept out of the OpenAPI
document: they answer HTML for a browser, not a service).

* ``GET /ui`` (``?status=&workflow=&cursor=``) and ``GET /ui/runs/{id}``: page shells, no
  token needed (they hold no data);
* ``GET /ui/fragments/runs`` and ``GET /ui/fragments/runs/{id}``: their content, with the
  bearer token of ``runs:read`` as every ``/v1`` read (a 401, 403 or 404 is the same
  problem JSON, which the script shows);
* ``GET /ui/static/viewer.js`` and ``viewer.css``: shipped in the wheel (package data).

Every answer carries a Content-Security-Policy that runs only the viewer's own script file
(no inline script, no event-handler attribute, no other origin): escaping keeps run data
text, and the policy is the second wall should a page ever fail to escape something.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Final

from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse, Response

from little_dist.fleet.run_listing import list_runs
from little_dist.fleet.run_waits import waiting_for_approval
from little_dist.http.auth import require
from little_dist.http.cursors import PAGE, RunStatusWord, decode_cursor, encode_cursor
from little_dist.http.fleet_access import FleetAccess
from little_dist.http.problems import Problem
from little_dist.http.run_access import check_run_visible
from little_dist.http.tokens import TokenRecord
from little_dist.ids import InvalidIdError, validate_run_id
from little_dist.report import build_run_report
from little_dist.report.html import REPORT_CSS
from little_dist.report.runs import workflow_hint
from little_dist.subruns.links import parent_link_of, sub_run_ends, sub_run_starts

from .calls import step_calls
from .pages import BASE, RunPage, fragment_query, run_fragment, runs_filter, runs_fragment, shell

__all__ = ["CSP", "install_viewer"]

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
_HEADERS: Final = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STATIC: Final = {"viewer.js": "text/javascript", "viewer.css": "text/css"}


def _html(text: str) -> HTMLResponse:
    return HTMLResponse(text, headers=_HEADERS)


def _checked_run_id(run_id: str) -> str:
    try:
        return validate_run_id(run_id)
    except InvalidIdError as exc:
        detail = str(exc)
        raise Problem(400, detail, errors=[{"path": "run_id", "detail": detail}]) from None


def read_run_page(fleet: FleetAccess, run_id: str, token: TokenRecord) -> RunPage:
    """What the run page shows, read from the run's log (and ``little status``'s view)."""
    client = fleet.client
    world = client.world
    check_run_visible(world, token, run_id)
    events = world.list_events(run_id)
    if not events:
        raise Problem(404, f"Run not found: {run_id}")
    fallback = client.pricing_fallback
    report = build_run_report(
        events, run_id=run_id, pricing_fallback=fallback, late=world.late_events(run_id)
    )
    status = client.status(run_id).to_json()
    workflow, version = workflow_hint(events[0])
    budget = status.get("budget")
    return RunPage(
        report=report,
        status=status,
        workflow=workflow or version,
        last_sequence=events[-1].sequence,
        last_type=events[-1].type,
        calls=step_calls(events, fallback=fallback),
        children=sub_run_starts(events),
        child_ends=sub_run_ends(events),
        parent=parent_link_of(events),
        budget=budget if isinstance(budget, dict) else None,
        may_cancel=token.allows("runs:cancel"),
        waiting=waiting_for_approval(run_id, events),
        may_decide=token.allows("approvals:decide"),
    )


def install_viewer(app: FastAPI, fleet: FleetAccess) -> None:
    """Add the viewer's routes (see the module docstring) to ``app``."""

    @app.get(BASE, include_in_schema=False)
    def runs_page(
        status: Annotated[str | None, Query(max_length=20)] = None,
        workflow: Annotated[str | None, Query(max_length=200)] = None,
        cursor: Annotated[str | None, Query(max_length=400)] = None,
    ) -> HTMLResponse:
        query = fragment_query(status=status, workflow=workflow, cursor=cursor)
        return _html(
            shell(
                title="Runs",
                page="runs",
                fragment=f"{BASE}/fragments/runs{query}",
                body=runs_filter(status, workflow),
            )
        )

    @app.get(BASE + "/runs/{run_id}", include_in_schema=False)
    def run_page(run_id: str) -> HTMLResponse:
        checked = _checked_run_id(run_id)
        return _html(
            shell(
                title=f"Run {checked}",
                page="run",
                fragment=f"{BASE}/fragments/runs/{checked}",
                run_id=checked,
            )
        )

    @app.get(BASE + "/fragments/runs", include_in_schema=False)
    def runs_part(
        token: Annotated[TokenRecord, Depends(require("runs:read"))],
        status: Annotated[RunStatusWord | None, Query()] = None,
        workflow: Annotated[str | None, Query(max_length=200)] = None,
        cursor: Annotated[str | None, Query(max_length=400)] = None,
    ) -> HTMLResponse:
        client = fleet.client
        shown = list_runs(
            client.world,
            status=status,
            workflow=workflow,
            limit=PAGE,
            before=None if cursor is None else decode_cursor(cursor),
            pricing_fallback=client.pricing_fallback,
            workflows=token.workflows or None,
        )
        next_query = (
            fragment_query(status=status, workflow=workflow, cursor=encode_cursor(shown[-1]))
            if len(shown) == PAGE
            else None
        )
        filtered = bool(status or workflow or cursor)
        return _html(runs_fragment(shown, next_query=next_query, filtered=filtered))

    @app.get(BASE + "/fragments/runs/{run_id}", include_in_schema=False)
    def run_part(
        run_id: str, token: Annotated[TokenRecord, Depends(require("runs:read"))]
    ) -> HTMLResponse:
        page = read_run_page(fleet, _checked_run_id(run_id), token)
        return _html(run_fragment(page))

    @app.get(BASE + "/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        media = _STATIC.get(name)
        if media is None:
            raise Problem(404, f"no such file: {name[:80]!r}")
        text = resources.files(__package__).joinpath("static", name).read_bytes()
        if name == "viewer.css":  # the report's look first, then the viewer's own rules
            text = REPORT_CSS.encode("utf-8") + text
        headers = {**_HEADERS, "Cache-Control": "no-cache"}
        return Response(text, media_type=media, headers=headers)
