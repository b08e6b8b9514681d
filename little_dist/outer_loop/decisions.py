"""The supervisor's decisions and what the outer loop tells the planner and the supervisor
(pure: no IO, no clock).

A decision is upstream's ``SuperviseDecision``: ``{"kind": "done", "finalOutput": ...}``
(the loop ends with that output) or ``{"kind": "continue", "promptNote": "..."?}`` (plan
again; the note is shown to the next cycle's planner). It is recorded on the cycle's run as
``OuterLoopCycleCompleted`` (payload ``{outerLoopId, cycleNumber, supervise}``, occurrence
id :func:`cycle_occurrence_id`), and that event is the truth on resume: a cycle whose event
is recorded never asks the supervisor again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.outer_loop.manifest import CycleSummary, OuterLoopGoal

__all__ = [
    "CYCLE_COMPLETED",
    "Continue",
    "Decision",
    "Done",
    "cycle_completed_payload",
    "cycle_occurrence_id",
    "decision_from",
    "decision_payload",
    "outer_loop_context",
    "recorded_decision",
    "supervise_state",
]

#: Upstream's event type, appended to each cycle's run once its decision is made.
CYCLE_COMPLETED: Final = "OuterLoopCycleCompleted"


@dataclass(frozen=True)
class Done:
    """End the loop; ``final_output`` is its output."""

    final_output: Any = None


@dataclass(frozen=True)
class Continue:
    """Run another cycle; ``prompt_note`` (optional) is what its planner is told."""

    prompt_note: str | None = None


Decision = Done | Continue


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
    outer_loop_id: str, cycle_number: int, decision: Decision
) -> dict[str, Any]:
    return {
        "outerLoopId": outer_loop_id,
        "cycleNumber": cycle_number,
        "supervise": decision_payload(decision),
    }


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
