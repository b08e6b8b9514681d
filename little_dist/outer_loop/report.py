"""The report of an outer loop (``little report ol_...``): each cycle's run and supervisor
decision, with their tokens and dollars, and the loop's total.

Per cycle (the manifest's finished cycles, then the one under way, if any): the cycle run's
own usage rolled up with its sub-runs' (:func:`~little_dist.subruns.sub_run_rollup`) and its
late record, and the supervisor's call for that cycle, read from the cycle's
``OuterLoopCycleCompleted`` (``supervisorCall``, see :mod:`little_dist.outer_loop.decisions`)
and priced like any model call. ``runs`` + ``supervisor`` = ``total``: every token the loop
spent. A supervisor that reported no model call (a callable that is not a model) has no
usage; its cycle's supervisor column says ``-``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from little_dist.errors import InvalidInputError
from little_dist.outer_loop.decisions import CYCLE_COMPLETED, supervisor_usage
from little_dist.outer_loop.store import ManifestStore, manifest_store_for
from little_dist.pricing import (
    PriceFallback,
    UsageTotals,
    empty_usage_totals,
    format_cost,
    merge_usage_totals,
)

if TYPE_CHECKING:
    from little_dist.world.base import World

__all__ = [
    "CycleCost",
    "OuterLoopReport",
    "outer_loop_report",
    "outer_loop_report_to_json",
    "render_outer_loop_report",
]


@dataclass(frozen=True)
class CycleCost:
    """One cycle: its run (``run``: its usage, ``None`` when its log is missing), the
    supervisor's decision for it (``decision``: ``done`` / ``continue``, ``None`` while
    undecided) and what that decision cost (``supervisor``, ``None``: no call recorded)."""

    cycle_number: int
    run_id: str
    status: str
    decision: str | None
    run: UsageTotals | None
    supervisor: UsageTotals | None


@dataclass(frozen=True)
class OuterLoopReport:
    """An outer loop's cycles and totals (see the module docstring). ``status``: ``done``,
    ``exhausted`` (every cycle ran, none said done) or ``running``."""

    outer_loop_id: str
    status: str
    max_cycles: int
    cycles: tuple[CycleCost, ...]
    runs: UsageTotals
    supervisor: UsageTotals
    total: UsageTotals


def _run_usage(world: World, run_id: str, events: Sequence[Any], fallback: Any) -> UsageTotals:
    from little_dist.report.model import calls_usage
    from little_dist.run_state import materialize_run_state
    from little_dist.subruns import sub_run_rollup

    rollup = sub_run_rollup(world.list_events, run_id, events=events, pricing_fallback=fallback)
    usage = (
        rollup.total
        if rollup is not None
        else materialize_run_state(events, run_id=run_id, pricing_fallback=fallback).usage
    )
    return merge_usage_totals(usage, calls_usage(world.late_events(run_id), fallback=fallback))


def _cycle(
    world: World, number: int, run_id: str, status: str | None, fallback: PriceFallback | None
) -> CycleCost:
    from little_dist.run_state import materialize_run_state

    events = world.list_events(run_id)
    if not events:
        return CycleCost(number, run_id, status or "not_started", None, None, None)
    if status is None:  # the cycle under way: its run says how far it is
        status = materialize_run_state(events, run_id=run_id, pricing_fallback=fallback).status
    decided = [
        event.payload
        for event in events
        if event.type == CYCLE_COMPLETED and event.payload.get("cycleNumber") == number
    ]
    decision = None
    supervisor = None
    if decided:
        supervise = decided[0].get("supervise")
        kind = supervise.get("kind") if isinstance(supervise, dict) else None
        decision = kind if isinstance(kind, str) else None
        if "supervisorCall" in decided[0]:
            supervisor = supervisor_usage(decided[:1], fallback=fallback)
    return CycleCost(
        number,
        run_id,
        status,
        decision,
        _run_usage(world, run_id, events, fallback),
        supervisor,
    )


def outer_loop_report(
    world: World,
    outer_loop_id: str,
    *,
    manifests: ManifestStore | None = None,
    pricing_fallback: PriceFallback | None = None,
) -> OuterLoopReport:
    """The report of loop ``outer_loop_id`` kept in ``world`` (its manifest from
    ``manifests``, default the world's); :class:`InvalidInputError` when there is no such
    loop."""
    store = manifests if manifests is not None else manifest_store_for(world)
    stored = store.read(outer_loop_id)
    if stored is None:
        raise InvalidInputError(f"Outer loop not found: {outer_loop_id}")
    manifest = stored.manifest
    cycles = [
        _cycle(world, cycle.cycle_number, cycle.run_id, cycle.status, pricing_fallback)
        for cycle in manifest.cycles
    ]
    if manifest.pending_cycle_run_id is not None:
        cycles.append(
            _cycle(
                world,
                len(manifest.cycles) + 1,
                manifest.pending_cycle_run_id,
                None,
                pricing_fallback,
            )
        )
    runs = empty_usage_totals()
    supervisor = empty_usage_totals()
    for cycle in cycles:
        if cycle.run is not None:
            runs = merge_usage_totals(runs, cycle.run)
        if cycle.supervisor is not None:
            supervisor = merge_usage_totals(supervisor, cycle.supervisor)
    if manifest.done:
        status = "done"
    elif len(manifest.cycles) >= manifest.max_cycles:
        status = "exhausted"
    else:
        status = "running"
    return OuterLoopReport(
        outer_loop_id=outer_loop_id,
        status=status,
        max_cycles=manifest.max_cycles,
        cycles=tuple(cycles),
        runs=runs,
        supervisor=supervisor,
        total=merge_usage_totals(runs, supervisor),
    )


def _usage_json(usage: UsageTotals | None) -> dict[str, Any] | None:
    return None if usage is None else usage.model_dump(mode="json")


def outer_loop_report_to_json(report: OuterLoopReport) -> dict[str, Any]:
    """The report as JSON (``little report ol_... --json``)."""
    return {
        "outerLoopId": report.outer_loop_id,
        "status": report.status,
        "maxCycles": report.max_cycles,
        "cycles": [
            {
                "cycleNumber": cycle.cycle_number,
                "runId": cycle.run_id,
                "status": cycle.status,
                "decision": cycle.decision,
                "runUsage": _usage_json(cycle.run),
                "supervisorUsage": _usage_json(cycle.supervisor),
            }
            for cycle in report.cycles
        ],
        "runs": _usage_json(report.runs),
        "supervisor": _usage_json(report.supervisor),
        "total": _usage_json(report.total),
    }


def _tokens(usage: UsageTotals | None) -> str:
    if usage is None:
        return "-"
    return f"in={usage.input_tokens} out={usage.output_tokens}"


def _cost(usage: UsageTotals | None) -> str:
    return "-" if usage is None else format_cost(usage.cost_usd)


def render_outer_loop_report(report: OuterLoopReport) -> str:
    """The report as a text table: one line per cycle, then the totals."""
    lines = [
        f"OUTER LOOP {report.outer_loop_id}  {report.status}  "
        f"({len(report.cycles)} of at most {report.max_cycles} cycles)",
        f"  {'CYCLE':<6} {'RUN':<30} {'STATUS':<10} {'DECISION':<9} "
        f"{'RUN TOKENS':<22} {'RUN $':>12}  {'SUPERVISOR TOKENS':<22} {'SUPERVISOR $':>12}",
    ]
    for cycle in report.cycles:
        lines.append(
            f"  {cycle.cycle_number:<6} {cycle.run_id:<30} {cycle.status:<10} "
            f"{cycle.decision or '-':<9} {_tokens(cycle.run):<22} {_cost(cycle.run):>12}  "
            f"{_tokens(cycle.supervisor):<22} {_cost(cycle.supervisor):>12}"
        )
    for label, usage in (
        ("CYCLE RUNS", report.runs),
        ("SUPERVISOR", report.supervisor),
        ("TOTAL", report.total),
    ):
        lines.append(
            f"{label:<11} in={usage.input_tokens} out={usage.output_tokens} "
            f"cached={usage.cached_input_tokens}  {format_cost(usage.cost_usd)}"
        )
    return "\n".join(lines) + "\n"
