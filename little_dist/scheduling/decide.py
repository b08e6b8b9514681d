"""``decide(ctx, state)``: the events to append and the attempts to dispatch next.

One call: nothing to do for a terminal run; ``RunFailed{cancelled}`` when a cancel was
requested; ``RunFailed`` when the version cannot run (ambiguous terminal steps, a terminal
step whose output mode contradicts the workflow output schema); otherwise the top-level
scope is replayed (see :mod:`little_dist.scheduling.settle`), decisions and parallel steps
are advanced inline, worker steps are scheduled and dispatched, and a scope that is done or
failed for good ends the run: ``RunCompleted{workflowVersionId, output, outputRef?,
terminalStepPath}`` — the terminal step's output, validated against the workflow output
schema — or ``RunFailed{workflowVersionId, error}``; both with occurrence id ``run-end``.

With :class:`~little_dist.scheduling.types.Claims` (a fleet worker's look), the branch ends
and refills another owner holds are left out, refills go in lanes, and the decision says
which attempt its events may ride with (:attr:`Decision.rider`): what runs next is decided
here, and the caller applies it.

Pure and deterministic: the same state (and claims) gives the same events with the same
occurrence ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from little_dist import occurrences
from little_dist.events import SCHEDULE_EVENT_TYPES, EventInput
from little_dist.run_state import RUN_ENDED, RunState
from little_dist.scheduling.drive import drive_scope
from little_dist.scheduling.env import Env
from little_dist.scheduling.parallel import drive_parallel
from little_dist.scheduling.settle import FrontierItem, ScopeOutcome
from little_dist.scheduling.step_graph import plan_for, schema_error
from little_dist.scheduling.types import Claims, Decision, RunContext, StepDispatch

__all__ = ["decide"]

_NOTHING = Decision(events=(), dispatch=(), done=False)
_DONE = Decision(events=(), dispatch=(), done=True)


def _fail_run(env: Env, error: Any) -> Decision:
    final = {**error, "retriable": False} if isinstance(error, Mapping) else error
    env.emit(
        "RunFailed", {"workflowVersionId": env.ctx.version.id, "error": final}, occurrences.RUN_END
    )
    return Decision(tuple(env.events), (), True)


def _terminal_path(env: Env, outcome: ScopeOutcome) -> str | None:
    """Upstream's terminal step path: the DAG's final step, else the last non-decision step."""
    final = env.plan.top.final_step
    if final is None:
        return outcome.last_path
    if not final.multi_visit:
        return final.id if env.lookup(final.id) is not None else None
    last = None
    for visit in range(final.max_visits):
        view = env.lookup(final.path("", visit))
        if view is None or view.status != "completed":
            break
        last = final.path("", visit)
    return last


def _complete_run(env: Env, outcome: ScopeOutcome) -> Decision:
    path = _terminal_path(env, outcome)
    view = env.lookup(path) if path is not None else None
    if (
        path is None
        or view is None
        or view.status != "completed"
        or not (view.has_output or view.output_ref)
    ):
        return _fail_run(
            env, {"name": "Error", "message": "Completed run is missing a final output artifact."}
        )
    payload: dict[str, Any] = {"workflowVersionId": env.ctx.version.id}
    if view.has_output:
        problem = schema_error(env.plan, env.plan.output_schema, view.output)
        if problem is not None:
            return _fail_run(
                env,
                {
                    "name": "StepSchemaError",
                    "message": f"Workflow output does not match schema: {problem}",
                    "causeCode": "step_schema_error",
                },
            )
        payload["output"] = view.output
    if view.output_ref is not None:
        payload["outputRef"] = view.output_ref
    payload["terminalStepPath"] = path
    env.emit("RunCompleted", payload, occurrences.RUN_END)
    return Decision(tuple(env.events), (), True)


#: Branch ends: a decision that records them besides one attempt's schedule may still ride
#: with that attempt's first append (a fan-out's refill).
_BRANCH_ENDS: Final = frozenset({"ParallelBranchCompleted", "ParallelBranchFailed"})
#: What a decision records that only puts work in flight (:attr:`Decision.in_flight_only`):
#: a parallel step's attempt starts in the call that schedules its branches.
_IN_FLIGHT: Final = SCHEDULE_EVENT_TYPES | {"StepAttemptStarted"}
#: What a decision records that leaves nothing for another call (:attr:`Decision.last_round`).
_LAST_ROUND: Final = SCHEDULE_EVENT_TYPES | _BRANCH_ENDS


def _rider(events: Sequence[EventInput], scheduled: Sequence[StepDispatch]) -> StepDispatch | None:
    """The attempt ``events`` may ride with: the one attempt they schedule, when they record
    nothing else but branch ends and the scheduling of branches that hold it."""
    if len(scheduled) != 1:
        return None
    rider = scheduled[0]
    path = rider.step_path
    for event in events:
        kind = event.type
        if kind in _BRANCH_ENDS:
            continue
        if kind == "StepScheduled":
            if event.payload.get("stepPath") != path:
                return None
        elif kind == "ParallelBranchScheduled":
            branch = event.payload.get("branchPath")
            if not isinstance(branch, str) or not path.startswith(branch + "."):
                return None
        else:
            return None
    return rider


def decide(ctx: RunContext, state: RunState, claims: Claims | None = None) -> Decision:
    """The events to append (in order, each with an occurrence id) and the attempts to
    dispatch for the run ``ctx.run_id`` in ``state``.

    ``dispatch`` lists every attempt that is due and not started — including those an
    earlier call scheduled — so a restarted caller re-dispatches what it had lost; callers
    skip the ones they already sent. ``claims``: the refills another owner holds, which the
    decision leaves out (:attr:`Decision.left`); none by default.
    """
    if state.status in RUN_ENDED:
        return _DONE
    if state.status != "running":
        return _NOTHING
    plan = plan_for(ctx.version)
    env = Env(ctx, plan, state, claims)
    if ctx.cancel_requested:
        return _fail_run(
            env,
            dict(ctx.cancel_error)
            if ctx.cancel_error is not None
            else {"name": "AbortError", "message": "Run was cancelled.", "causeCode": "cancelled"},
        )
    if plan.top.final_error is not None:
        return _fail_run(env, {"name": "Error", "message": plan.top.final_error})
    if plan.contract_error is not None:
        return _fail_run(
            env,
            {
                "name": "StepSchemaError",
                "message": plan.contract_error,
                "causeCode": "step_schema_error",
            },
        )

    def on_parallel(item: FrontierItem) -> bool:
        return drive_parallel(env, item)

    run = drive_scope(env, plan.top, "", on_other=on_parallel)
    if run.kind == "failed":
        return _fail_run(env, run.error)
    if run.kind == "done":
        return _complete_run(env, run.outcome)
    events = tuple(env.events)
    scheduled = tuple(env.scheduled)
    kinds = {event.type for event in events}
    return Decision(
        events,
        tuple(env.dispatch),
        False,
        env.held_back,
        scheduled,
        tuple(env.left),
        _rider(events, scheduled),
        in_flight_only=kinds <= _IN_FLIGHT,
        last_round=kinds <= _LAST_ROUND,
    )
