"""An outer loop's dollar budget: its cycles spend from it, one after the other.

A loop given ``budget_usd`` (``run_outer_loop(..., budget_usd=)``, ``run_workflow(...,
max_outer_cycles=..., budget_usd=)``) gives each cycle's run, as its own budget, what the
loop has left when the cycle starts: the budget less what every earlier cycle counts — its
run's spend, holds and sub-runs (:attr:`~little_dist.run_state.RunState.committed_usd`) and
its supervisor's call (``OuterLoopCycleCompleted``'s ``supervisorCall``, priced). Cycles run
one at a time, so a cycle's budget is exactly what is left; the cycle's run stops before it
as any budgeted run does (its planner's calls, in process, and its sub-runs included). The
supervisor's call is counted once it was made, not reserved before: a loop whose cycle ended
at its budget may pass it by that one call. A cycle that finds nothing left is not started:
the loop stops with ``budget_exceeded``. Everything is read from the cycles' logs, so a
resumed loop counts the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from little_dist.outer_loop.decisions import CYCLE_COMPLETED, supervisor_usage

if TYPE_CHECKING:
    from little_dist.outer_loop.manifest import CycleSummary
    from little_dist.pricing import PriceFallback
    from little_dist.world.base import World

__all__ = ["cycle_spent", "loop_spent"]


def cycle_spent(world: World, run_id: str, number: int, fallback: PriceFallback | None) -> float:
    """What cycle ``number`` (run ``run_id``) counts against its loop's budget."""
    from little_dist.run_state import materialize_run_state

    events = world.list_events(run_id)
    if not events:
        return 0.0
    state = materialize_run_state(events, run_id=run_id, pricing_fallback=fallback)
    decided: list[Any] = [
        e.payload
        for e in events
        if e.type == CYCLE_COMPLETED and e.payload.get("cycleNumber") == number
    ]
    supervisor = supervisor_usage(decided[:1], fallback=fallback).cost_usd
    return state.committed_usd + (supervisor or 0.0)


def loop_spent(
    world: World, cycles: Sequence[CycleSummary], fallback: PriceFallback | None
) -> float:
    """What the loop's finished cycles count against its budget."""
    return sum(cycle_spent(world, cycle.run_id, cycle.cycle_number, fallback) for cycle in cycles)
