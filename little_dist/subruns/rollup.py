"""A parent run's sub-runs and their cost, rolled up for ``little report``.

:func:`sub_run_rollup` reads the parent's log for the children it started
(``little.subrun.started``), folds each child's own log for its status and usage, and walks
down to the children's children. ``total`` is the parent's own usage plus every
descendant's: the tokens and dollars the whole tree spent. A child whose log is missing (it
was recorded as started, then the process died before its first event) is listed with
status ``not_started`` and no usage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from little_dist.pricing import PriceFallback, UsageTotals, format_cost, merge_usage_totals
from little_dist.subruns.links import sub_run_ends, sub_run_starts

__all__ = ["SubRunRollup", "SubRunRow", "render_sub_runs", "sub_run_rollup", "sub_runs_to_json"]

#: How deep the walk goes (upstream's orchestrator is one level deep; this is a backstop).
MAX_DEPTH = 8


@dataclass(frozen=True)
class SubRunRow:
    """One descendant run: ``depth`` 1 for a child, 2 for a grandchild..."""

    run_id: str
    parent_run_id: str
    workflow_id: str
    tool_call_id: str
    step_path: str
    status: str
    usage: UsageTotals | None
    depth: int


@dataclass(frozen=True)
class SubRunRollup:
    """The descendants of ``run_id`` in the order they were started (depth first), and
    ``total``: the run's own usage plus theirs."""

    run_id: str
    rows: tuple[SubRunRow, ...]
    own: UsageTotals
    total: UsageTotals


ListEvents = Callable[[str], Sequence[Any]]


def _state(events: Sequence[Any], run_id: str, fallback: PriceFallback | None) -> Any:
    from little_dist.run_state import materialize_run_state

    return materialize_run_state(events, run_id=run_id, pricing_fallback=fallback)


def sub_run_rollup(
    list_events: ListEvents,
    run_id: str,
    *,
    events: Sequence[Any] | None = None,
    pricing_fallback: PriceFallback | None = None,
) -> SubRunRollup | None:
    """The sub-run tree under ``run_id``, or ``None`` when the run started none;
    ``list_events`` reads a run's log (e.g. ``world.list_events``), ``events`` is the run's
    own log when the caller has read it already."""
    if events is None:
        events = list_events(run_id)
    if not sub_run_starts(events):
        return None
    own = _state(events, run_id, pricing_fallback).usage
    rows: list[SubRunRow] = []
    total = own
    seen = {run_id}

    def walk(parent: str, parent_events: Sequence[Any], depth: int) -> None:
        nonlocal total
        if depth > MAX_DEPTH:
            return
        ends = sub_run_ends(parent_events)
        for start in sub_run_starts(parent_events):
            child = start.child_run_id
            if child in seen:
                continue
            seen.add(child)
            child_events = list_events(child)
            usage: UsageTotals | None = None
            status = "not_started"
            if child_events:
                state = _state(child_events, child, pricing_fallback)
                usage, status = state.usage, state.status
                if ends.get(child, {}).get("status") == "planned":
                    status = "planned"  # a plan_workflow call's planning run
                total = merge_usage_totals(total, usage)
            rows.append(
                SubRunRow(
                    run_id=child,
                    parent_run_id=parent,
                    workflow_id=start.workflow_id,
                    tool_call_id=start.tool_call_id,
                    step_path=start.step_path,
                    status=status,
                    usage=usage,
                    depth=depth,
                )
            )
            if child_events:
                walk(child, child_events, depth + 1)

    walk(run_id, events, 1)
    return SubRunRollup(run_id=run_id, rows=tuple(rows), own=own, total=total)


def _usage_json(usage: UsageTotals | None) -> dict[str, Any] | None:
    return None if usage is None else usage.model_dump(mode="json")


def sub_runs_to_json(rollup: SubRunRollup) -> dict[str, Any]:
    """``subRuns`` (one object per descendant) and ``totalWithSubRuns`` for the report."""
    return {
        "subRuns": [
            {
                "runId": row.run_id,
                "parentRunId": row.parent_run_id,
                "workflowId": row.workflow_id,
                "toolCallId": row.tool_call_id,
                "stepPath": row.step_path,
                "status": row.status,
                "depth": row.depth,
                "usage": _usage_json(row.usage),
            }
            for row in rollup.rows
        ],
        "totalWithSubRuns": _usage_json(rollup.total),
    }


def render_sub_runs(rollup: SubRunRollup) -> str:
    """The report's sub-run section: one line per descendant, then the rolled-up total."""
    lines = ["", "SUB-RUNS"]
    for row in rollup.rows:
        usage = row.usage
        tokens = "-" if usage is None else f"in={usage.input_tokens} out={usage.output_tokens}"
        cost = "-" if usage is None else format_cost(usage.cost_usd)
        indent = "  " * (row.depth - 1)
        lines.append(
            f"  {indent}{row.run_id}  {row.workflow_id:<20} {row.status:<11} {tokens:<22} "
            f"{cost:>12}  from {row.step_path}"
        )
    total = rollup.total
    lines.append(
        f"TOTAL WITH SUB-RUNS  in={total.input_tokens} out={total.output_tokens} "
        f"cached={total.cached_input_tokens}  {format_cost(total.cost_usd)}"
    )
    return "\n".join(lines) + "\n"
