"""A chain step's commit round trip put to use: its fold and the next decision meanwhile.

A worker that runs a chain inline commits each step in one round trip, then folds the
commit into the run's tracker and looks at the run (decide, keep the next step). The reply
takes about as long as that fold and decision. :class:`CommitAhead` is the in-flight hook
(:mod:`little_dist.world.in_flight`) the worker sets around such an attempt: once the
commit is sent, the tracker folds the events the commit records as guessed and decides
(:meth:`~little_dist.fleet.run_tracker.RunTracker.fold_ahead`), holding the tracker until
the reply settles it; the look then takes that decision
(:meth:`~little_dist.fleet.run_tracker.RunTracker.decided`). A reply that recorded anything
else (another writer appended in between, the fence or the run's end refused it) drops
what was folded ahead: the next catch-up reads the log again, as after any broken fold.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from little_dist.events import Event
from little_dist.fleet.dispatch import decision_of

if TYPE_CHECKING:
    from little_dist.fleet.run_tracker import RunTracker

__all__ = ["CommitAhead"]


class CommitAhead:
    """The in-flight hook of one attempt whose end's occurrence id is ``end``: only the
    append that records it (the commit) is folded ahead."""

    def __init__(self, tracker: RunTracker, end: str) -> None:
        self._tracker = tracker
        self._end = end
        self._holding = False

    def sent(self, expected: Sequence[Event]) -> None:
        if self._holding or not any(event.occurrence_id == self._end for event in expected):
            return
        self._holding = True  # (settled releases the tracker whatever fold_ahead did)
        tracker = self._tracker
        ahead = tracker.fold_ahead(expected)
        if ahead is not None:
            ctx, state, claims = ahead
            # (the context as fold_ahead read it: the tracker is held by this thread)
            decision = decision_of(tracker, state, claims, context=ctx)
            if decision is not None:
                tracker.note_decided(ctx, state, claims, decision)

    def settled(self, confirmed: bool) -> None:
        if self._holding:
            self._holding = False
            self._tracker.settle(confirmed)
