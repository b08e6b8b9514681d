"""decide() on parallel steps: concurrency, failure modes, fan-in, branch-local loops."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from little_dist.scheduling import StepDispatch, decide
from tests.test_scheduling_sim import Outcome, Sim, lwir_doc, parallel, tool

OBJECT = {"mode": "object", "schema": {"type": "object"}}


def items(*keys: str) -> dict[str, Any]:
    return {"items": [{"id": key} for key in keys]}


def fan_doc(**options: Any) -> dict[str, Any]:
    children = options.pop("children", [tool("score", input={"id": "{{ item.id }}"})])
    return lwir_doc([parallel("p", children, **options)], output_schema={"type": "array"})


def test_branches_run_child_steps_at_branch_paths_with_item_in_scope() -> None:
    sim = Sim(fan_doc(), items("a", "b"))
    state = sim.run()
    assert state.status == "completed"
    assert state.steps["p[a].score"].output == {"path": "p[a].score", "input": {"id": "a"}}
    started = sim.types("ParallelGroupStarted")[0]
    assert started["branchCount"] == 2
    assert started["maxConcurrency"] == 3
    assert started["failureMode"] == "all_settled"
    assert [b["branchPath"] for b in started["branches"]] == ["p[a]", "p[b]"]
    assert [e["branchIndex"] for e in sim.types("ParallelBranchScheduled")] == [0, 1]
    assert len(sim.types("ParallelBranchCompleted")) == 2
    assert sim.types("ParallelGroupCompleted")[0]["fanInOrder"] == "input"
    (done,) = [p for p in sim.types("StepCompleted") if p["stepPath"] == "p"]
    assert done["metadata"]["uses"] == "parallel"
    assert [entry["itemKey"] for entry in done["output"]] == ["a", "b"]
    assert done["output"][0] == {
        "itemKey": "a",
        "status": "completed",
        "output": {"path": "p[a].score", "input": {"id": "a"}},
        "artifacts": [],
    }
    assert state.output == done["output"]


def test_occurrence_ids_of_group_and_branch_events() -> None:
    sim = Sim(fan_doc(), items("a"))
    sim.run()
    ids = {(e.type, e.occurrence_id) for e in sim.events()}
    assert {
        ("ParallelGroupStarted", "pgroup:p:1"),
        ("ParallelBranchScheduled", "pbranch:p[a]"),
        ("ParallelBranchCompleted", "pbranch-end:p[a]"),
        ("ParallelGroupCompleted", "pgroup-end:p:1"),
        ("StepCompleted", "end:p:1"),
    } <= ids


@pytest.mark.parametrize("limit", [1, 2, 4])
def test_never_more_than_max_concurrency_branches_in_flight(limit: int) -> None:
    sim = Sim(fan_doc(max_concurrency=limit), items(*"abcdefgh"))
    peak = 0

    def watch(s: Sim) -> None:
        nonlocal peak
        group = s.state.parallel_groups.get("p")
        if group is not None:
            in_flight = sum(1 for b in group.branches.values() if b.status == "scheduled")
            peak = max(peak, in_flight)
            assert in_flight <= limit

    rng = random.Random(limit)
    sim.run(choose=lambda ready: rng.randrange(len(ready)), on_round=watch)
    assert peak == limit
    assert sim.state.status == "completed"


@pytest.mark.parametrize(
    ("order", "expected"), [("input", ["b", "a", "c"]), ("itemKey", ["a", "b", "c"])]
)
def test_fan_in_order(order: str, expected: list[str]) -> None:
    sim = Sim(fan_doc(order=order), items("b", "a", "c"))
    rng = random.Random(7)
    state = sim.run(choose=lambda ready: rng.randrange(len(ready)))
    assert [entry["itemKey"] for entry in state.output] == expected


def test_item_key_order_compares_utf16_code_units() -> None:
    sim = Sim(fan_doc(order="itemKey"), items("\U0001f600", "\ufb33"))
    assert [e["itemKey"] for e in sim.run().output] == ["\U0001f600", "\ufb33"]


def fail_key(bad: str, error: dict[str, Any] | None = None) -> Any:
    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        if f"[{bad}]" in dispatch.step_path:
            return ("fail", error or {"name": "Boom", "message": "no", "retriable": False})
        return ("ok", {"id": step_input["id"]})

    return worker


def test_all_settled_completes_with_failed_envelopes() -> None:
    sim = Sim(fan_doc(max_concurrency=1), items("a", "b", "c"))
    state = sim.run(fail_key("b"))
    assert state.status == "completed"
    statuses = [(e["itemKey"], e["status"]) for e in state.output]
    assert statuses == [("a", "completed"), ("b", "failed"), ("c", "completed")]
    assert state.output[1]["error"] == {"name": "Boom", "message": "no", "retriable": False}
    (failed,) = sim.types("ParallelBranchFailed")
    assert failed["branchPath"] == "p[b]"
    assert sim.types("ParallelGroupCompleted")


def test_fail_fast_stops_new_branches_and_lets_in_flight_finish() -> None:
    sim = Sim(fan_doc(max_concurrency=2, failure_mode="fail_fast"), items("a", "b", "c", "d"))
    state = sim.run(fail_key("a"))
    assert state.status == "failed"
    scheduled = [e["branchPath"] for e in sim.types("ParallelBranchScheduled")]
    assert scheduled == ["p[a]", "p[b]"]  # c and d never start
    assert sim.types("ParallelBranchCompleted")[0]["branchPath"] == "p[b]"  # b finished
    (group_failed,) = sim.types("ParallelGroupFailed")
    assert group_failed["error"]["message"] == "no"
    (step_failed,) = [p for p in sim.types("StepFailed") if p["stepPath"] == "p"]
    assert step_failed["error"]["retriable"] is False
    assert state.error["message"] == "no"


def test_failed_parallel_attempt_is_retried_under_attempt_paths() -> None:
    sim = Sim(fan_doc(failure_mode="fail_fast", retry={"maxAttempts": 2}), items("a"))
    calls: list[str] = []

    def worker(s: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        calls.append(dispatch.step_path)
        if len(calls) == 1:
            return ("fail", {"name": "Boom", "message": "flaky", "retriable": False})
        return ("ok", {"id": step_input["id"]})

    state = sim.run(worker)
    assert state.status == "completed"
    assert calls == ["p[a].score", "p@attempt_2[a].score"]
    (first_fail,) = [p for p in sim.types("StepFailed") if p["stepPath"] == "p"]
    assert first_fail["error"]["retriable"] is True
    assert state.output[0]["output"] == {"id": "a"}


def test_empty_items_complete_with_an_empty_fan_in() -> None:
    state = Sim(fan_doc(), {"items": []}).run()
    assert state.status == "completed"
    assert state.output == []


@pytest.mark.parametrize(
    ("run_input", "item_key", "message"),
    [
        ({"items": "nope"}, "{{ item.id }}", "items expression must resolve to an array"),
        ({"items": [{"id": "a"}, {"id": "a"}]}, "{{ item.id }}", "Duplicate itemKey 'a'"),
        ({"items": [{"id": ""}]}, "{{ item.id }}", "itemKey must resolve to a non-empty string"),
        ({"items": [{"id": 1}]}, "{{ item.id }}", "itemKey must resolve to a non-empty string"),
    ],
    ids=["not-array", "duplicate", "empty-key", "non-string-key"],
)
def test_bad_branch_lists_fail_with_runtime_config_error(
    run_input: Any, item_key: str, message: str
) -> None:
    sim = Sim(fan_doc(item_key=item_key), run_input)
    state = sim.run()
    assert state.status == "failed"
    assert state.error["causeCode"] == "runtime_config_error"
    assert message in state.error["message"]
    assert [e.type for e in sim.events()][2:] == [
        "StepScheduled",
        "StepAttemptStarted",
        "StepFailed",
        "RunFailed",
    ]


def test_items_over_max_branches_fail_and_the_engine_cap_raises_the_limit() -> None:
    run_input = items(*(f"k{i}" for i in range(150)))
    state = Sim(fan_doc(max_branches=100), run_input).run()
    assert state.status == "failed"
    assert "exceeding maxBranches 100" in state.error["message"]
    sim = Sim(
        fan_doc(max_branches=100, max_concurrency=50),
        run_input,
        ctx_options={"max_branches_cap": 1000},
    )
    state = sim.run()
    assert state.status == "completed"
    assert len(state.output) == 150
    # A step declaring a smaller maxBranches keeps its own limit.
    small = Sim(fan_doc(max_branches=5), items(*"abcdef"), ctx_options={"max_branches_cap": 1000})
    assert small.run().status == "failed"


def test_item_keys_are_uri_encoded_in_branch_paths() -> None:
    sim = Sim(fan_doc(), items("a.b c/d"))
    sim.run()
    assert sim.types("ParallelBranchScheduled")[0]["branchPath"] == "p[a%2Eb%20c%2Fd]"


def test_branch_child_chain_and_last_step_output() -> None:
    children = [
        tool("first", input={"id": "{{ item.id }}"}),
        tool("second", needs=["first"], input={"prev": "{{ steps.first.output.input.id }}"}),
    ]
    state = Sim(fan_doc(children=children), items("x")).run()
    assert state.output[0]["output"] == {"path": "p[x].second", "input": {"prev": "x"}}


def test_branch_steps_see_completed_top_level_needs() -> None:
    doc = lwir_doc(
        [
            tool("prep"),
            parallel(
                "p",
                [
                    tool(
                        "use",
                        needs=["prep"],
                        input={"prep": "{{ steps.prep.output.path }}", "id": "{{ item.id }}"},
                    )
                ],
                needs=["prep"],
            ),
        ],
        output_schema={"type": "array"},
    )
    state = Sim(doc, items("a")).run()
    assert state.output[0]["output"]["input"] == {"prep": "prep", "id": "a"}


def acceptance_doc(max_visits: int = 5, mode: str = "all_settled") -> dict[str, Any]:
    """upstream decision-loop.acceptance: worker -> review -> route per candidate."""
    children = [
        tool(
            "worker",
            tool_name="worker",
            maxVisits=max_visits,
            input={"id": "{{ item.id }}"},
            output=OBJECT,
        ),
        tool(
            "review",
            tool_name="review",
            needs=["worker"],
            maxVisits=max_visits,
            input={"id": "{{ item.id }}"},
            output=OBJECT,
        ),
        {
            "id": "route",
            "uses": "decision",
            "needs": ["review"],
            "maxVisits": max_visits,
            "with": {
                "cases": [{"when": "{{ steps.review.lastOutput.passed }}", "to": "end"}],
                "default": "worker",
            },
        },
    ]
    return lwir_doc(
        [
            parallel(
                "review-cands",
                children,
                items="{{ input.candidates }}",
                max_branches=5,
                failure_mode=mode,
                output_step="review",
            )
        ],
        output_schema={"type": "array"},
    )


def review_worker(thresholds: dict[str, int], calls: dict[tuple[str, str], int]) -> Any:
    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        key = (dispatch.step_id, step_input["id"])
        calls[key] = calls.get(key, 0) + 1
        if dispatch.step_id == "review":
            passed = calls[key] >= thresholds.get(step_input["id"], 99)
            return ("ok", {"passed": passed, "reviewId": step_input["id"]})
        return ("ok", {"workerId": step_input["id"]})

    return worker


def test_acceptance_candidates_loop_one_two_three_times() -> None:
    calls: dict[tuple[str, str], int] = {}
    run_input = {"candidates": [{"id": "cand_1"}, {"id": "cand_2"}, {"id": "cand_3"}]}
    rng = random.Random(3)
    state = Sim(acceptance_doc(), run_input).run(
        review_worker({"cand_1": 1, "cand_2": 2, "cand_3": 3}, calls),
        choose=lambda ready: rng.randrange(len(ready)),
    )
    assert state.status == "completed"
    assert calls == {
        ("worker", "cand_1"): 1,
        ("worker", "cand_2"): 2,
        ("worker", "cand_3"): 3,
        ("review", "cand_1"): 1,
        ("review", "cand_2"): 2,
        ("review", "cand_3"): 3,
    }
    assert [e["itemKey"] for e in state.output] == ["cand_1", "cand_2", "cand_3"]
    assert all(e["status"] == "completed" and e["output"]["passed"] for e in state.output)


def test_acceptance_max_visits_exceeded_fails_the_run() -> None:
    calls: dict[tuple[str, str], int] = {}
    sim = Sim(acceptance_doc(max_visits=3, mode="fail_fast"), {"candidates": [{"id": "cand_x"}]})
    state = sim.run(review_worker({}, calls))
    assert state.status == "failed"
    assert state.error["causeCode"] == "max_visits_exceeded"
    assert state.error["failedStepPath"] == "review-cands[cand_x].worker.visit[3]"
    assert calls == {("worker", "cand_x"): 3, ("review", "cand_x"): 3}
    (branch_failed,) = sim.types("ParallelBranchFailed")
    assert branch_failed["error"]["causeCode"] == "max_visits_exceeded"


def test_acceptance_terminal_cause_is_fatal_even_when_all_settled() -> None:
    calls: dict[tuple[str, str], int] = {}
    sim = Sim(acceptance_doc(max_visits=2), {"candidates": [{"id": "x"}, {"id": "y"}]})
    state = sim.run(review_worker({"y": 1}, calls))
    assert state.status == "failed"
    assert state.error["causeCode"] == "max_visits_exceeded"
    assert not sim.types("ParallelGroupFailed")  # a fatal cause fails the step directly


def test_acceptance_resume_from_a_pre_seeded_loop_visit() -> None:
    """Events of a killed run (worker.visit[0] of cand_a done) resume without redoing it."""
    run_input = {"candidates": [{"id": "cand_a"}, {"id": "cand_b"}]}
    first = Sim(acceptance_doc(), run_input)
    first.decide()
    dispatch = next(d for d in first.outstanding.values() if "cand_a" in d.step_path)
    first.start(dispatch)
    first.finish(dispatch, ("ok", {"workerId": "cand_a", "live": False}))
    calls: dict[tuple[str, str], int] = {}
    # A fresh scheduler on the same log (no memory of what was dispatched).
    state = first.run(review_worker({"cand_a": 2, "cand_b": 1}, calls))
    assert state.status == "completed"
    assert calls[("worker", "cand_a")] == 1  # only visit[1]; visit[0] was already done
    assert calls[("review", "cand_a")] == 2


def test_decide_on_a_large_group_schedules_only_up_to_concurrency() -> None:
    sim = Sim(
        fan_doc(max_branches=100, max_concurrency=25),
        items(*(f"k{i}" for i in range(600))),
        ctx_options={"max_branches_cap": 1000},
    )
    decision = sim.decide()
    assert len(decision.dispatch) == 25
    assert decide(sim.ctx, sim.state).events == ()


@pytest.mark.parametrize("memoize", [True, False])
def test_max_in_flight_holds_a_wide_window_to_the_fleet(memoize: bool) -> None:
    # maxConcurrency 25 on a fleet of 4 slots: 4 branches in flight, the other 21 the
    # window allows are reported held back; refills keep it at 4 until the items run out.
    sim = Sim(
        fan_doc(max_branches=100, max_concurrency=25),
        items(*(f"k{i}" for i in range(30))),
        ctx_options={"max_branches_cap": 1000, "max_in_flight": 4, "memoize": memoize},
    )
    first = sim.decide()
    assert [d.step_path for d in first.dispatch] == [f"p[k{i}].score" for i in range(4)]
    assert first.held_back == 21
    started = sim.types("ParallelGroupStarted")[0]
    assert started["maxConcurrency"] == 25  # the event keeps what the workflow declared
    peak = 0
    backlog: list[int] = []

    def watch(s: Sim) -> None:
        nonlocal peak
        group = s.state.parallel_groups.get("p")
        if group is not None:
            peak = max(peak, sum(1 for b in group.branches.values() if b.status == "scheduled"))
        backlog.append(decide(s.ctx, s.state).held_back)

    rng = random.Random(3)
    state = sim.run(choose=lambda ready: rng.randrange(len(ready)), on_round=watch)
    assert state.status == "completed"
    assert [entry["itemKey"] for entry in state.output] == [f"k{i}" for i in range(30)]
    assert peak == 4
    # The backlog shrinks as branches are scheduled, and is gone once the last ones are.
    assert backlog == sorted(backlog, reverse=True)
    assert backlog[-1] == 0 and max(backlog) <= 21


def test_max_in_flight_above_max_concurrency_changes_nothing() -> None:
    doc = fan_doc(max_concurrency=2)
    run_input = items(*"abcde")
    plain = Sim(doc, run_input).decide()
    capped = Sim(doc, run_input, ctx_options={"max_in_flight": 10}).decide()
    assert capped.events == plain.events
    assert capped.dispatch == plain.dispatch
    assert (plain.held_back, capped.held_back) == (0, 0)


def test_a_smaller_max_in_flight_later_only_slows_the_refills() -> None:
    # A decision under a larger fleet scheduled 3; a look that sees 1 slot schedules
    # nothing new until fewer than 1 is in flight, and never unschedules anything.
    wide = Sim(fan_doc(max_concurrency=3), items(*"abcdef"), ctx_options={"max_in_flight": 3})
    wide.append(list(wide.decide().events))
    narrow = dataclasses.replace(wide.ctx, max_in_flight=1)
    decision = decide(narrow, wide.state)
    assert decision.events == ()
    assert len(decision.dispatch) == 3  # what is scheduled is still due
    assert decision.held_back == 0  # the window is over the cap already: nothing more fits
