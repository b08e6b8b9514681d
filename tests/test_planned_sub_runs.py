"""A sub-run whose workflow the fleet's planner plans: its submission carries the parent
link, every ``RunStarted`` planning records carries it on (planned, failed, cancelled), so
the end reaches the parent (``little.subrun.ended``). In memory, with ``WorkerRuntime.plan``
called directly; the real-process tests are in ``tests/test_subruns_planned_fleet.py``.

Before: submitting such a sub-run raised ("planned by the fleet's planner: it cannot be
started as a sub-run there yet")."""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow
from little_dist.event_types.engine import CANCEL_EVENT_TYPE, SUBMITTED_EVENT_TYPE
from little_dist.fleet.app_registry import AppRegistry
from little_dist.fleet.sub_runs import notice_run_end
from little_dist.fleet.submission import submit_run, submit_runs
from little_dist.fleet.worker import WorkerRuntime
from little_dist.harness.types import PlanResult
from little_dist.run_state import materialize_run_state
from little_dist.settings import load_settings
from little_dist.subruns import SUB_RUN_ENDED
from little_dist.world.in_process import MemoryWorld
from tests.lwir_builder import tool_step, workflow_doc
from tests.planning_app import INPUT_SCHEMA, noop

PARENT = "run_parent_planned"


def _link(n: int = 1) -> dict[str, str]:
    return {
        "parentRunId": PARENT,
        "parentToolCallId": f"call_{n}",
        "parentStepPath": "boss",
        "parentCallKey": f"key-{n}",
    }


class _Planner:
    """Plans one ``noop`` step, or fails (``broken``); counts its calls."""

    harness_id = "tests.countingPlanner@1"

    def __init__(self, *, broken: bool = False) -> None:
        self.broken = broken
        self.calls = 0
        self.reuse: str | None = None  # a version to reuse unchanged when shown one
        self.briefed = 0

    def run(self, task: Any, ctx: Any) -> Any:
        self.calls += 1
        if self.broken:
            return {"kind": "shrug"}
        if "Prior cycle note" in task.system_message:
            self.briefed += 1
            if self.reuse is not None:
                decision = {"kind": "reuse_unchanged", "workflowVersionId": self.reuse}
                return PlanResult(lwir={**decision, "rationale": "the same job"})
        step = tool_step("only", "noop", {"n": 1})
        return PlanResult(
            lwir=workflow_doc("tests.planned-child", [step], input_schema=INPUT_SCHEMA)
        )


def _fleet(planner: _Planner) -> tuple[MemoryWorld, WorkerRuntime, Any]:
    workflow = define_workflow(
        id="tests.planned-child",
        input=INPUT_SCHEMA,
        output={"type": "object"},
        model="scripted/unused",
        tools=[noop],
        harness={"planner": planner},
    )
    world = MemoryWorld()
    registry = AppRegistry(workflows={workflow.id: workflow})
    runtime = WorkerRuntime(load_settings({}), world=world, registry=registry)
    return world, runtime, workflow


def _of(world: MemoryWorld, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in world.list_events(run_id) if e.type == kind]


def test_a_planned_sub_run_is_submitted_with_its_link_and_started_with_it() -> None:
    planner = _Planner()
    world, runtime, workflow = _fleet(planner)
    child = submit_run(world, workflow, {"ticket": "T-1"}, run_id="run_sub_p1", parent=_link())
    (submitted,) = _of(world, child, SUBMITTED_EVENT_TYPE)
    assert submitted["parent"] == _link()
    assert _of(world, child, "RunStarted") == []
    # submitted again (a retried parent attempt): nothing new
    submit_run(world, workflow, {"ticket": "T-1"}, run_id="run_sub_p1", parent=_link())
    assert len(world.list_events(child)) == 1
    assert runtime.plan(child) == "started"
    (started,) = _of(world, child, "RunStarted")
    assert {key: started[key] for key in _link()} == _link()
    assert started["input"] == {"ticket": "T-1"}
    state = materialize_run_state(world.list_events(child), run_id=child)
    assert state.sub_runs.parent_run_id == PARENT
    assert state.sub_runs.parent_step_path == "boss"
    assert runtime.plan(child) == "started"  # a second little.plan plans nothing
    assert planner.calls == 1
    assert len(_of(world, child, "RunStarted")) == 1


def test_a_turns_planned_children_are_submitted_together_each_with_its_link() -> None:
    world, _, workflow = _fleet(_Planner())
    ids = submit_runs(
        world,
        workflow,
        [{"ticket": "A"}, {"ticket": "B"}],
        run_ids=["run_sub_pa", "run_sub_pb"],
        parents=[_link(1), _link(2)],
    )
    for n, child in enumerate(ids, start=1):
        (submitted,) = _of(world, child, SUBMITTED_EVENT_TYPE)
        assert submitted["parent"] == _link(n)


def test_a_planning_that_fails_for_good_ends_the_child_and_its_parent_hears_of_it() -> None:
    planner = _Planner(broken=True)
    world, runtime, workflow = _fleet(planner)
    child = submit_run(world, workflow, {"ticket": "T-2"}, run_id="run_sub_p2", parent=_link())
    assert runtime.plan(child) == "failed"
    (started,) = _of(world, child, "RunStarted")
    assert started["parentRunId"] == PARENT
    (failed,) = _of(world, child, "RunFailed")
    assert failed["error"]["causeCode"] == "planner_failed"
    # what the scheduler does at the child's end: the parent's log hears of it
    state = materialize_run_state(world.list_events(child), run_id=child)
    notice_run_end(world, child, state)
    (ended,) = _of(world, PARENT, SUB_RUN_ENDED)
    assert ended["childRunId"] == child
    assert ended["status"] == "failed"
    assert ended["stepPath"] == "boss"
    assert "planning failed" in ended["message"]


def test_a_child_cancelled_before_it_was_planned_ends_without_its_planner() -> None:
    from little_dist import occurrences
    from little_dist.events import EventInput

    planner = _Planner()
    world, runtime, workflow = _fleet(planner)
    child = submit_run(world, workflow, {"ticket": "T-3"}, run_id="run_sub_p3", parent=_link())
    # its parent ended meanwhile: the scheduler asked the open child to stop
    world.append(
        child,
        EventInput(
            type=CANCEL_EVENT_TYPE,
            occurrence_id=occurrences.CANCEL,
            payload={"reason": f"its parent run {PARENT} ended", "parentRunId": PARENT},
        ),
    )
    assert runtime.plan(child) == "cancelled"
    assert planner.calls == 0
    (started,) = _of(world, child, "RunStarted")
    assert started["parentRunId"] == PARENT
    (failed,) = _of(world, child, "RunFailed")
    assert failed["error"]["causeCode"] == "cancelled"
    state = materialize_run_state(world.list_events(child), run_id=child)
    notice_run_end(world, child, state)
    (ended,) = _of(world, PARENT, SUB_RUN_ENDED)
    assert ended["status"] == "cancelled"


def _complete(world: MemoryWorld, run_id: str, version: str) -> None:
    """The run's end, as its steps would record it (only completed runs are candidates)."""
    from little_dist import occurrences
    from little_dist.events import EventInput

    world.append(
        run_id,
        EventInput(
            type="RunCompleted",
            occurrence_id=occurrences.RUN_END,
            payload={"workflowVersionId": version, "output": {"n": 1}},
        ),
    )


def test_a_planned_sub_run_is_reviewed_for_reuse_as_any_planned_run() -> None:
    # Before: a run planned on the fleet opens its log with little.run.submitted, and the
    # candidates were only runs whose first event is OrchestrationRequested: never offered.
    planner = _Planner()
    world, runtime, workflow = _fleet(planner)
    first = submit_run(world, workflow, {"ticket": "T-4"}, run_id="run_sub_p4", parent=_link(4))
    assert runtime.plan(first) == "started"
    assert planner.briefed == 0  # nothing to reuse yet
    (version,) = {p["workflowVersionId"] for p in _of(world, first, "RunStarted")}
    _complete(world, first, version)
    planner.reuse = version
    second = submit_run(world, workflow, {"ticket": "T-5"}, run_id="run_sub_p5", parent=_link(5))
    assert runtime.plan(second) == "started"
    assert planner.briefed == 1  # shown the first child's version, it chose to reuse it
    (decision,) = _of(world, second, "PlannerReuseDecisionRecorded")
    assert decision["decisionKind"] == "reuse_unchanged"
    assert decision["candidateWorkflowVersionId"] == version
    (started,) = _of(world, second, "RunStarted")
    assert started["workflowVersionId"] == version
    assert started["parentToolCallId"] == "call_5"
