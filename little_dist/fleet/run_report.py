"""A run's report as ``little report`` reads it: :func:`read_run_report` and
:func:`run_report_json` (what ``little report --json``, ``Client.report`` and the HTTP
API's ``GET /v1/runs/{id}/report`` print).

The report (:func:`~little_dist.report.build_run_report`: attempts, tokens, dollars and
duration per step, the late record in the total), and in our forms (not ``--upstream``)
the run's dollar budget (its log folded), its sub-runs rolled up, and the tool calls it
waits for a person's decision on (``waiting``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from little_dist.fleet.run_waits import waiting_for_approval
from little_dist.pricing import PriceFallback
from little_dist.report import RunReport, build_run_report, report_to_json
from little_dist.run_state import materialize_run_state
from little_dist.subruns import SubRunRollup, sub_run_rollup, sub_runs_to_json
from little_dist.world.base import RunNotFoundError, World

__all__ = ["RunReportParts", "read_run_report", "run_report_json"]


@dataclass(frozen=True)
class RunReportParts:
    """What a run's report is made of (``budget`` and ``rollup`` in our forms only)."""

    report: RunReport
    budget: dict[str, float] | None
    rollup: SubRunRollup | None
    #: The tool calls the run waits for a person's decision on (:mod:`.run_waits`).
    waiting: tuple[dict[str, Any], ...] = ()


def read_run_report(
    world: World, run_id: str, *, pricing_fallback: PriceFallback | None, ours: bool = True
) -> RunReportParts:
    """Read the run's log (and its sub-runs', in our forms) and build its report;
    :class:`RunNotFoundError` for a run with no events."""
    events = world.list_events(run_id)
    if not events:
        raise RunNotFoundError(run_id)
    report = build_run_report(
        events,
        run_id=run_id,
        pricing_fallback=pricing_fallback,
        late=world.late_events(run_id),
    )
    if not ours:
        return RunReportParts(report, None, None)
    rollup = sub_run_rollup(
        world.list_events, run_id, events=events, pricing_fallback=pricing_fallback
    )
    waiting = tuple(waiting_for_approval(run_id, events))
    return RunReportParts(report, _budget(events, run_id, pricing_fallback), rollup, waiting)


def run_report_json(parts: RunReportParts, *, ours: bool = True) -> dict[str, Any]:
    """The report's JSON (``little report --json``; ``ours=False``: upstream's)."""
    data = report_to_json(parts.report, include_timeline=ours, detailed=ours)
    if parts.budget is not None:
        data["budget"] = parts.budget
    if parts.rollup is not None:
        data.update(sub_runs_to_json(parts.rollup))
    if parts.waiting:
        data["waiting"] = list(parts.waiting)
    return data


def _budget(
    events: Any, run_id: str, pricing_fallback: PriceFallback | None
) -> dict[str, float] | None:
    """The run's dollar budget, spent and reserved (its log folded), or ``None``."""
    state = materialize_run_state(events, run_id=run_id, pricing_fallback=pricing_fallback)
    if state.budget_usd is None:
        return None
    budget = {
        "budgetUsd": state.budget_usd,
        "spentUsd": round(state.spent_usd, 10),
        "reservedUsd": round(state.reserved_usd, 10),
    }
    if state.sub_runs_usd:
        budget["subRunsUsd"] = round(state.sub_runs_usd, 10)
    return budget
