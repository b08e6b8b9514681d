"""A budgeted run's model call: its worst-case cost reserved in the run's log, or refused.

Before the call is sent, the run's log is folded (:class:`~little_dist.run_state.RunState`
``budget_usd``, ``spent_usd``, ``reserved_usd``) and the call's ``harness.model.called`` is
appended with ``little.budget.reserved``, its worst-case cost (the prompt's tokens plus its
output limit, priced as ``little report`` prices calls), only if the log is still what was
folded (``expected_sequence``): two calls of one run, in one process or on two workers,
never both take the last dollars. The call's end event releases the hold; what it spent is
its priced usage. Everything is in the log, so a resumed run or a retried attempt neither
counts twice nor forgets. A call that would pass the ceiling is not sent: the step fails with
the terminal cause ``budget_exceeded``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from little_dist.harness.budget_tree import CAUSE_BUDGET_EXCEEDED
from little_dist.harness.errors import ModelCallError
from little_dist.observability.hooks import budget_refused
from little_dist.world.base import SequenceConflictError

if TYPE_CHECKING:
    from little_dist.events import Event, EventInput
    from little_dist.harness.types import HarnessContext, ResolvedModel
    from little_dist.pricing import PriceFallback
    from little_dist.quotas.limiter import DailyHold, QuotaLimiter

__all__ = [
    "CAUSE_BUDGET_EXCEEDED",
    "CAUSE_DAILY_BUDGET_EXCEEDED",
    "hold_daily",
    "hold_model_daily",
    "model_worst_case_usd",
    "reserve_and_record",
    "settle_daily",
    "settle_model_daily",
]

#: A call that would pass an operator's daily dollar ceiling of its key (not sent).
CAUSE_DAILY_BUDGET_EXCEEDED: Final = "daily_budget_exceeded"

_TRIES: Final = 200  # appends lost to other writers of the run before giving up


def worst_case_usd(
    ctx: HarnessContext,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
) -> float:
    """The most this call may cost: its prompt's tokens and its output limit, priced."""
    return model_worst_case_usd(ctx.model, messages, tools, ctx.pricing_fallback)


def model_worst_case_usd(
    model: ResolvedModel,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    pricing_fallback: PriceFallback | None,
) -> float:
    """The most a call of ``model`` may cost (its prompt's tokens, counted with litellm's
    token counter, and its output limit), priced as ``little report`` prices calls
    (``pricing_fallback``: ``None`` is litellm's cost map); ``runtime_config_error`` for a
    model with no known price."""
    from little_dist.harness.quota_estimate import estimate_amounts
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.quotas.rules import DEFAULT_OUTPUT_TOKENS
    from little_dist.run_state._usage import price_call, pricer_for

    amounts = estimate_amounts(
        model.litellm_model,
        messages,
        tools,
        model.settings,
        default_output_tokens=DEFAULT_OUTPUT_TOKENS,
    )
    fallback = pricing_fallback if pricing_fallback is not None else litellm_price_fallback
    usage = {"inputTokens": amounts.input_tokens, "outputTokens": amounts.output_tokens}
    cost = price_call(model.identity(), usage, pricer_for(fallback))[4]
    if cost is None:
        raise ModelCallError(
            f"model {model.litellm_model!r} has no known price: a run with a budget cannot "
            "call it (give its rates with pricing_fallback)",
            cause_code="runtime_config_error",
            retriable=False,
        )
    return float(cost)


def reserve_and_record(
    ctx: HarnessContext,
    turn: int,
    request: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
) -> None:
    """Append the call's ``harness.model.called`` with its reservation, or raise the
    terminal ``budget_exceeded`` when the run's budget (or, for a sub-run of a budgeted run,
    the tree's: :mod:`little_dist.harness.budget_tree`) cannot hold it."""
    recorder = ctx.recorder

    def record(need: float, last: int) -> None:
        recorder.model_called(turn, request, reserved_usd=need, expected_sequence=last)

    reserve(ctx, worst_case_usd(ctx, messages, tools), record)


def reserve(ctx: HarnessContext, need: float, record: Callable[[float, int], None]) -> None:
    """Fold the run's log until ``record(need, last_sequence)`` (which appends the call and
    its ``little.budget.reserved`` only if the log's last sequence is still that, else
    raises :class:`~little_dist.world.base.SequenceConflictError`) succeeds; borrow from
    the run's parent first when it must; ``budget_exceeded`` when the budget cannot hold
    ``need``."""
    import uuid

    from little_dist.harness.budget_tree import drawn_event, lend, shortfall
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.run_state import materialize_run_state

    fallback = ctx.pricing_fallback if ctx.pricing_fallback is not None else litellm_price_fallback
    recorder = ctx.recorder
    recorder.flush()  # (what this attempt recorded goes first)
    for _ in range(_TRIES):
        events: list[Event] = recorder.world.list_events(ctx.run_id)
        state = materialize_run_state(events, run_id=ctx.run_id, pricing_fallback=fallback)
        short = shortfall(state, need, "run")
        if short:
            parent = state.budget_parent_run_id
            assert parent is not None
            draw_id = uuid.uuid4().hex
            lend(recorder.world, parent, ctx.run_id, short, fallback, draw_id)
            drawn = drawn_event(short, draw_id)
            recorder.append(drawn.type, dict(drawn.payload), str(drawn.occurrence_id), durable=True)
            continue
        try:
            record(need, events[-1].sequence if events else 0)
            return
        except SequenceConflictError:
            continue
    raise ModelCallError(
        f"run {ctx.run_id}: could not reserve budget (the log kept changing)",
        cause_code="step_failed",
        retriable=True,
    )


def planner_hold(call_id: str, usd: float) -> EventInput:
    """``little.budget.reserved`` of a planner call (appended with its ``harness.model.called``:
    the planner records its calls on the run without a step)."""
    from little_dist.event_types.engine import BUDGET_RESERVED_EVENT_TYPE
    from little_dist.events import EventInput

    return EventInput(
        type=BUDGET_RESERVED_EVENT_TYPE,
        payload={"callId": call_id, "reservedUsd": usd, "role": "planner"},
        occurrence_id=f"budget-hold:{call_id}",
    )


def hold_daily(
    ctx: HarnessContext,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
) -> DailyHold | None:
    """The call's worst case held against the operator's daily dollar ceilings of its
    provider, model and key (:mod:`little_dist.quotas.daily`), on the fleet worker's
    limiter (Redis), else this process's; ``None`` when no ceiling applies. A call that
    would pass one is not sent: the terminal ``daily_budget_exceeded``."""
    return hold_model_daily(ctx.quotas, ctx.model, lambda: worst_case_usd(ctx, messages, tools))


def hold_model_daily(
    limiter: QuotaLimiter | None, model: ResolvedModel, worst_case: Callable[[], float]
) -> DailyHold | None:
    """:func:`hold_daily` of a call of ``model`` whose worst case ``worst_case()`` gives
    (asked only when a ceiling applies), on ``limiter`` (``None``: this process's)."""
    from little_dist.harness.quota_estimate import call_identity
    from little_dist.harness.quota_limiters import process_limiter
    from little_dist.quotas.limiter import DailyBudgetExceeded

    limiter = limiter if limiter is not None else process_limiter()
    if limiter is None or not limiter.rules.daily:
        return None
    call = call_identity(model.litellm_model, model.settings)
    if not limiter.rules.daily_for(call):
        return None
    try:
        return limiter.reserve_daily(call, worst_case())
    except DailyBudgetExceeded as exc:
        budget_refused("key_daily")
        raise ModelCallError(
            str(exc), cause_code=CAUSE_DAILY_BUDGET_EXCEEDED, retriable=False
        ) from exc


def settle_daily(ctx: HarnessContext, hold: DailyHold, usage: Mapping[str, Any]) -> None:
    """The call ended with ``usage``: its price replaces its worst case (a price unknown
    here: the worst case stands)."""
    settle_model_daily(hold, ctx.model, usage, ctx.pricing_fallback)


def settle_model_daily(
    hold: DailyHold,
    model: ResolvedModel,
    usage: Mapping[str, Any],
    pricing_fallback: PriceFallback | None,
) -> None:
    """:func:`settle_daily` of a call of ``model``."""
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.run_state._usage import price_call, pricer_for

    fallback = pricing_fallback if pricing_fallback is not None else litellm_price_fallback
    cost = price_call(model.identity(), dict(usage), pricer_for(fallback))[4]
    hold.settle(hold.usd if cost is None else float(cost))
