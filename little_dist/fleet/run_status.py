"""A run at a glance: :class:`RunStatusView`, what ``Client.status`` and ``little status``
show of a run's folded state (its steps, output or error, cost with its late record)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from little_dist.pricing import PriceFallback, merge_usage_totals
from little_dist.report.failure import RunFailure, run_failure
from little_dist.report.model import calls_usage
from little_dist.run_limits import RunLimits, iso_ms
from little_dist.run_state import RUN_ENDED, RunState

__all__ = ["INTERRUPTED", "RunStatusView"]


@dataclass(frozen=True)
class RunStatusView:
    """A run at a glance: its folded state, summarized (``to_json`` for machines)."""

    run_id: str
    status: str
    workflow_version_id: str | None
    event_count: int
    started_at: str | None
    finished_at: str | None
    steps: Mapping[str, str] = field(default_factory=dict)
    output: Any = None
    has_output: bool = False
    error: Any = None
    cost_usd: float | None = None
    cancel_requested: bool = False
    planning: bool = False
    failure: RunFailure | None = None
    late_calls: int = 0
    #: When the run ends at the latest (ISO 8601) and with which cause (``timeout``,
    #: ``deadline_exceeded``), from its ``little.run.limits`` (:mod:`little_dist.run_limits`).
    deadline: str | None = None
    deadline_cause: str | None = None
    #: The run's dollar budget, and what its log says it spent and holds (``None``: no
    #: budget; see :mod:`little_dist.budgets`).
    budget_usd: float | None = None
    spent_usd: float = 0.0
    reserved_usd: float = 0.0
    #: What its sub-runs count against the budget (:mod:`little_dist.harness.budget_tree`).
    sub_runs_usd: float = 0.0
    #: The tool calls it waits for a person's decision on
    #: (:func:`~little_dist.fleet.run_waits.waiting_for_approval`).
    waiting: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(
        cls,
        state: RunState,
        *,
        cancel_requested: bool,
        planning: bool,
        late: Sequence[Any] = (),
        pricing_fallback: PriceFallback | None = None,
        limits: RunLimits | None = None,
        waiting: Sequence[Mapping[str, Any]] = (),
    ) -> RunStatusView:
        """``late``: the run's late record (:meth:`World.late_events`), whose model calls
        count in the cost (priced as the state was: ``pricing_fallback``)."""
        cost = state.usage.cost_usd
        late_usage = calls_usage(late, fallback=pricing_fallback)
        late_calls = late_usage.priced_calls + late_usage.unpriced_calls
        if late_calls:
            cost = merge_usage_totals(state.usage, late_usage).cost_usd
        at = None if limits is None else limits.deadline_at_ms
        return cls(
            run_id=state.run_id,
            status=state.status,
            workflow_version_id=state.workflow_version_id,
            event_count=state.event_count,
            started_at=state.started_at,
            finished_at=state.finished_at,
            steps={path: _step_word(state, step.status) for path, step in state.steps.items()},
            output=state.output if state.has_output else None,
            has_output=state.has_output,
            error=state.error if state.has_error else None,
            cost_usd=cost,
            cancel_requested=cancel_requested,
            planning=planning,
            failure=run_failure(state),
            late_calls=late_calls,
            deadline=None if at is None else iso_ms(at),
            deadline_cause=None if limits is None or at is None else limits.cause_code,
            budget_usd=state.budget_usd,
            spent_usd=state.spent_usd,
            reserved_usd=state.reserved_usd,
            sub_runs_usd=state.sub_runs_usd,
            waiting=tuple(waiting),
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "runId": self.run_id,
            "status": self.status,
            "workflowVersionId": self.workflow_version_id,
            "eventCount": self.event_count,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "steps": dict(self.steps),
            # (rounded below float noise: 0.0002823, not 0.00028230000000000003)
            "costUsd": None if self.cost_usd is None else round(self.cost_usd, 10),
            "cancelRequested": self.cancel_requested,
            "planning": self.planning,
        }
        if self.late_calls:
            data["lateCalls"] = self.late_calls
        if self.deadline is not None:
            data["deadline"] = {"at": self.deadline, "causeCode": self.deadline_cause}
        if self.budget_usd is not None:
            data["budget"] = {
                "budgetUsd": self.budget_usd,
                "spentUsd": round(self.spent_usd, 10),
                "reservedUsd": round(self.reserved_usd, 10),
            }
            if self.sub_runs_usd:
                data["budget"]["subRunsUsd"] = round(self.sub_runs_usd, 10)
        if self.waiting:
            data["waiting"] = [dict(wait) for wait in self.waiting]
        if self.has_output:
            data["output"] = self.output
        if self.error is not None:
            data["error"] = self.error
        if self.failure is not None:
            data["failure"] = self.failure.to_json()
        return data


#: What the status calls a step that was scheduled or running when its run ended: its log
#: took nothing of it after the end (the fold, as upstream's, leaves it running).
INTERRUPTED: Final = "interrupted"


def _step_word(state: RunState, status: str) -> str:
    if state.status in RUN_ENDED and status in ("pending", "running"):
        return INTERRUPTED
    return status
