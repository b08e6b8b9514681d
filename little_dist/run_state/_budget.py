"""A run's share of a budget tree, folded (pure): what it drew from its parent, what it lent
its children, what they spent in the end, and what its unpriced calls held.

A child run of a budgeted parent (``budgetFromParent`` in its ``RunStarted``) has no money
of its own: each model call whose worst case its funds cannot hold first borrows the
shortfall from its parent (``little.budget.lent`` in the parent's log, ``little.budget.drawn``
in its own; see :mod:`little_dist.budget_tree`). The parent counts a child at what it lent
it until ``little.subrun.ended`` records the child's final spend (``spentUsd``), which then
replaces it: whatever the child held and did not spend returns to the parent.

A budgeted call whose end the fold cannot price (its model's rates unknown to whoever
folds) counts at the worst case it reserved (``unpriced``): never less than it may have cost.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EMPTY_LEDGER", "BudgetLedger"]


class BudgetLedger:
    """Copy-on-write by the builder (:meth:`copy` before a change of a shared one)."""

    __slots__ = ("drawn", "final", "lent", "parent", "unpriced")

    def __init__(self) -> None:
        #: The parent run this run borrows from (``None``: its budget, if any, is its own).
        self.parent: str | None = None
        #: USD borrowed from the parent so far.
        self.drawn = 0.0
        #: child run id -> USD lent to it.
        self.lent: dict[str, float] = {}
        #: child run id -> its final spend (``little.subrun.ended`` ``spentUsd``).
        self.final: dict[str, float] = {}
        #: USD held by budgeted calls that ended without a price the fold knows.
        self.unpriced = 0.0

    def copy(self) -> BudgetLedger:
        other = BudgetLedger()
        other.parent, other.drawn, other.unpriced = self.parent, self.drawn, self.unpriced
        other.lent, other.final = dict(self.lent), dict(self.final)
        return other

    def sub_runs_usd(self) -> float:
        """What the children count for: their final spend once ended, else what was lent."""
        final, lent = self.final, self.lent
        total = sum(final.get(child, usd) for child, usd in lent.items())
        return total + sum(usd for child, usd in final.items() if child not in lent)

    # -- the fold's handlers (the builder has copied the ledger when shared) --------------

    def on_drawn(self, payload: dict[str, Any]) -> None:
        usd = payload.get("usd")
        if usd.__class__ in (int, float) and usd > 0:
            self.drawn += float(usd)

    def on_lent(self, payload: dict[str, Any]) -> None:
        usd, child = payload.get("usd"), payload.get("childRunId")
        if usd.__class__ in (int, float) and usd > 0 and child.__class__ is str:
            self.lent[child] = self.lent.get(child, 0.0) + float(usd)

    def on_sub_run_ended(self, payload: dict[str, Any]) -> None:
        spent, child = payload.get("spentUsd"), payload.get("childRunId")
        if spent.__class__ in (int, float) and spent >= 0 and child.__class__ is str:
            self.final.setdefault(child, float(spent))


#: The ledger of a run outside any budget tree (never changed: copied first).
EMPTY_LEDGER = BudgetLedger()


def ledger_touches(payload: dict[str, Any]) -> bool:
    """Whether a ``little.subrun.ended`` payload changes a ledger (it records a spend)."""
    return "spentUsd" in payload
