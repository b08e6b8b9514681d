"""Budget trees in process: a budgeted run's sub-runs spend from its budget (they borrow
what each call needs from it, in both logs), a child's own smaller budget stops it first,
and the fold counts a child at what it was lent until its end says what it spent."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist import run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.events import Event
from little_dist.litellm_prices import litellm_price_fallback
from little_dist.run_state import RunState, materialize_run_state
from little_dist.subruns.rollup import sub_run_rollup
from little_dist.world.in_process import MemoryWorld
from tests import budget_tree_app as app


def _boss(world: MemoryWorld, scenario: str, budget: float, run_id: str) -> RunState:
    with app.build_script().installed():
        try:
            return run_workflow(
                app.boss, {"scenario": scenario}, world=world, run_id=run_id, budget_usd=budget
            ).state
        except RunFailedError as failed:
            return failed.result.state


def _state(world: MemoryWorld, run_id: str) -> RunState:
    events = world.list_events(run_id)
    return materialize_run_state(events, run_id=run_id, pricing_fallback=litellm_price_fallback)


def _children(world: MemoryWorld, run_id: str) -> list[str]:
    return [
        e.payload["childRunId"]
        for e in world.list_events(run_id)
        if e.type == "little.subrun.started"
    ]


def _cause(state: RunState) -> Any:
    return state.error.get("causeCode") if isinstance(state.error, dict) else None


def test_a_parent_with_sub_runs_stops_before_its_ceiling_and_never_after_it() -> None:
    world = MemoryWorld()
    budget = 0.00015  # the boss's first call and a few of its eight kids
    state = _boss(world, "kids", budget, "run_tree_stop")
    assert state.status == "failed" and _cause(state) == "budget_exceeded"
    kids = [_state(world, kid) for kid in _children(world, "run_tree_stop")]
    assert len(kids) == 8
    done = [kid for kid in kids if kid.status == "completed"]
    refused = [kid for kid in kids if _cause(kid) == "budget_exceeded"]
    assert done and refused and len(done) + len(refused) == 8
    for kid in kids:
        assert kid.budget_parent_run_id == "run_tree_stop"
        assert kid.committed_usd <= kid.drawn_usd + 1e-12  # never spends what it did not borrow
        assert kid.reserved_usd == 0
    for kid in refused:
        assert kid.spent_usd == 0 and kid.drawn_usd == 0  # refused before any call was sent
    # The parent counts each kid at what it spent, in the end; the tree never passed its budget.
    assert state.sub_runs_usd == sum(kid.committed_usd for kid in kids)
    assert state.committed_usd <= budget
    rollup = sub_run_rollup(
        world.list_events, "run_tree_stop", pricing_fallback=litellm_price_fallback
    )
    assert rollup is not None and rollup.total.cost_usd is not None
    assert 0 < rollup.total.cost_usd <= budget
    lent = [e.payload for e in world.list_events("run_tree_stop") if e.type == "little.budget.lent"]
    assert sorted(p["childRunId"] for p in lent) == sorted(kid.run_id for kid in done)


def test_a_child_with_its_own_smaller_budget_stops_at_it_and_the_parent_goes_on() -> None:
    world = MemoryWorld()
    state = _boss(world, "small", 0.001, "run_tree_small")
    assert state.status == "completed" and state.output == app.DONE
    (child_id,) = _children(world, "run_tree_small")
    child = _state(world, child_id)
    assert child.budget_usd == app.SMALL_BUDGET
    assert child.budget_parent_run_id == "run_tree_small"
    sent = [e for e in world.list_events(child_id) if e.type == "harness.model.called"]
    assert 0 < len(sent) < 5  # five keys; its own budget held some of them
    refused = [
        s
        for s in child.steps.values()
        if isinstance(s.error, dict) and s.error.get("causeCode") == "budget_exceeded"
    ]
    assert refused and len(sent) + len(refused) == 5
    assert child.committed_usd <= app.SMALL_BUDGET
    assert child.drawn_usd <= app.SMALL_BUDGET
    # What the child borrowed and did not spend went back to the parent at its end.
    ended = [
        e.payload for e in world.list_events("run_tree_small") if e.type == "little.subrun.ended"
    ]
    assert ended[0]["spentUsd"] == child.committed_usd
    assert state.sub_runs_usd == child.committed_usd < child.drawn_usd
    assert state.committed_usd <= 0.001


def test_a_resumed_parent_counts_its_children_once() -> None:
    world = MemoryWorld()
    first = _boss(world, "kids", 0.001, "run_tree_resume")
    count = len(world.list_events("run_tree_resume"))
    again = _boss(world, "kids", 0.001, "run_tree_resume")
    assert first.status == again.status == "completed"
    assert len(world.list_events("run_tree_resume")) == count  # nothing recorded again
    assert (
        again.committed_usd == first.committed_usd == _state(world, "run_tree_resume").committed_usd
    )
    assert first.sub_runs_usd > 0


def _event(seq: int, type_: str, payload: dict[str, Any]) -> Event:
    return Event.model_validate(
        {
            "eventId": f"e{seq}",
            "runId": "run_fold",
            "sequence": seq,
            "type": type_,
            "payload": payload,
            "recordedAt": "2026-01-01T00:00:00.000Z",
            "occurrenceId": f"o{seq}",
        }
    )


def test_the_fold_counts_a_child_at_its_loans_until_its_end_replaces_them() -> None:
    lent = {"childRunId": "run_kid", "usd": 2.0, "drawId": "d1"}
    events = [
        _event(1, "little.run.budget", {"budgetUsd": 10}),
        _event(2, "little.budget.lent", lent),
        _event(3, "little.budget.lent", {**lent, "drawId": "d2", "usd": 1.5}),
        # A loan whose child never recorded it (a worker died in between): still counted.
        _event(4, "little.budget.lent", {"childRunId": "run_other", "usd": 0.5, "drawId": "d3"}),
    ]
    open_ = materialize_run_state(events)
    assert open_.sub_runs_usd == 4.0 and open_.committed_usd == 4.0
    ended = {"childRunId": "run_kid", "status": "completed", "spentUsd": 1.25}
    events += [
        _event(5, "little.subrun.ended", ended),
        _event(6, "little.subrun.ended", {**ended, "spentUsd": 9.0}),  # a second notice: no
    ]
    closed = materialize_run_state(events)
    assert closed.sub_runs_usd == 1.75
    assert open_.sub_runs_usd == 4.0  # an earlier snapshot never changes


def test_the_fold_of_a_child_knows_its_parent_and_counts_an_unpriced_call_at_its_worst() -> None:
    started = {"parentRunId": "run_boss", "budgetFromParent": True, "budgetUsd": 3}
    hold = {"callId": "model:s:1:1", "stepPath": "s", "reservedUsd": 0.75}
    events = [
        _event(1, "RunStarted", started),
        _event(2, "little.budget.drawn", {"usd": 1.0, "drawId": "d1"}),
        _event(3, "little.budget.reserved", hold),
        _event(
            4,
            "harness.model.responded",
            {
                "callId": "model:s:1:1",
                "stepPath": "s",
                "model": {"provider": "nowhere", "modelId": "unpriced"},
                "response": {"usage": {"inputTokens": 10, "outputTokens": 5}},
            },
        ),
    ]
    state = materialize_run_state(events)
    assert state.budget_parent_run_id == "run_boss" and state.budget_tree
    assert (state.budget_usd, state.drawn_usd, state.reserved_usd) == (3.0, 1.0, 0.0)
    assert state.committed_usd == 0.75


def test_a_planned_sub_runs_planner_borrows_from_the_parent_before_its_call() -> None:
    world = MemoryWorld()
    state = _boss(world, "planned", 0.001, "run_tree_planned")
    assert state.status == "completed", state.error
    (child_id,) = _children(world, "run_tree_planned")
    events = world.list_events(child_id)
    types = [e.type for e in events]
    # Recorded before the planner ran: the child borrows from its parent.
    assert types[0] == "little.run.budget"
    assert events[0].payload == {"fromParentRunId": "run_tree_planned"}
    planner_hold = next(
        e for e in events if e.type == "little.budget.reserved" and e.payload.get("role")
    )
    assert types.index("little.budget.drawn") < events.index(planner_hold)
    assert types.index("little.budget.reserved") < types.index("RunStarted")
    child = _state(world, child_id)
    assert len([e for e in events if e.type == "harness.model.responded"]) == 2  # plan, ask
    assert state.sub_runs_usd == child.committed_usd == child.spent_usd > 0


def test_a_sub_runs_planner_call_the_parent_cannot_hold_is_not_sent() -> None:
    world = MemoryWorld()
    with app.build_script().installed() as script, pytest.raises(RunFailedError):
        run_workflow(
            app.boss,
            {"scenario": "planned"},
            world=world,
            run_id="run_tree_poor",
            budget_usd=0.00008,  # the boss's own first call, and little more
        )
    (child_id,) = _children(world, "run_tree_poor")
    child = _state(world, child_id)
    assert child.status == "failed" and _cause(child) == "budget_exceeded"
    assert [call.step_path for call in script.calls if call.step_path == "planner"] == []
