"""One line per run for ``little runs``: id, workflow, status, start, duration and cost.

Made from what a world hands cheaply (:meth:`~little_dist.world.base.World.first_and_last_events`):
the first event names the workflow (``little.run.submitted`` and ``OrchestrationRequested``
carry its id; a run of a bare LWIR document starts with the version it runs, whose
``metadata.name`` the caller looks up) and when the run started; the last one says whether
it ended, how (``RunCompleted``; ``RunFailed``, ``cancelled`` when its causeCode says so), and
when. The cost is the only figure that needs more than two events: the caller passes the
run's model-call usage (:func:`~little_dist.report.model.calls_usage` of its usage events and
its late record), for the runs it shows. Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from little_dist.events import Event

__all__ = ["STATUSES", "RunSummary", "summarize_run", "workflow_hint"]

#: What ``little runs --status`` filters on.
STATUSES = ("running", "completed", "failed", "cancelled")


@dataclass(frozen=True)
class RunSummary:
    """A run at the cost of its first and last events (see the module docstring)."""

    run_id: str
    workflow: str | None
    status: str
    started_at: str
    finished_at: str | None
    duration_ms: float | None
    cost_usd: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "durationMs": self.duration_ms,
            "costUsd": None if self.cost_usd is None else round(self.cost_usd, 10),
        }


def workflow_hint(first: Event) -> tuple[str | None, str | None]:
    """``(workflow id, version id)`` the run's first event names: the id when a submission
    or a planning request carries it, else the version id (look its name up)."""
    payload = first.payload
    workflow = payload.get("workflowId")
    if isinstance(workflow, str) and workflow:
        return workflow, None
    version = payload.get("workflowVersionId")
    return None, version if isinstance(version, str) and version else None


def _status(last: Event) -> str:
    if last.type == "RunCompleted":
        return "completed"
    if last.type == "RunFailed":
        error = last.payload.get("error")
        cancelled = isinstance(error, Mapping) and error.get("causeCode") == "cancelled"
        return "cancelled" if cancelled else "failed"
    return "running"


def _ms(start: str, end: str) -> float | None:
    try:
        ms = (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except ValueError:
        return None
    return round(ms * 1000)


def summarize_run(first: Event, last: Event, *, workflow: str | None) -> RunSummary:
    """The summary of a run whose log starts with ``first`` and ends (so far) with ``last``;
    ``workflow``: its name, as the caller found it."""
    status = _status(last)
    ended = status != "running"
    return RunSummary(
        run_id=first.run_id,
        workflow=workflow,
        status=status,
        started_at=first.recorded_at,
        finished_at=last.recorded_at if ended else None,
        duration_ms=_ms(first.recorded_at, last.recorded_at) if ended else None,
    )
