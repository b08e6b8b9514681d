"""Where a scope stands: replay upstream's scheduling loop over what the state records.

Upstream runs one scope (the top level, or one parallel branch) as a loop: pick the next
step whose ``needs`` are complete — skipping decision targets while their decision is armed
(its own needs complete) — run it; a decision forces its chosen target next, drops the
other targets, re-queues the target's transitive downstream for another visit, or ends the
scope with ``end``. :func:`settle` replays that loop over a folded state instead of running
it: a picked step whose current visit is completed in the state is applied (its effects
taken) and the replay goes on; one that is not becomes part of the *frontier* — the steps
to schedule, dispatch or wait for now.

Two deliberate generalisations make the loop concurrent (upstream is sequential):

- every ready step is on the frontier at once, not only the first in LWIR order;
- when a decision loops back, the target and its downstream stop counting as complete for
  ``needs`` until they complete again, so a loop body's later steps wait for the new visit
  (upstream gets this from running one step at a time);
- a decision target that the decision does not itself (transitively) need — a route, not a
  loop entry — waits for routing even before the decision is armed (upstream reaches the
  decision first only because it runs steps one at a time in LWIR order).

Completed steps are applied before incomplete ones are set aside, so a decision that ended or
rerouted the scope is seen before anything it made moot could be scheduled. A scope without
decisions takes a direct path (one pass over its steps).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from little_dist.scheduling.context import StepLookup, StepView
from little_dist.scheduling.dag_index import Readiness
from little_dist.scheduling.policy import SUSPENDED, GiveUp, NextAttempt
from little_dist.scheduling.step_graph import END, ScopePlan, StepPlan

__all__ = ["FrontierItem", "ScopeOutcome", "settle"]

ItemState = Literal["new", "ready", "running"]
Policy = Callable[[StepPlan, StepView], NextAttempt | GiveUp]
_COMPLETED: Final = "completed"


@dataclass
class FrontierItem:
    """A step visit to act on: ``new`` (never scheduled), ``ready`` (attempt ``next`` should
    run: scheduled and not started, or a retry), or ``running`` (an attempt is in flight)."""

    step: StepPlan
    path: str
    visit: int
    view: StepView | None
    state: ItemState
    next: NextAttempt | None = None


@dataclass
class ScopeOutcome:
    """The replay's result for one scope."""

    frontier: list[FrontierItem] = field(default_factory=list)
    failure: tuple[str, Any] | None = None
    done: bool = False
    ended: bool = False
    last_path: str | None = None


def _error(name: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "message": message, **extra, "retriable": False}


def _classify(
    step: StepPlan, path: str, visit: int, view: StepView | None, policy: Policy
) -> FrontierItem | tuple[str, Any]:
    """The frontier item for an incomplete visit, or ``(path, error)`` if it failed for good."""
    if view is None:
        return FrontierItem(step, path, visit, None, "new", NextAttempt(1, "execute_step"))
    attempts = view.attempts
    if view.status == "failed":
        action = policy(step, view)
        if isinstance(action, GiveUp):
            return (path, action.error)
        return FrontierItem(step, path, visit, view, "ready", action)
    if attempts and attempts[-1].status == "running":
        return FrontierItem(step, path, visit, view, "running")
    if attempts and attempts[-1].status == SUSPENDED:
        # Waiting for sub-runs: in flight until the last of them ended, then due again.
        if getattr(view, "waiting_for", None):
            return FrontierItem(step, path, visit, view, "running")
        action = policy(step, view)
        if isinstance(action, GiveUp):
            return (path, action.error)
        return FrontierItem(step, path, visit, view, "ready", action)
    return FrontierItem(
        step, path, visit, view, "ready", NextAttempt(len(attempts) + 1, "execute_step")
    )


def _overshoot(step: StepPlan, path: str) -> tuple[str, Any]:
    if step.multi_visit:
        message = f"Step '{step.id}' has reached its maxVisits cap of {step.max_visits}."
        return path, _error(
            "MaxVisitsExceededError",
            message,
            causeCode="max_visits_exceeded",
            failedStepPath=path,
        )
    message = f"Step '{step.id}' has a non-terminal attempt and cannot be retried safely."
    return path, _error("RuntimeIntegrityError", message)


# Long on purpose: one loop over shared counters (heap, missing, visits, forced) on decide's
# hot path, in upstream's replay order; split, its parts would pass those around.
def settle(
    scope: ScopePlan,
    prefix: str,
    lookup: StepLookup,
    policy: Policy,
    *,
    extra_completed: frozenset[str] = frozenset(),
    scope_label: str | None = None,
    readiness: Readiness | None = None,
) -> ScopeOutcome:
    """Replay ``scope`` (paths under ``prefix``) against ``lookup``; see the module docs.

    ``readiness``: the top scope's readiness as its index keeps it
    (:mod:`little_dist.scheduling.dag_index`), which spares the replay of every step.
    """
    if readiness is not None:
        return _settle_ready(scope, readiness, lookup, policy)
    if not scope.has_decisions:
        return _settle_dag(scope, prefix, lookup, policy, extra_completed, scope_label)
    steps = scope.steps
    by_id = scope.by_id
    completed: set[str] = set(extra_completed)
    missing = {s.id: sum(1 for need in s.needs if need not in completed) for s in steps}
    remaining = set(by_id)
    visits = dict.fromkeys(by_id, 0)
    heap = [s.index for s in steps if missing[s.id] == 0]
    heapq.heapify(heap)
    forced: deque[str] = deque()
    candidates: dict[str, FrontierItem] = {}
    forced_items: dict[str, FrontierItem] = {}
    outcome = ScopeOutcome()

    def armed(step: StepPlan) -> bool:
        # Upstream's activeDecisionTargetIds, plus: route targets always wait for routing.
        return step.awaits_routing or any(missing[c] == 0 for c in step.controllers)

    while True:
        if forced:
            step = by_id[forced.popleft()]
            remaining.discard(step.id)
            candidates.pop(step.id, None)
            was_forced = True
        else:
            picked: StepPlan | None = None
            while heap:
                candidate = steps[heapq.heappop(heap)]
                if (
                    candidate.id in candidates
                    or candidate.id not in remaining
                    or missing[candidate.id]
                    or armed(candidate)
                ):
                    continue
                picked = candidate
                break
            if picked is None:
                break
            step = picked
            was_forced = False
        visit = visits[step.id]
        if visit >= step.max_visits:
            outcome.failure = _overshoot(step, step.path(prefix, visit))
            return outcome
        path = step.path(prefix, visit)
        view = lookup(path)
        if view is None or view.status != _COMPLETED:
            item = _classify(step, path, visit, view, policy)
            if isinstance(item, tuple):
                outcome.failure = item
                return outcome
            (forced_items if was_forced else candidates)[step.id] = item
            continue
        remaining.discard(step.id)
        visits[step.id] = visit + 1
        if step.uses != "decision":
            outcome.last_path = path
            if step.id not in completed:
                completed.add(step.id)
                for dependent in step.dependents:
                    missing[dependent] -= 1
                    if missing[dependent] == 0 and dependent in remaining:
                        heapq.heappush(heap, by_id[dependent].index)
            continue
        output = view.output if view.has_output else None
        chosen = output.get("chosen") if isinstance(output, Mapping) else None
        if type(chosen) is not str:
            outcome.failure = (
                path,
                _error(
                    "Error", f"Decision step '{step.id}' did not produce a valid chosen target."
                ),
            )
            return outcome
        for target in step.targets:
            if target != chosen:
                remaining.discard(target)
                candidates.pop(target, None)
        if chosen == END:
            outcome.ended = outcome.done = True
            return outcome
        target_step = by_id.get(chosen)
        if target_step is None:
            where = f" in branch '{scope_label}'" if scope_label else " in workflow steps"
            outcome.failure = (
                path,
                _error("Error", f"Decision target '{chosen}' not found{where}."),
            )
            return outcome
        forced.append(chosen)
        # The loop body runs again: its steps no longer count as complete for `needs`.
        for stale in (chosen, *target_step.downstream):
            if stale in completed:
                completed.discard(stale)
                for dependent in by_id[stale].dependents:
                    missing[dependent] += 1
        for again in target_step.downstream:
            remaining.add(again)
            candidates.pop(again, None)
    frontier = list(forced_items.values())
    for step_id, item in candidates.items():
        step = by_id[step_id]
        still_ready = step_id in remaining and not missing[step_id] and not armed(step)
        if still_ready or item.view is not None:
            frontier.append(item)
    outcome.frontier = frontier
    if not frontier:
        if remaining:
            where = f" for '{scope_label}'" if scope_label else ""
            kind = "branch step" if scope_label else "step"
            outcome.failure = (
                prefix.rstrip(".") or "",
                _error(
                    "Error",
                    f"No runnable LWIR {kind} found{where}; dependencies are incomplete or cyclic.",
                ),
            )
        else:
            outcome.done = True
    return outcome


def _settle_ready(
    scope: ScopePlan, readiness: Readiness, lookup: StepLookup, policy: Policy
) -> ScopeOutcome:
    """:func:`_settle_dag` for the top scope (prefix ``""``, nothing extra completed) from
    its index: the same outcome, at the cost of the ready steps."""
    outcome = ScopeOutcome()
    steps = scope.steps
    if readiness.last >= 0:
        outcome.last_path = steps[readiness.last].path("", 0)
    final = scope.final_step
    if final is not None:
        path = final.path("", 0)
        view = lookup(path)
        if view is not None and view.status == _COMPLETED:
            outcome.last_path = path
    frontier = outcome.frontier
    for at in readiness.ready:
        step = steps[at]
        path = step.path("", 0)
        item = _classify(step, path, 0, lookup(path), policy)
        if isinstance(item, tuple):
            outcome.failure = item
            return outcome
        frontier.append(item)
    if not frontier:
        if readiness.completed < len(steps):
            outcome.failure = (
                "",
                _error(
                    "Error",
                    "No runnable LWIR step found; dependencies are incomplete or cyclic.",
                ),
            )
        else:
            outcome.done = True
    return outcome


def _settle_dag(
    scope: ScopePlan,
    prefix: str,
    lookup: StepLookup,
    policy: Policy,
    extra_completed: frozenset[str],
    scope_label: str | None,
) -> ScopeOutcome:
    """A scope without decisions: each step has one visit; ready = needs all complete."""
    outcome = ScopeOutcome()
    completed: set[str] = set(extra_completed)
    views: list[tuple[str, StepView | None]] = []
    for step in scope.steps:
        path = step.path(prefix, 0)
        view = lookup(path)
        views.append((path, view))
        if view is not None and view.status == _COMPLETED:
            completed.add(step.id)
            outcome.last_path = path
    final = scope.final_step
    if final is not None and final.id in completed:
        outcome.last_path = views[final.index][0]
    frontier = outcome.frontier
    for step, (path, view) in zip(scope.steps, views, strict=True):
        if step.id in completed:
            continue
        if not all(need in completed for need in step.needs):
            continue
        item = _classify(step, path, 0, view, policy)
        if isinstance(item, tuple):
            outcome.failure = item
            return outcome
        frontier.append(item)
    if not frontier:
        if not all(step.id in completed for step in scope.steps):
            where = f" for '{scope_label}'" if scope_label else ""
            kind = "branch step" if scope_label else "step"
            outcome.failure = (
                prefix.rstrip("."),
                _error(
                    "Error",
                    f"No runnable LWIR {kind} found{where}; dependencies are incomplete or cyclic.",
                ),
            )
        else:
            outcome.done = True
    return outcome
