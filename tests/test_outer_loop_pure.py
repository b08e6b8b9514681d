"""The outer loop's pure parts: the manifest's JSON (upstream's shape, read back field by
field with errors that name the field), the resume checks, and the supervisor's decisions."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.errors import InvalidInputError
from little_dist.events import Event
from little_dist.outer_loop.decisions import (
    Continue,
    Done,
    decision_from,
    decision_payload,
    outer_loop_context,
    recorded_decision,
)
from little_dist.outer_loop.manifest import (
    CycleSummary,
    OuterLoopGoal,
    OuterLoopManifest,
    config_problem,
    manifest_from_json,
    manifest_text,
    parse_manifest_text,
)

GOAL = OuterLoopGoal("sha256:" + "b" * 64, "goal")
CYCLE = CycleSummary(1, "run_c1", "wfver_1", "failed", None, summary="retry")


def test_a_manifest_round_trips_through_its_stored_text() -> None:
    manifest = OuterLoopManifest("ol_rt", GOAL, 2, (CYCLE,), pending_cycle_run_id="run_c2")
    text = manifest_text(manifest)
    assert text.endswith("}\n") and "\n" not in text[:-1]
    assert parse_manifest_text(text, "here") == manifest
    done = OuterLoopManifest("ol_rt", GOAL, 2, (CYCLE,), done=True, final_output=None)
    assert manifest_from_json(done.to_json(), "here") == done
    assert done.to_json()["result"] == {"kind": "done", "finalOutput": None}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"maxCycles": "3"}, "'maxCycles'"),
        ({"maxCycles": True}, "'maxCycles'"),
        ({"goal": {"description": "x"}}, "'workflowDefinitionHash'"),
        ({"cycles": [{"cycleNumber": 1}]}, r"cycles\[0\]: status"),
        ({"result": {"kind": "continue"}}, "result must be"),
        ({"outerLoopId": "run_x"}, "Invalid outer-loop id"),
        ({"pendingCycleRunId": 3}, "pendingCycleRunId"),
    ],
)
def test_a_manifest_that_is_not_one_is_refused_naming_the_field(
    change: dict[str, Any], named: str
) -> None:
    data = {**OuterLoopManifest("ol_bad", GOAL, 3).to_json(), **change}
    with pytest.raises(InvalidInputError, match=named):
        manifest_from_json(data, "ol_bad.json")


def test_resume_checks_are_upstreams_one_line_errors() -> None:
    existing = OuterLoopManifest("ol_x", GOAL, 3, (CYCLE,))
    assert (
        config_problem(
            existing, max_cycles=3, workflow_definition_hash=GOAL.workflow_definition_hash
        )
        is None
    )
    cycles = config_problem(existing, max_cycles=4, workflow_definition_hash="sha256:c")
    assert cycles is not None and "outer_loop_max_cycles_mismatch" in cycles
    goal = config_problem(existing, max_cycles=3, workflow_definition_hash="sha256:c")
    assert goal == (
        "runtime_config_error: outer_loop_goal_mismatch — existing outer loop 'ol_x' was "
        f"started with workflowDefinitionHash={GOAL.workflow_definition_hash}, caller now "
        "passed sha256:c."
    )
    corrupt = OuterLoopManifest("ol_x", GOAL, 3, (), done=True)
    problem = config_problem(
        corrupt, max_cycles=3, workflow_definition_hash=GOAL.workflow_definition_hash
    )
    assert problem is not None and "outer_loop_manifest_corrupt" in problem


def test_decisions_in_upstreams_json_and_back() -> None:
    assert decision_from({"kind": "done", "finalOutput": [1]}) == Done([1])
    assert decision_from({"kind": "done"}) == Done(None)
    assert decision_from({"kind": "continue"}) == Continue()
    assert decision_from(Continue("n")) == Continue("n")
    assert decision_payload(Done(None)) == {"kind": "done", "finalOutput": None}
    assert decision_payload(Continue()) == {"kind": "continue"}
    assert decision_payload(Continue("n")) == {"kind": "continue", "promptNote": "n"}
    for bad in ({"kind": "stop"}, "done", None, {"kind": "continue", "promptNote": 3}):
        with pytest.raises(InvalidInputError, match="supervisor"):
            decision_from(bad)


def test_the_recorded_decision_is_the_one_for_that_cycle() -> None:
    def event(number: int, supervise: dict[str, Any]) -> Event:
        return Event(
            event_id="evt_0000000000000000",
            run_id="run_c1",
            sequence=number,
            type="OuterLoopCycleCompleted",
            occurrence_id=None,
            recorded_at="2026-01-01T00:00:00.000Z",
            payload={"outerLoopId": "ol_x", "cycleNumber": number, "supervise": supervise},
        )

    events = [event(1, {"kind": "continue", "promptNote": "a"}), event(2, {"kind": "done"})]
    assert recorded_decision(events, 1) == Continue("a")
    assert recorded_decision(events, 2) == Done(None)
    assert recorded_decision(events, 3) is None


def test_the_planners_outer_loop_context_is_upstreams() -> None:
    assert outer_loop_context(1, 3, []) == {
        "cycleNumber": 1,
        "maxCycles": 3,
        "isFinalCycle": False,
        "priorCycles": [],
    }
    context = outer_loop_context(2, 2, [CYCLE])
    assert context["isFinalCycle"] is True
    assert context["priorCycles"] == [
        {"cycleNumber": 1, "status": "failed", "output": None, "summary": "retry"}
    ]
