"""Suspension in the pure core: the fold and ``decide`` on ``little.step.suspended`` and the
sub-run links (``little.subrun.started`` / ``.ended``), the retry policy, the sweeper's list
of running attempts, and the model loop starting every call's sub-run before it suspends."""

from __future__ import annotations

from typing import Any

from little_dist.events import EventInput
from little_dist.runtime.dead_attempts import running_worker_attempts
from little_dist.runtime.failures import step_suspended
from little_dist.scheduling.policy import NextAttempt, admits, next_action
from little_dist.scheduling.step_graph import plan_for
from little_dist.subruns.links import STEP_SUSPENDED, SUB_RUN_ENDED, SUB_RUN_STARTED
from tests.test_scheduling_sim import Sim, lwir_doc, tool


def _started(child: str) -> EventInput:
    return EventInput(
        type=SUB_RUN_STARTED,
        payload={"childRunId": child, "stepPath": "a"},
        occurrence_id=f"subrun:{child}",
    )


def _ended(child: str, **extra: Any) -> EventInput:
    return EventInput(
        type=SUB_RUN_ENDED,
        payload={"childRunId": child, "stepPath": "a", "status": "completed", **extra},
        occurrence_id=f"subrun-end:{child}",
    )


def _suspend(sim: Sim, attempt: int, children: list[str]) -> None:
    step = {"id": "a"}
    sim.append([step_suspended("a", step, attempt, children)])


def _sim(retry: dict[str, Any] | None = None) -> Sim:
    extra = {"retry": retry} if retry else {}
    return Sim(lwir_doc([tool("a", **extra), tool("b", needs=["a"])]))


def _start_first(sim: Sim) -> Any:
    decision = sim.decide()
    (dispatch,) = decision.dispatch
    sim.start(dispatch)
    return dispatch


def test_a_suspended_step_waits_for_every_child_then_is_due_again_as_the_next_attempt() -> None:
    sim = _sim()
    first = _start_first(sim)
    sim.append([_started("run_sub_1"), _started("run_sub_2")])
    _suspend(sim, 1, ["run_sub_1", "run_sub_2"])
    state = sim.state
    step = state.steps["a"]
    assert step.status == "running"
    assert [attempt.status for attempt in step.attempts] == ["suspended"]
    assert step.waiting_for == {"run_sub_1", "run_sub_2"}
    assert state.sub_runs.open_children == ("run_sub_1", "run_sub_2")
    # Waiting: nothing to dispatch, nothing to record.
    decision = sim.decide()
    assert decision.events == () and decision.dispatch == ()
    sim.append([_ended("run_sub_1")])
    assert sim.state.steps["a"].waiting_for == {"run_sub_2"}
    assert sim.decide().dispatch == ()
    sim.append([_ended("run_sub_2")])
    assert sim.state.steps["a"].waiting_for == frozenset()
    assert sim.state.sub_runs.open_children == ()
    (resume,) = sim.decide().dispatch
    assert (resume.step_path, resume.attempt, resume.kind) == ("a", 2, "execute_step")
    assert first.attempt == 1
    # The resumed attempt completes the step; the run goes on.
    sim.start(resume)
    assert sim.state.steps["a"].attempts[-1].status == "running"
    sim.finish(resume, ("ok", {"done": True}))
    (b,) = sim.decide().dispatch
    assert b.step_path == "b"


def test_a_child_that_ended_before_the_suspension_was_folded_does_not_hold_the_step() -> None:
    sim = _sim()
    _start_first(sim)
    sim.append([_started("run_sub_1"), _ended("run_sub_1")])
    _suspend(sim, 1, ["run_sub_1"])
    assert sim.state.steps["a"].waiting_for == frozenset()
    (resume,) = sim.decide().dispatch
    assert resume.attempt == 2


def test_suspensions_do_not_count_against_max_attempts() -> None:
    sim = _sim()  # one attempt: the default
    dispatch = _start_first(sim)
    for attempt in range(1, 5):
        assert dispatch.attempt == attempt
        sim.append([_started(f"run_sub_{attempt}")])
        _suspend(sim, attempt, [f"run_sub_{attempt}"])
        sim.append([_ended(f"run_sub_{attempt}")])
        (dispatch,) = sim.decide().dispatch
        sim.start(dispatch)
    sim.finish(dispatch, ("fail", {"name": "Boom", "message": "boom"}))
    decision = sim.decide()
    # The one real failure ends the step: the four suspensions were free.
    assert decision.done
    assert sim.state.status == "failed"


def test_the_retry_policy_skips_suspended_attempts_and_admits_the_resumed_one() -> None:
    sim = _sim({"maxAttempts": 2})
    _start_first(sim)
    sim.append([_started("run_sub_1")])
    _suspend(sim, 1, ["run_sub_1"])
    step = plan_for(sim.version).top.by_id["a"]
    attempts = sim.state.steps["a"].attempts
    assert next_action(step, attempts, default_max_attempts=1, max_crash_retries=3) == (
        NextAttempt(2, "execute_step")
    )
    assert admits(
        step,
        attempts,
        2,
        "execute_step",
        scheduled=True,
        default_max_attempts=1,
        max_crash_retries=3,
    )
    assert not admits(
        step,
        attempts,
        3,
        "execute_step",
        scheduled=True,
        default_max_attempts=1,
        max_crash_retries=3,
    )


def test_the_sweeper_leaves_a_suspended_attempt_alone() -> None:
    sim = _sim()
    _start_first(sim)
    assert running_worker_attempts(sim.version, sim.state) == [("a", 1, "a")]
    _suspend(sim, 1, ["run_sub_1"])
    assert running_worker_attempts(sim.version, sim.state) == []


def test_an_attempt_ends_once_a_suspension_after_its_end_is_not_taken() -> None:
    sim = _sim()
    dispatch = _start_first(sim)
    sim.finish(dispatch, ("ok", {"done": True}))
    # The same end occurrence: the log keeps the completion.
    _suspend(sim, 1, ["run_sub_1"])
    assert [e.type for e in sim.events()].count(STEP_SUSPENDED) == 0
    assert sim.state.steps["a"].status == "completed"


def test_a_child_run_knows_its_parent_from_its_run_started() -> None:
    sim = Sim(lwir_doc([tool("a")]), run_id="run_sub_kid")
    assert sim.state.sub_runs.parent_run_id is None
    from little_dist.run_state import RunStateBuilder

    builder = RunStateBuilder("run_sub_kid")
    builder.apply_all(
        [
            {
                "runId": "run_sub_kid",
                "sequence": 1,
                "type": "RunStarted",
                "recordedAt": "2026-01-01T00:00:00.000Z",
                "payload": {
                    "workflowVersionId": "wfver_x",
                    "input": {},
                    "parentRunId": "run_parent",
                    "parentStepPath": "boss",
                },
            }
        ]
    )
    view = builder.snapshot().sub_runs
    assert (view.parent_run_id, view.parent_step_path) == ("run_parent", "boss")


def test_a_branch_step_of_a_parallel_step_suspends_and_resumes_the_same_way() -> None:
    from tests.test_scheduling_sim import parallel

    items = [{"id": "x"}, {"id": "y"}]
    sim = Sim(
        lwir_doc([parallel("fan", [tool("work")], max_concurrency=2)]),
        {"items": items},
    )
    decision = sim.decide()
    branches = sorted(decision.dispatch, key=lambda d: d.step_path)
    assert len(branches) == 2
    for dispatch in branches:
        sim.start(dispatch)
    first, second = branches
    child = f"run_sub_{first.step_path}"
    sim.append(
        [
            EventInput(
                type=SUB_RUN_STARTED,
                payload={"childRunId": child, "stepPath": first.step_path},
                occurrence_id=f"subrun:{child}",
            ),
            step_suspended(first.step_path, {"id": "work"}, 1, [child]),
        ]
    )
    sim.finish(second, ("ok", {"y": True}))
    # The other branch's end is settled; the suspended one stays in flight.
    assert all(d.step_path != first.step_path for d in sim.decide().dispatch)
    assert sim.state.status == "running"
    sim.append(
        [
            EventInput(
                type=SUB_RUN_ENDED,
                payload={"childRunId": child, "stepPath": first.step_path, "status": "completed"},
                occurrence_id=f"subrun-end:{child}",
            )
        ]
    )
    (resume,) = [d for d in sim.decide().dispatch if d.step_path == first.step_path]
    assert resume.attempt == 2
    sim.start(resume)
    sim.finish(resume, ("ok", {"x": True}))
    assert sim.decide().done
    assert sim.state.status == "completed"


# -- resumeOn "any": an orchestrator's gate held calls back -------------------------------


def _suspend_on_any(sim: Sim, attempt: int, children: list[str]) -> None:
    sim.append([step_suspended("a", {"id": "a"}, attempt, children, resume_on_any=True)])


def _folded_from_scratch(sim: Sim) -> Any:
    """The run's events folded again, in two parts with a snapshot between (the scheduler
    folds a run's new events onto its cached state), the cut just after the suspension."""
    from little_dist.run_state import RunStateBuilder, fold_events

    builder = RunStateBuilder(sim.run_id)
    events = sim.events()
    cut = next(i for i, e in enumerate(events) if e.type == STEP_SUSPENDED) + 1
    builder.apply_all(events[:cut])
    snapshot = builder.snapshot()
    assert snapshot.sub_runs.resume_on_any == {"a"}
    return fold_events(snapshot, events[cut:])


def test_a_suspension_without_resume_on_records_no_such_field() -> None:
    event = step_suspended("a", {"id": "a"}, 1, ["run_sub_1"])
    assert "resumeOn" not in event.payload
    on_any = step_suspended("a", {"id": "a"}, 1, ["run_sub_1"], resume_on_any=True)
    assert on_any.payload["resumeOn"] == "any"
    assert on_any.payload["waitingFor"] == ["run_sub_1"]


def test_a_suspension_on_any_is_due_again_at_the_first_of_its_childrens_ends() -> None:
    sim = _sim()
    _start_first(sim)
    sim.append([_started("run_sub_1"), _started("run_sub_2")])
    _suspend_on_any(sim, 1, ["run_sub_1", "run_sub_2"])
    assert sim.state.steps["a"].waiting_for == {"run_sub_1", "run_sub_2"}
    assert sim.state.sub_runs.resume_on_any == {"a"}
    assert sim.decide().dispatch == ()
    sim.append([_ended("run_sub_2")])
    # The first end: the step is due (a held-back call can start its child now).
    state = sim.state
    assert state.steps["a"].waiting_for == frozenset()
    assert state.sub_runs.suspended == frozenset()
    assert state.sub_runs.resume_on_any == frozenset()
    assert state.sub_runs.open_children == ("run_sub_1",)
    folded = _folded_from_scratch(sim)
    assert folded.steps["a"].waiting_for == frozenset()
    assert folded.sub_runs.resume_on_any == frozenset()
    (resume,) = sim.decide().dispatch
    assert (resume.step_path, resume.attempt) == ("a", 2)
    sim.start(resume)
    # The resumed attempt starts a held-back child and suspends on any again: the other
    # child's end (still running) makes it due once more.
    sim.append([_started("run_sub_3")])
    _suspend_on_any(sim, 2, ["run_sub_1", "run_sub_3"])
    assert sim.state.steps["a"].waiting_for == {"run_sub_1", "run_sub_3"}
    assert sim.decide().dispatch == ()
    sim.append([_ended("run_sub_1")])
    (again,) = sim.decide().dispatch
    assert again.attempt == 3
    # A late end of a child the step no longer waits for changes nothing of the step.
    sim.start(again)
    sim.append([_ended("run_sub_3")])
    assert sim.state.steps["a"].attempts[-1].status == "running"
    sim.finish(again, ("ok", {"done": True}))
    (b,) = sim.decide().dispatch
    assert b.step_path == "b"


def test_a_suspension_on_any_folded_with_a_snapshot_between_keeps_waiting_on_any() -> None:
    sim = _sim()
    _start_first(sim)
    sim.append([_started("run_sub_1"), _started("run_sub_2")])
    _suspend_on_any(sim, 1, ["run_sub_1", "run_sub_2"])
    from little_dist.run_state import fold_events

    before = sim.state  # (a snapshot: the scheduler's cached state)
    after = fold_events(before, [sim.append([_ended("run_sub_1")])[0]])
    assert after.steps["a"].waiting_for == frozenset()
    assert before.steps["a"].waiting_for == {"run_sub_1", "run_sub_2"}


def test_a_suspension_on_any_after_one_of_its_children_ended_is_due_at_once() -> None:
    sim = _sim()
    _start_first(sim)
    sim.append([_started("run_sub_1"), _started("run_sub_2"), _ended("run_sub_1")])
    _suspend_on_any(sim, 1, ["run_sub_1", "run_sub_2"])
    assert sim.state.steps["a"].waiting_for == frozenset()
    (resume,) = sim.decide().dispatch
    assert resume.attempt == 2


def test_a_suspension_for_all_still_waits_for_the_last_end() -> None:
    sim = _sim()
    _start_first(sim)
    sim.append([_started("run_sub_1"), _started("run_sub_2")])
    _suspend(sim, 1, ["run_sub_1", "run_sub_2"])
    sim.append([_ended("run_sub_1")])
    assert sim.state.steps["a"].waiting_for == {"run_sub_2"}
    assert sim.state.sub_runs.resume_on_any == frozenset()
    assert sim.decide().dispatch == ()
