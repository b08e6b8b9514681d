"""The working set of one ``decide`` call: the state, what this call has decided so far, caches.

A call may complete steps itself (decisions, parallel steps) and keep scheduling from there;
:class:`Virtual` records stand in for those steps until the events are folded, through an
overlay the lookups consult first. Events are collected with their occurrence ids (a repeat
within the call is dropped), dispatches in the order they were found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from little_dist.events import EventInput
from little_dist.run_state import RunState
from little_dist.scheduling.context import (
    Branch,
    BranchResolutionError,
    StepView,
    branches_of,
    build_context,
    scope_steps_root,
)
from little_dist.scheduling.policy import GiveUp, NextAttempt, next_action, not_before_ms
from little_dist.scheduling.step_graph import StepPlan, WorkflowPlan
from little_dist.scheduling.types import Claims, DispatchKind, RunContext, StepDispatch

__all__ = ["Env", "Virtual", "VirtualAttempt"]


@dataclass(frozen=True)
class VirtualAttempt:
    status: str
    error: Any = None


@dataclass(frozen=True)
class Virtual:
    """A step state this call has just decided (its events are not folded yet)."""

    status: str
    attempts: tuple[Any, ...]
    has_output: bool = False
    output: Any = None
    output_ref: str | None = None
    error: Any = None
    artifact_refs: tuple[str, ...] = ()

    @classmethod
    def ended(
        cls,
        previous: StepView | None,
        *,
        output: Any = None,
        has_output: bool = False,
        error: Any = None,
    ) -> Virtual:
        """``previous``'s attempts plus one finished attempt (completed unless ``error``)."""
        earlier = tuple(previous.attempts) if previous is not None else ()
        if earlier and earlier[-1].status == "running":
            earlier = earlier[:-1]
        status = "failed" if error is not None else "completed"
        return cls(
            status=status,
            attempts=(*earlier, VirtualAttempt(status, error)),
            has_output=has_output,
            output=output,
            error=error,
        )


@dataclass
class Env:
    """One decide call's state, overlay, output buffers and policy."""

    ctx: RunContext
    plan: WorkflowPlan
    state: RunState
    #: Refills another owner holds (see :class:`~little_dist.scheduling.types.Claims`).
    claims: Claims | None = None
    overlay: dict[str, StepView] = field(default_factory=dict)
    events: list[EventInput] = field(default_factory=list)
    dispatch: list[StepDispatch] = field(default_factory=list)
    _occurrences: set[str] = field(default_factory=set)
    #: Calls of :meth:`emit`, repeats included (the branch memo keeps only drives that made none).
    emit_calls: int = 0
    #: Branches held back by ``ctx.max_in_flight`` (see :attr:`Decision.held_back`).
    held_back: int = 0
    #: The dispatches whose ``StepScheduled`` this call emitted (:attr:`Decision.scheduled`).
    scheduled: list[StepDispatch] = field(default_factory=list)
    #: Branches left to their owners under ``claims`` (:attr:`Decision.left`).
    left: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        steps = self.state.steps
        overlay = self.overlay

        def lookup(path: str) -> StepView | None:
            if overlay:
                found = overlay.get(path)
                if found is not None:
                    return found
            return steps.get(path)

        self.lookup = lookup

    def emit(self, event_type: str, payload: dict[str, Any], occurrence_id: str) -> None:
        self.emit_calls += 1
        if occurrence_id in self._occurrences:
            return
        self._occurrences.add(occurrence_id)
        self.events.append(
            EventInput(type=event_type, payload=payload, occurrence_id=occurrence_id)
        )

    def send(
        self, step: StepPlan, path: str, attempt: int, kind: DispatchKind, *, new: bool = False
    ) -> None:
        """Dispatch an attempt; ``new``: this call emitted its ``StepScheduled``."""
        view = self.lookup(path) if attempt > 1 else None
        dispatch = StepDispatch(
            run_id=self.ctx.run_id,
            step_path=path,
            step_id=step.id,
            attempt=attempt,
            role="fixer" if kind == "fix_step" else "worker",
            kind=kind,
            parent_run_id=self.ctx.parent_run_id,
            not_before_ms=None if view is None else not_before_ms(view.attempts[: attempt - 1]),
        )
        self.dispatch.append(dispatch)
        if new:
            self.scheduled.append(dispatch)

    def policy(self, step: StepPlan, view: StepView) -> NextAttempt | GiveUp:
        return next_action(
            step,
            view.attempts,
            default_max_attempts=self.ctx.default_max_attempts,
            max_crash_retries=self.ctx.max_crash_retries,
        )

    def top_context(self, step: StepPlan) -> dict[str, Any]:
        steps = scope_steps_root(self.plan.top, "", self.lookup)
        return build_context(self.plan.lwir, self.ctx.run_input, step, steps)

    def branches(self, step: StepPlan, path: str, attempt: int) -> list[Branch]:
        """The branch list of a parallel step attempt (resolved once per run context)."""
        return branches_of(self.ctx, self.plan, step, path, attempt, lambda: self.top_context(step))

    def completed_top(self, ids: Sequence[str], shadowed: Sequence[str]) -> frozenset[str]:
        """Which of ``ids`` (top-level steps) are completed, minus ids a branch step shadows."""
        done = []
        for step_id in ids:
            if step_id in shadowed:
                continue
            view = self.lookup(step_id)
            if view is not None and view.status == "completed":
                done.append(step_id)
        return frozenset(done)


__all__ += ["BranchResolutionError"]
