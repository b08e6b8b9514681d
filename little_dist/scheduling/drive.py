"""Acting on a scope's frontier: decisions inline, worker steps scheduled and dispatched.

A decision step is pure expression evaluation, so ``decide`` runs it itself — ``StepScheduled``,
``StepAttemptStarted``, ``StepCompleted{output: {chosen}}`` (or ``StepFailed`` when an
expression fails) — and replays the scope again, so a route is followed in the same call.
Every other step gets ``StepScheduled`` the first time and a :class:`StepDispatch` for each
attempt that should run and has not started.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from little_dist import occurrences
from little_dist.expressions import ExpressionError, resolve_value
from little_dist.expressions.jsvalues import truthy
from little_dist.scheduling.context import build_context, scope_steps_root
from little_dist.scheduling.dag_index import readiness_for
from little_dist.scheduling.env import Env, Virtual
from little_dist.scheduling.settle import FrontierItem, ScopeOutcome, settle
from little_dist.scheduling.step_graph import ScopePlan, StepPlan

__all__ = [
    "ScopeRun",
    "attempt_of",
    "drive_scope",
    "emit_attempt_started",
    "emit_scheduled",
    "emit_step_failed",
    "run_decision",
    "schedule_worker",
]

# A scope can complete at most this many decision visits in one call (a guard, never hit by a
# valid LWIR: every loop is bounded by maxVisits).
_MAX_INLINE_ROUNDS: Final = 100_000
#: The top scope is followed by its readiness index (``dag_index``) above this many steps.
_INDEX_FROM: Final = 8


@dataclass
class ScopeRun:
    """How a scope stands after this call acted on it."""

    kind: Literal["running", "done", "failed"]
    outcome: ScopeOutcome
    error: Any = None
    failed_path: str | None = None


def emit_scheduled(env: Env, step: StepPlan, path: str) -> None:
    env.emit(
        "StepScheduled",
        {"stepPath": path, "stepId": step.id, "uses": step.uses},
        occurrences.scheduled(path),
    )


def emit_attempt_started(env: Env, step: StepPlan, path: str, attempt: int) -> None:
    env.emit(
        "StepAttemptStarted",
        {
            "stepPath": path,
            "stepId": step.id,
            "attempt": attempt,
            "attemptId": f"attempt_{attempt}",
        },
        occurrences.attempt_started(path, attempt),
    )


def emit_step_failed(env: Env, step: StepPlan, path: str, attempt: int, error: Any) -> None:
    env.emit(
        "StepFailed",
        {
            "stepPath": path,
            "stepId": step.id,
            "attempt": attempt,
            "attemptId": f"attempt_{attempt}",
            "error": error,
        },
        occurrences.attempt_ended(path, attempt),
    )


def attempt_of(item: FrontierItem) -> int:
    """The attempt to run (or resume, when one is already running) for a frontier item."""
    if item.state == "running":
        assert item.view is not None
        return len(item.view.attempts)
    assert item.next is not None
    return item.next.attempt


def open_attempt(env: Env, item: FrontierItem) -> int:
    """Schedule/start the item's attempt as needed; returns its number."""
    if item.state == "new":
        emit_scheduled(env, item.step, item.path)
    attempt = attempt_of(item)
    if item.state != "running":
        emit_attempt_started(env, item.step, item.path, attempt)
    return attempt


def run_decision(env: Env, item: FrontierItem, context: dict[str, Any]) -> None:
    """Evaluate a decision step inline and put its result in the overlay."""
    step = item.step
    attempt = open_attempt(env, item)
    chosen: str | None = step.default
    try:
        for when, to in step.cases:
            if truthy(resolve_value(when, context)):
                chosen = to
                break
    except ExpressionError as exc:
        error = {"name": "ExpressionError", "message": str(exc), "retriable": False}
        emit_step_failed(env, step, item.path, attempt, error)
        env.overlay[item.path] = Virtual.ended(item.view, error=error)
        return
    output = {"chosen": chosen}
    env.emit(
        "StepCompleted",
        {
            "stepPath": item.path,
            "stepId": step.id,
            "attempt": attempt,
            "output": output,
            "artifactRefs": [],
            "metadata": {"uses": "decision"},
        },
        occurrences.attempt_ended(item.path, attempt),
    )
    env.overlay[item.path] = Virtual.ended(item.view, output=output, has_output=True)


def schedule_worker(env: Env, item: FrontierItem) -> None:
    """``StepScheduled`` for a new step; a dispatch for an attempt due and not started."""
    if item.state == "running":
        return
    new = False
    if item.state == "new":
        before = len(env.events)
        emit_scheduled(env, item.step, item.path)
        new = len(env.events) > before  # (not a repeat within this call)
    assert item.next is not None
    env.send(item.step, item.path, item.next.attempt, item.next.kind, new=new)


def drive_scope(
    env: Env,
    scope: ScopePlan,
    prefix: str,
    *,
    item: tuple[bool, Any] = (False, None),
    extra_completed: frozenset[str] = frozenset(),
    allowed_top: tuple[str, ...] = (),
    scope_label: str | None = None,
    on_other: Callable[[FrontierItem], bool] | None = None,
) -> ScopeRun:
    """Replay ``scope``, run its ready decisions, and schedule its other frontier steps.

    ``on_other`` handles steps that are neither decisions nor plain workers (parallel steps
    at the top level); it returns True when it completed or failed the step in the overlay,
    which makes the scope replay again.
    """
    # Acted on this call, by (path, attempt): a retry of the same path is a new entry.
    handled: set[tuple[str, int]] = set()
    # (a few steps are replayed faster than an index is kept)
    indexed = (
        scope is env.plan.top
        and not prefix
        and not extra_completed
        and len(scope.steps) > _INDEX_FROM
    )
    for _ in range(_MAX_INLINE_ROUNDS):
        outcome = settle(
            scope,
            prefix,
            env.lookup,
            env.policy,
            extra_completed=extra_completed,
            scope_label=scope_label,
            readiness=readiness_for(scope, env.state, env.overlay) if indexed else None,
        )
        if outcome.failure is not None:
            path, error = outcome.failure
            return ScopeRun("failed", outcome, error, path)
        if outcome.done:
            return ScopeRun("done", outcome)
        progressed = False
        for entry in outcome.frontier:
            key = (entry.path, attempt_of(entry))
            if key in handled:
                continue
            handled.add(key)
            if entry.step.uses == "decision":
                if entry.state != "running" or entry.view is not None:
                    steps = scope_steps_root(
                        scope,
                        prefix,
                        env.lookup,
                        allowed_top=allowed_top,
                        top_lookup=env.lookup if allowed_top else None,
                    )
                    context = build_context(
                        env.plan.lwir, env.ctx.run_input, entry.step, steps, item
                    )
                    run_decision(env, entry, context)
                    progressed = True
            elif on_other is not None and entry.step.parallel is not None:
                progressed = on_other(entry) or progressed
            else:
                schedule_worker(env, entry)
        if not progressed:
            return ScopeRun("running", outcome)
    raise RuntimeError("decide: too many inline decision rounds in one scope")
