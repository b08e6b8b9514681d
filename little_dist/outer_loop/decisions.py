"""The supervisor's decisions and what the outer loop tells the planner and the supervisor
(pure: no IO, no clock).

A decision is upstream's ``SuperviseDecision``: ``{"kind": "done", "finalOutput": ...}``
(the loop ends with that output) or ``{"kind": "continue", "promptNote": "..."?}`` (plan
again; the note is shown to the next cycle's planner). It is recorded on the cycle's run as
``OuterLoopCycleCompleted`` (payload ``{outerLoopId, cycleNumber, supervise}``, occurrence
id :func:`cycle_occurrence_id`), and that event is the truth on resume: a cycle whose event
is recorded never asks the supervisor again.

What the decision cost rides on the same event: a supervisor that reports its model call
(:class:`Supervised`, as :class:`~little_dist.outer_loop.supervisor.ModelSupervisor` does)
adds ``supervisorCall`` ``{model: {provider, modelId}, usage: {...}}`` to the payload (a
field upstream's payload lacks; its readers keep unknown fields). One append records the
decision and its cost together, so a cost is never lost by a crash between them nor counted
twice: a recorded decision is never asked for again. It is priced like any model call
(:func:`supervisor_usage`).

Cycle runs get ids of their own prefix (:func:`cycle_run_id`, ``run_olc_``): the fleet's
scheduler leaves such a run unarchived when it ends (the loop appends the decision to it
afterwards, then archives it; an archived log takes no more events).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.ids import CYCLE_RUN_ID_PREFIX
from little_dist.outer_loop.manifest import CycleSummary, OuterLoopGoal
from little_dist.pricing import (
    ModelIdentity,
    ModelUsage,
    PriceFallback,
    UsageTotals,
    add_priced_call,
    empty_usage_totals,
    price_model_call,
)

__all__ = [
    "CYCLE_COMPLETED",
    "CYCLE_RUN_ID_PREFIX",
    "Continue",
    "Decision",
    "Done",
    "Supervised",
    "SupervisorCall",
    "cycle_completed_payload",
    "cycle_occurrence_id",
    "cycle_run_id",
    "decision_from",
    "decision_payload",
    "outer_loop_context",
    "recorded_decision",
    "recorded_supervisor_call",
    "supervise_state",
    "supervisor_usage",
]

#: Upstream's event type, appended to each cycle's run once its decision is made.
CYCLE_COMPLETED: Final = "OuterLoopCycleCompleted"
#: The prefix of a cycle's run id (see the module docstring).


def cycle_run_id(token: str) -> str:
    """A cycle's run id from a fresh random ``token`` (hex; the caller draws it)."""
    return CYCLE_RUN_ID_PREFIX + token


@dataclass(frozen=True)
class Done:
    """End the loop; ``final_output`` is its output."""

    final_output: Any = None


@dataclass(frozen=True)
class Continue:
    """Run another cycle; ``prompt_note`` (optional) is what its planner is told."""

    prompt_note: str | None = None


Decision = Done | Continue


@dataclass(frozen=True)
class SupervisorCall:
    """The model call a supervisor made for one decision: ``model`` (``{provider,
    modelId}``, as model events record it) and ``usage`` (upstream's token counts)."""

    model: Mapping[str, Any]
    usage: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"model": dict(self.model), "usage": dict(self.usage)}


@dataclass(frozen=True)
class Supervised:
    """A supervisor's answer with what it cost: ``decision`` (a :data:`Decision` or its
    JSON form) and ``call`` (``None``: no model call to report)."""

    decision: Any
    call: SupervisorCall | None = None


def decision_from(value: Any, where: str = "supervisor") -> Decision:
    """A :class:`Done` / :class:`Continue`, or upstream's JSON form of one, as a decision;
    :class:`InvalidInputError` naming ``where`` otherwise."""
    if isinstance(value, Done | Continue):
        return value
    if isinstance(value, Mapping):
        kind = value.get("kind")
        if kind == "done":
            return Done(value.get("finalOutput"))
        if kind == "continue":
            note = value.get("promptNote")
            if note is not None and not isinstance(note, str):
                raise InvalidInputError(f"{where}: promptNote must be a string, got {note!r}")
            return Continue(note)
    shown = repr(value)
    raise InvalidInputError(
        f"{where}: expected a decision {{'kind': 'done', 'finalOutput': ...}} or "
        f"{{'kind': 'continue', 'promptNote': ...}}, got {shown[:200]}"
    )


def decision_payload(decision: Decision) -> dict[str, Any]:
    """The ``supervise`` field of ``OuterLoopCycleCompleted`` (upstream's normalisation: a
    missing ``finalOutput`` is ``null``, an absent note is left out)."""
    if isinstance(decision, Done):
        return {"kind": "done", "finalOutput": decision.final_output}
    if decision.prompt_note is None:
        return {"kind": "continue"}
    return {"kind": "continue", "promptNote": decision.prompt_note}


def cycle_occurrence_id(cycle_number: int) -> str:
    """The occurrence id of cycle ``cycle_number``'s ``OuterLoopCycleCompleted``: a second
    append of it (a resumed loop) records nothing new."""
    return f"outer-loop:cycle:{cycle_number}"


def cycle_completed_payload(
    outer_loop_id: str,
    cycle_number: int,
    decision: Decision,
    call: SupervisorCall | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "outerLoopId": outer_loop_id,
        "cycleNumber": cycle_number,
        "supervise": decision_payload(decision),
    }
    if call is not None:
        payload["supervisorCall"] = call.to_json()
    return payload


def recorded_supervisor_call(payload: Mapping[str, Any]) -> SupervisorCall | None:
    """The ``supervisorCall`` of an ``OuterLoopCycleCompleted`` payload, ``None`` when it
    has none (a supervisor that reported no model call)."""
    call = payload.get("supervisorCall")
    if not isinstance(call, Mapping):
        return None
    model, usage = call.get("model"), call.get("usage")
    if not isinstance(usage, Mapping):
        return None
    return SupervisorCall(model if isinstance(model, Mapping) else {}, usage)


def supervisor_usage(
    payloads: Iterable[Mapping[str, Any]], *, fallback: PriceFallback | None = None
) -> UsageTotals:
    """The tokens and dollars of the supervisor calls recorded in ``payloads``
    (``OuterLoopCycleCompleted`` payloads), priced as the run-state fold prices a model
    call (registry rates, then ``fallback``)."""
    totals = empty_usage_totals()
    for payload in payloads:
        call = recorded_supervisor_call(payload)
        if call is None:
            continue
        priced = price_model_call(
            ModelIdentity.from_payload(call.model),
            ModelUsage.from_payload(call.usage),
            fallback=fallback,
        )
        totals = add_priced_call(totals, priced)
    return totals


def recorded_decision(events: Iterable[Any], cycle_number: int) -> Decision | None:
    """The decision recorded for cycle ``cycle_number`` in a run's events (any object with
    ``type`` and ``payload``), ``None`` if none is."""
    for event in events:
        if event.type != CYCLE_COMPLETED:
            continue
        payload = event.payload
        if payload.get("cycleNumber") == cycle_number and isinstance(
            payload.get("supervise"), Mapping
        ):
            return decision_from(payload["supervise"], f"recorded {CYCLE_COMPLETED}")
    return None


def _json_value(value: Any) -> Any:
    # What a reader of the stored JSON sees: keys sorted, 1.0 -> 1.
    return json.loads(canonical_json(value))


def outer_loop_context(
    cycle_number: int, max_cycles: int, prior: Sequence[CycleSummary]
) -> dict[str, Any]:
    """Upstream's ``outerLoop`` of cycle ``cycle_number``'s orchestration request."""
    return {
        "cycleNumber": cycle_number,
        "maxCycles": max_cycles,
        "isFinalCycle": cycle_number == max_cycles,
        "priorCycles": [
            {
                "cycleNumber": cycle.cycle_number,
                "status": cycle.status,
                "output": _json_value(cycle.output),
                **({"summary": cycle.summary} if cycle.summary is not None else {}),
            }
            for cycle in prior
        ],
    }


def supervise_state(goal: OuterLoopGoal, cycles: Sequence[CycleSummary]) -> dict[str, Any]:
    """Upstream's ``SuperviseOuterLoopState``: what the supervisor decides from."""
    return {
        "goal": goal.to_json(),
        "cycles": [
            {
                "cycleNumber": cycle.cycle_number,
                "workflowVersionId": cycle.workflow_version_id,
                "runId": cycle.run_id,
                "status": cycle.status,
                "output": _json_value(cycle.output),
                **({"summary": cycle.summary} if cycle.summary is not None else {}),
            }
            for cycle in cycles
        ],
    }
