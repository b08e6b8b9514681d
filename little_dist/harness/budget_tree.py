"""Budget trees: a budgeted run's sub-runs (and theirs) spend from its budget.

A child of a budgeted parent (``budgetFromParent`` in its ``RunStarted``: see
:func:`little_dist.subruns.engine`'s parent payload) has no money of its own. When one of its
model calls needs more than the child holds (what it borrowed, less what it spent, holds and
its own children count), it borrows the shortfall from its parent before the call is sent:

1. the parent's log is folded and ``little.budget.lent`` (``childRunId``, ``usd``) appended
   to it only if the log is still what was folded (``expected_sequence``), and only if the
   parent's budget can hold it (what the parent spent, holds, and every child counts, plus
   this) — a parent that itself borrows (a grandchild's call) borrows first from its own
   parent the same way, up the tree; a parent that ended lends nothing;
2. ``little.budget.drawn`` (``usd``) is appended to the child's own log;
3. the child's call reserves as any budgeted call (:mod:`little_dist.harness.budget_hold`).

A child with its own ``budget_usd`` (its workflow's) never borrows past it. The parent
counts each child at what it lent it until the child's end (``little.subrun.ended``,
``spentUsd``: what the child and its own children spent and still hold) replaces that, so
whatever the child did not spend returns to the parent. Siblings on other workers borrow
from one log, one append at a time: two can never both take the parent's last dollars.

Everything is in the logs. A worker that dies between 1 and 2 leaves the parent counting a
loan the child never recorded: too much, never too little, and only until the child ends.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Final

from little_dist.event_types.engine import BUDGET_DRAWN_EVENT_TYPE, BUDGET_LENT_EVENT_TYPE
from little_dist.events import EventInput
from little_dist.harness.errors import ModelCallError
from little_dist.observability.hooks import budget_refused
from little_dist.world.base import SequenceConflictError

if TYPE_CHECKING:
    from little_dist.pricing import PriceFallback
    from little_dist.run_state import RunState

__all__ = ["CAUSE_BUDGET_EXCEEDED", "drawn_event", "lend", "shortfall"]

CAUSE_BUDGET_EXCEEDED: Final = "budget_exceeded"
#: Appends lost to other writers of one log before giving up.
TRIES: Final = 200
#: How far up a tree a call may borrow (the sub-run rollup's depth).
MAX_DEPTH: Final = 8
_EPSILON: Final = 1e-12


def refused(message: str, scope: str = "run") -> ModelCallError:
    budget_refused(scope)
    return ModelCallError(message, cause_code=CAUSE_BUDGET_EXCEEDED, retriable=False)


def shortfall(state: RunState, need: float, who: str) -> float:
    """What run ``state`` must borrow from its parent before it can hold ``need`` more
    (0.0: it holds enough, or its budget is its own); raises ``budget_exceeded`` when its
    own ceiling cannot hold it."""
    committed = state.committed_usd
    budget = state.budget_usd
    if budget is not None and committed + need > budget + _EPSILON:
        raise refused(
            f"{who} {state.run_id} budget ${budget:.6g}: ${need:.6g} more may be spent and "
            f"${committed:.6g} is spent or held (with its sub-runs)"
        )
    if state.budget_parent_run_id is None:
        return 0.0
    short = committed + need - state.drawn_usd
    return short if short > _EPSILON else 0.0


def drawn_event(usd: float, draw_id: str) -> EventInput:
    return EventInput(
        type=BUDGET_DRAWN_EVENT_TYPE,
        payload={"usd": usd, "drawId": draw_id},
        occurrence_id=f"budget-draw:{draw_id}",
    )


def _fold(world: Any, run_id: str, fallback: PriceFallback) -> tuple[int, RunState]:
    from little_dist.run_state import materialize_run_state

    events = world.list_events(run_id)
    state = materialize_run_state(events, run_id=run_id, pricing_fallback=fallback)
    return (events[-1].sequence if events else 0), state


def lend(
    world: Any,
    lender: str,
    child: str,
    usd: float,
    fallback: PriceFallback,
    draw_id: str,
    depth: int = 1,
) -> None:
    """Record in ``lender``'s log that it lent ``usd`` to ``child`` (step 1 of the module
    docstring; ``draw_id`` names the loan in both logs), borrowing first from its own parent
    when it must; ``budget_exceeded`` when the tree's budget cannot hold it."""
    if depth > MAX_DEPTH:
        raise refused(f"run {child}: its budget tree is deeper than {MAX_DEPTH} runs")
    for _ in range(TRIES):
        last, state = _fold(world, lender, fallback)
        if state.status in ("completed", "failed"):
            raise refused(f"run {lender}, whose budget sub-run {child} spends, has ended")
        if not state.budget_tree:
            return  # (a parent without a budget: nothing to count against)
        short = shortfall(state, usd, "run")
        if short:
            parent = state.budget_parent_run_id
            assert parent is not None
            own_id = uuid.uuid4().hex
            lend(world, parent, lender, short, fallback, own_id, depth + 1)
            world.append_batch(lender, [drawn_event(short, own_id)], signal=False)
            continue
        loan = EventInput(
            type=BUDGET_LENT_EVENT_TYPE,
            payload={"childRunId": child, "usd": usd, "drawId": draw_id},
            occurrence_id=f"budget-lend:{draw_id}",
        )
        try:
            world.append_batch(lender, [loan], expected_sequence=last, signal=False)
            return
        except SequenceConflictError:
            continue
    raise ModelCallError(
        f"run {lender}: could not lend to sub-run {child} (its log kept changing)",
        cause_code="step_failed",
        retriable=True,
    )
