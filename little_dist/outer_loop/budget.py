"""An outer loop's dollar budget: its cycles spend from it, one after the other, and so does
the supervisor's call about each.

A loop given ``budget_usd`` (``run_outer_loop(..., budget_usd=)``, ``run_workflow(...,
max_outer_cycles=..., budget_usd=)``) gives each cycle's run, as its own budget, what the
loop has left when the cycle starts: the budget less what every earlier cycle counts — its
run's spend, holds and sub-runs (:attr:`~little_dist.run_state.RunState.committed_usd`) and
its supervisor's call. Cycles run one at a time, so a cycle's budget is exactly what is left;
the cycle's run stops before it as any budgeted run does (its planner's calls and its
sub-runs included). A cycle that finds nothing left is not started: the loop stops with
``budget_exceeded``.

The supervisor's call (:func:`ask_supervisor`). A supervisor that can say what its call may cost
at most (``worst_case_usd(state, pricing_fallback)``, as
:class:`~little_dist.outer_loop.supervisor.ModelSupervisor` does: the prompt's tokens and
its output limit, priced as any model call's worst case) is held before it is called:

1. against the loop's budget: ``little.budget.supervisor_reserved`` (``reservedUsd``,
   occurrence ``outer-loop:supervisor-hold:{n}``) is appended to the cycle's run (after its
   end, as the decision is) only if the loop's cycles, this one included, and the call can
   stay within the budget; else the call is not made and the loop stops with
   ``budget_exceeded``. The cycle counts that hold until its ``OuterLoopCycleCompleted``
   records the call (``supervisorCall``), whose price then replaces it. A loop resumed
   between the two finds the hold recorded: it calls the supervisor under it, neither
   holding twice nor forgetting it (a call that failed stays held until a decision is
   recorded);
2. against the operator's daily ceilings of its key (:mod:`little_dist.quotas.daily`; the
   fleet's Redis when the loop runs on a fleet, else this process's), settled at its price
   after the call; a call a ceiling cannot hold is not made: ``daily_budget_exceeded``.

A supervisor that cannot say (a plain callable) is counted once it reported its call.
Everything is read from the cycles' logs, so a resumed loop counts the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from little_dist.event_types.engine import SUPERVISOR_HOLD_EVENT_TYPE
from little_dist.events import EventInput
from little_dist.outer_loop.decisions import CYCLE_COMPLETED, Supervised, supervisor_usage
from little_dist.outer_loop.errors import OuterLoopError

if TYPE_CHECKING:
    from little_dist.fleet.client import Client
    from little_dist.outer_loop.manifest import CycleSummary
    from little_dist.pricing import PriceFallback
    from little_dist.quotas.limiter import DailyHold, QuotaLimiter
    from little_dist.world.base import World

__all__ = ["ask_supervisor", "cycle_spent", "loop_limiter", "loop_spent", "supervisor_hold"]

_EPSILON: Final = 1e-12


def supervisor_hold(loop_id: str, number: int, usd: float) -> EventInput:
    """The hold of cycle ``number``'s supervisor call (see the module docstring)."""
    return EventInput(
        type=SUPERVISOR_HOLD_EVENT_TYPE,
        occurrence_id=f"outer-loop:supervisor-hold:{number}",
        payload={"outerLoopId": loop_id, "cycleNumber": number, "reservedUsd": usd},
    )


def _held(events: Iterable[Any], number: int) -> float | None:
    for event in events:
        if event.type == SUPERVISOR_HOLD_EVENT_TYPE and event.payload.get("cycleNumber") == number:
            usd = event.payload.get("reservedUsd")
            return float(usd) if isinstance(usd, int | float) else 0.0
    return None


def cycle_spent(world: World, run_id: str, number: int, fallback: PriceFallback | None) -> float:
    """What cycle ``number`` (run ``run_id``) counts against its loop's budget: its run's
    committed dollars and its supervisor's call (priced once recorded, else its hold)."""
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
    held = _held(events, number)
    supervisor = supervisor_usage(decided[:1], fallback=fallback).cost_usd if decided else None
    if supervisor is None:  # (undecided, or a call this fold cannot price: its hold counts)
        supervisor = held
    return state.committed_usd + (supervisor or 0.0)


def loop_spent(
    world: World, cycles: Sequence[CycleSummary], fallback: PriceFallback | None
) -> float:
    """What the loop's finished cycles count against its budget."""
    return sum(cycle_spent(world, cycle.run_id, cycle.cycle_number, fallback) for cycle in cycles)


def loop_limiter(client: Client | None) -> QuotaLimiter | None:
    """Where the supervisor's calls count against daily key ceilings: a fleet loop's on the
    fleet's Redis (its client's ``LITTLE_QUOTAS``), else this process's (``None``)."""
    if client is None or client.settings.quotas is None:
        return None
    from little_dist.errors import InvalidInputError
    from little_dist.fleet.worker_slots import fleet_redis
    from little_dist.harness.quota_limiters import fleet_limiter

    try:
        redis = fleet_redis(client.settings)
    except InvalidInputError:
        redis = None
    return fleet_limiter(client.settings, redis)


def ask_supervisor(
    world: World,
    supervisor: Callable[[Mapping[str, Any]], Any],
    state: Mapping[str, Any],
    *,
    loop_id: str,
    cycles: Sequence[CycleSummary],
    budget: float | None,
    fallback: PriceFallback | None,
    limiter: QuotaLimiter | None = None,
) -> Any:
    """The supervisor's answer about the last of ``cycles`` (what the loop decides from,
    ``state``), its call held before it is made (see the module docstring); raises
    :class:`~little_dist.outer_loop.errors.OuterLoopError` (``budget_exceeded``,
    ``daily_budget_exceeded``, ``runtime_config_error`` for a model without a price) and
    does not call it when a budget cannot hold it."""
    from little_dist.harness.budget_hold import hold_model_daily, settle_model_daily
    from little_dist.harness.errors import ModelCallError

    estimate = getattr(supervisor, "worst_case_usd", None)
    model = getattr(supervisor, "model", None)
    if not callable(estimate):
        return supervisor(state)
    cycle = cycles[-1]
    worst: list[float] = []

    def need() -> float:  # (counted once, and only when a budget asks)
        if not worst:
            worst.append(float(estimate(state, fallback)))
        return worst[0]

    daily: DailyHold | None = None
    try:
        if budget is not None:
            _hold_against_loop(world, loop_id, cycles, budget, fallback, need)
        if model is not None:
            daily = hold_model_daily(limiter, model, need)
    except ModelCallError as error:
        raise _stopped(loop_id, cycle, str(error), error.cause_code) from error
    try:
        answer = supervisor(state)
    except BaseException:
        if daily is not None:
            daily.settle(0.0)
        raise
    if daily is not None:
        call = answer.call if isinstance(answer, Supervised) else None
        if call is None or model is None:
            daily.settle(daily.usd)
        else:
            settle_model_daily(daily, model, call.usage, fallback)
    return answer


def _hold_against_loop(
    world: World,
    loop_id: str,
    cycles: Sequence[CycleSummary],
    budget: float,
    fallback: PriceFallback | None,
    need: Callable[[], float],
) -> None:
    from little_dist.harness.budget_tree import refused

    cycle = cycles[-1]
    if _held(world.list_events(cycle.run_id), cycle.cycle_number) is not None:
        return  # (a resumed loop: held before its crash)
    spent = loop_spent(world, cycles, fallback)
    usd = need()
    if spent + usd > budget + _EPSILON:
        raise refused(
            f"outer loop {loop_id} budget ${budget:.6g}: the supervisor's call about cycle "
            f"{cycle.cycle_number} may cost up to ${usd:.6g} and its cycles spent or hold "
            f"${spent:.6g}; the call is not made"
        )
    world.append(cycle.run_id, supervisor_hold(loop_id, cycle.cycle_number, usd))


def _stopped(loop_id: str, cycle: CycleSummary, message: str, cause: str) -> OuterLoopError:
    return OuterLoopError(
        message,
        outer_loop_id=loop_id,
        cause_code=cause,
        run_id=cycle.run_id,
        workflow_version_id=cycle.workflow_version_id,
        last_cycle_output=cycle.output,
    )
