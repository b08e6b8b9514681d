"""The top scope's readiness, kept across decisions: what is completed, what is ready.

Why: :func:`~little_dist.scheduling.settle.settle` replays a scope over every step on every
call, so a chain of N steps cost O(N²) to schedule. For the top scope of a workflow without
decisions (the common shape), readiness only changes where the fold wrote a step, and the
state's journal (:mod:`little_dist.run_state._journal`) names those paths: a
:class:`DagIndex` is brought up to date with them and yields the same outcome as the full
replay (``_settle_dag``) at a cost that follows the changes and the ready steps, not the size
of the workflow.

The index is a cache held by the state's journal (one per lineage of states); it is derived
from the states only (rebuilt from scratch when it cannot follow: another plan, an older
state, a step that stops being completed), so ``decide`` stays a function of its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from little_dist.run_state import RunState
from little_dist.scheduling.context import StepView
from little_dist.scheduling.step_graph import ScopePlan

__all__ = ["DagIndex", "Readiness", "readiness_for"]

_COMPLETED: Final = "completed"
Lookup: TypeAlias = Callable[[str], StepView | None]


class DagIndex:
    """Readiness of one scope's steps (indices in LWIR order) as of ``position`` journal
    entries: ``completed``, ``missing`` (per step, needs not completed, counted as
    :func:`settle` counts them), ``ready`` (not completed, nothing missing) and ``last`` (the
    highest completed index, -1 for none)."""

    __slots__ = ("completed", "last", "missing", "path_index", "position", "ready", "scope")

    def __init__(self, scope: ScopePlan, path_index: Mapping[str, int], position: int) -> None:
        self.scope = scope
        self.path_index = path_index
        self.position = position
        self.completed: set[int] = set()
        self.missing: list[int] = [len(step.needs) for step in scope.steps]
        self.ready: set[int] = {i for i, count in enumerate(self.missing) if count == 0}
        self.last = -1

    @classmethod
    def build(
        cls,
        scope: ScopePlan,
        lookup: Lookup,
        position: int,
        path_index: Mapping[str, int] | None = None,
    ) -> DagIndex:
        """The index of ``scope`` with the steps ``lookup`` finds (O(steps))."""
        if path_index is None:
            path_index = {step.path("", 0): step.index for step in scope.steps}
        index = cls(scope, path_index, position)
        for step in scope.steps:
            view = lookup(step.path("", 0))
            if view is not None and view.status == _COMPLETED:
                index._complete(step.index)
        return index

    def copy(self) -> DagIndex:
        clone = DagIndex.__new__(DagIndex)
        clone.scope = self.scope
        clone.path_index = self.path_index
        clone.position = self.position
        clone.completed = set(self.completed)
        clone.missing = list(self.missing)
        clone.ready = set(self.ready)
        clone.last = self.last
        return clone

    def _complete(self, at: int) -> None:
        steps = self.scope.steps
        by_id = self.scope.by_id
        self.completed.add(at)
        self.ready.discard(at)
        if at > self.last:
            self.last = at
        missing = self.missing
        for dependent in steps[at].dependents:
            where = by_id[dependent].index
            missing[where] -= 1
            if missing[where] == 0 and where not in self.completed:
                self.ready.add(where)

    def apply(self, paths: Iterable[str], lookup: Lookup) -> bool:
        """Take the current records of ``paths`` (the journal's news); False when a step
        stopped being completed (the caller rebuilds: rare, and ``last`` cannot follow)."""
        path_index = self.path_index
        completed = self.completed
        for path in paths:
            at = path_index.get(path)
            if at is None:
                continue
            view = lookup(path)
            done = view is not None and view.status == _COMPLETED
            if done == (at in completed):
                continue
            if not done:
                return False
            self._complete(at)
        return True


@dataclass(frozen=True)
class Readiness:
    """What a scope's index says for one decision: ``ready`` step indices ascending, how
    many steps are ``completed``, and the highest completed index (``last``, -1 for none)."""

    ready: list[int]
    completed: int
    last: int


def _readiness(index: DagIndex) -> Readiness:
    return Readiness(sorted(index.ready), len(index.completed), index.last)


def readiness_for(
    scope: ScopePlan, state: RunState, overlay: Mapping[str, StepView]
) -> Readiness | None:
    """Readiness of the top ``scope`` for ``state`` seen through ``overlay`` (the steps this
    call decided), or ``None`` when the scope is not one the index serves (decisions, or
    two steps with one id). Advances the index the state's journal keeps (or rebuilds it
    when it cannot follow)."""
    if scope.has_decisions or len(scope.by_id) != len(scope.steps):
        return None
    journal, length = state.journal
    steps = state.steps.get
    with journal.lock:
        index = journal.memo
        if isinstance(index, DagIndex) and index.scope is scope and index.position <= length:
            news = dict.fromkeys(journal.paths[index.position : length])
            if not index.apply(news, steps):
                index = DagIndex.build(scope, steps, length, index.path_index)
            index.position = length
        else:
            index = DagIndex.build(scope, steps, length)
        journal.memo = index
        touched = [path for path in overlay if path in index.path_index]
        if not touched:
            return _readiness(index)
        own = index.copy()

    def lookup(path: str) -> StepView | None:
        found = overlay.get(path)
        return found if found is not None else state.steps.get(path)

    if not own.apply(touched, lookup):
        own = DagIndex.build(scope, lookup, length, index.path_index)
    return _readiness(own)
