"""decide(): chains, needs, decisions and loops, retries, fixer, cancel, finalization."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from little_dist.events import EventInput
from little_dist.scheduling import Decision, RunContext, StepDispatch, decide
from little_dist.scheduling.step_graph import plan_for
from tests.test_scheduling_sim import Outcome, Sim, lwir_doc, tool

# -- helpers ---------------------------------------------------------------------------------


def completed_paths(sim: Sim) -> list[str]:
    return [p["stepPath"] for p in sim.types("StepCompleted")]


def loop_doc(max_visits: int, *, after: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """draft -> review -> route (decision): passed -> end, else back to draft."""
    steps = [
        tool("draft", maxVisits=max_visits),
        tool("review", needs=["draft"], maxVisits=max_visits),
        {
            "id": "route",
            "uses": "decision",
            "needs": ["review"],
            "maxVisits": max_visits,
            "with": {
                "cases": [{"when": "{{ steps.review.lastOutput.passed }}", "to": "end"}],
                "default": "draft",
            },
        },
    ]
    return lwir_doc(steps + (after or []))


def review_passes_on(visit: int) -> Any:
    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        if dispatch.step_id == "review":
            index = int(dispatch.step_path.split("[")[1].rstrip("]"))
            return ("ok", {"passed": index + 1 >= visit, "visit": index})
        return ("ok", {"path": dispatch.step_path})

    return worker


def fail_with(**error: Any) -> dict[str, Any]:
    return {"name": "Boom", "message": "boom", **error}


# -- chains and needs ------------------------------------------------------------------------


def test_linear_chain_runs_in_order_and_completes_with_terminal_output() -> None:
    sim = Sim(lwir_doc([tool("a"), tool("b", needs=["a"]), tool("c", needs=["b"])]), {"n": 1})
    state = sim.run()
    assert state.status == "completed"
    assert completed_paths(sim) == ["a", "b", "c"]
    (run_completed,) = sim.types("RunCompleted")
    assert run_completed["terminalStepPath"] == "c"
    assert run_completed["workflowVersionId"] == sim.version.id
    assert run_completed["output"] == {"path": "c", "input": {"n": 1}}
    # Each step was scheduled once, on attempt 1, by a worker dispatch.
    assert [(d.step_path, d.attempt, d.role, d.kind) for d in sim.dispatched] == [
        ("a", 1, "worker", "execute_step"),
        ("b", 1, "worker", "execute_step"),
        ("c", 1, "worker", "execute_step"),
    ]


def test_diamond_schedules_both_middle_steps_together() -> None:
    sim = Sim(
        lwir_doc(
            [tool("a"), tool("b", needs=["a"]), tool("c", needs=["a"]), tool("d", needs=["b", "c"])]
        )
    )
    sim.decide()
    (first,) = sim.outstanding.values()
    sim.start(first)
    sim.finish(first, ("ok", 1))
    decision = sim.decide()
    assert sorted(d.step_path for d in decision.dispatch) == ["b", "c"]
    assert [e.occurrence_id for e in decision.events] == ["sched:b:1", "sched:c:1"]
    state = sim.run()
    assert state.status == "completed"
    assert completed_paths(sim)[-1] == "d"


def test_needs_declared_out_of_array_order() -> None:
    sim = Sim(lwir_doc([tool("z", needs=["y"]), tool("y", needs=["x"]), tool("x")]))
    assert sim.run().status == "completed"
    assert completed_paths(sim) == ["x", "y", "z"]


def test_step_input_expressions_read_earlier_outputs() -> None:
    doc = lwir_doc([tool("a"), tool("b", needs=["a"], input={"got": "{{ steps.a.output.path }}"})])
    sim = Sim(doc)
    sim.run()
    assert sim.state.steps["b"].output == {"path": "b", "input": {"got": "a"}}


@pytest.mark.parametrize(
    ("uses", "extra"),
    [
        ("ai.generate", {"with": {"model": "m"}, "output": {"mode": "text"}}),
        (
            "code.run",
            {
                "with": {
                    "entrypoint": "main.ts",
                    "files": {
                        "main.ts": {
                            "content": "export default () => 1;",
                            "sha256": "sha256:"
                            "3c3f3b1d4f4a7fa1a4f2a2d0f3cbe7b6f7c4b8c8d9e3b7a1c6b5f1f0a2d4e6c8",
                        }
                    },
                    "sandbox": {"network": "deny"},
                },
                "output": {"mode": "json"},
            },
        ),
        ("tool.call", {"with": {"tool": "t"}, "output": {"mode": "json"}}),
    ],
    ids=["ai.generate", "code.run", "tool.call"],
)
def test_worker_step_kinds_are_dispatched_to_workers(uses: str, extra: dict[str, Any]) -> None:
    step = {"id": "only", "uses": uses, **extra}
    doc = lwir_doc([step])
    if uses == "ai.generate":
        doc["permissions"] = {"models": ["m"], "tools": []}
    if uses == "code.run":
        import hashlib

        content = "export default () => 1;"
        digest = "sha256:" + hashlib.sha256(content.encode()).hexdigest()
        step["with"]["files"]["main.ts"]["sha256"] = digest
        doc["permissions"] = {"tools": []}
    sim = Sim(doc)
    decision = sim.decide()
    assert [(d.step_path, d.role, d.kind) for d in decision.dispatch] == [
        ("only", "worker", "execute_step")
    ]
    assert decision.events[0].payload == {"stepPath": "only", "stepId": "only", "uses": uses}


# -- decisions -------------------------------------------------------------------------------


def routing_doc(default: str = "low") -> dict[str, Any]:
    return lwir_doc(
        [
            tool("score"),
            {
                "id": "route",
                "uses": "decision",
                "needs": ["score"],
                "with": {
                    "cases": [
                        {"when": "{{ steps.score.output.value > 5 }}", "to": "high"},
                        {"when": "{{ steps.score.output.value == 0 }}", "to": "end"},
                    ],
                    "default": default,
                },
            },
            tool("high"),
            tool("low"),
        ]
    )


@pytest.mark.parametrize(
    ("value", "chosen", "ran"),
    [(9, "high", "high"), (3, "low", "low"), (0, "end", "score")],
    ids=["case-high", "default-low", "end"],
)
def test_decision_routes_to_exactly_one_target(value: int, chosen: str, ran: str) -> None:
    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        return ("ok", {"value": value, "step": dispatch.step_id})

    sim = Sim(routing_doc())
    state = sim.run(worker)
    assert state.status == "completed"
    decision_done = [p for p in sim.types("StepCompleted") if p["stepPath"] == "route"]
    assert decision_done[0]["output"] == {"chosen": chosen}
    assert decision_done[0]["metadata"] == {"uses": "decision"}
    dispatched = {d.step_path for d in sim.dispatched}
    assert dispatched == {"score", ran}
    assert sim.types("RunCompleted")[0]["terminalStepPath"] == ran


def test_decision_targets_wait_for_their_decision() -> None:
    # high/low have no needs, but once the decision is armed they must wait for routing.
    sim = Sim(routing_doc())
    first = sim.decide()
    # high/low have no needs, but they are routes of `route` (not loop entries): they run
    # only once routed to.
    assert [d.step_path for d in first.dispatch] == ["score"]


def test_decision_is_evaluated_inline_with_three_events() -> None:
    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        return ("ok", {"value": 9})

    sim = Sim(routing_doc())
    sim.decide()
    for dispatch in list(sim.outstanding.values()):
        if dispatch.step_path == "score":
            sim.start(dispatch)
            sim.finish(dispatch, ("ok", {"value": 9}))
    decision = sim.decide()
    kinds = [(e.type, e.occurrence_id) for e in decision.events]
    assert kinds[:3] == [
        ("StepScheduled", "sched:route:1"),
        ("StepAttemptStarted", "start:route:1"),
        ("StepCompleted", "end:route:1"),
    ]
    assert [d.step_path for d in decision.dispatch if d.step_path != "low"] == ["high"]


def test_decision_expression_error_fails_the_run() -> None:
    doc = lwir_doc(
        [
            tool("a"),
            {
                "id": "route",
                "uses": "decision",
                "needs": ["a"],
                "with": {
                    "cases": [{"when": "{{ steps.a.output.x.y }}", "to": "b"}],
                    "default": "end",
                },
            },
            tool("b"),
        ]
    )

    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        return ("ok", {"x": None})

    state = Sim(doc).run(worker)
    assert state.status == "failed"
    assert state.error["name"] == "ExpressionError"
    assert state.error["retriable"] is False


# -- loops and maxVisits ---------------------------------------------------------------------


@pytest.mark.parametrize("passes_on", [1, 2, 3], ids=["visit-1", "visit-2", "visit-3"])
def test_loop_runs_until_review_passes(passes_on: int) -> None:
    sim = Sim(loop_doc(3))
    state = sim.run(review_passes_on(passes_on))
    assert state.status == "completed"
    drafts = [p for p in completed_paths(sim) if p.startswith("draft")]
    assert drafts == [f"draft.visit[{i}]" for i in range(passes_on)]
    routes = [
        p["output"]["chosen"]
        for p in sim.types("StepCompleted")
        if p["stepPath"].startswith("route")
    ]
    assert routes == ["draft"] * (passes_on - 1) + ["end"]
    # The run ends on the last non-decision step (every terminal is a decision target).
    assert sim.types("RunCompleted")[0]["terminalStepPath"] == f"review.visit[{passes_on - 1}]"


def test_loop_body_waits_for_the_new_visit() -> None:
    sim = Sim(loop_doc(3))
    sim.run(review_passes_on(2))
    order = completed_paths(sim)
    assert order.index("draft.visit[1]") < order.index("review.visit[1]")
    assert order.index("route.visit[0]") < order.index("draft.visit[1]")


def test_a_visit_that_started_and_did_not_complete_is_resumed_at_its_own_index() -> None:
    # Upstream's visitIndexFor rule (its run_state vectors): a loop step's next visit index
    # is the number of its completed visits, so a visit that started and did not complete
    # is run again at its own index, never skipped.
    sim = Sim(loop_doc(3))
    worker = review_passes_on(3)
    while True:
        sim.decide()
        dispatch = next(iter(sim.outstanding.values()))
        sim.start(dispatch)
        if dispatch.step_path == "draft.visit[1]":
            break
        sim.finish(dispatch, worker(sim, dispatch, sim.step_input(dispatch)))
    assert sim.decide().dispatch == ()  # running: nothing else to do
    # Its worker died: the sweep fails the attempt (retriable), the visit runs again.
    sim.finish(dispatch, ("fail", fail_with(causeCode="lease_expired", retriable=True)))
    sim.decide()
    (again,) = sim.outstanding.values()
    assert (again.step_path, again.attempt) == ("draft.visit[1]", 2)
    state = sim.run(worker)
    assert state.status == "completed"
    drafts = [p for p in completed_paths(sim) if p.startswith("draft")]
    assert drafts == ["draft.visit[0]", "draft.visit[1]", "draft.visit[2]"]


def test_exceeding_max_visits_fails_the_run_without_starting_the_visit() -> None:
    sim = Sim(loop_doc(3))
    state = sim.run(review_passes_on(99))
    assert state.status == "failed"
    assert state.error == {
        "name": "MaxVisitsExceededError",
        "message": "Step 'draft' has reached its maxVisits cap of 3.",
        "causeCode": "max_visits_exceeded",
        "failedStepPath": "draft.visit[3]",
        "retriable": False,
    }
    assert "draft.visit[3]" not in sim.state.steps
    assert len([p for p in completed_paths(sim) if p.startswith("review")]) == 3


def test_loop_then_follow_up_step_routed_by_the_decision() -> None:
    doc = lwir_doc(
        [
            tool("draft", maxVisits=2),
            {
                "id": "route",
                "uses": "decision",
                "needs": ["draft"],
                "maxVisits": 2,
                "with": {
                    "cases": [{"when": "{{ steps.draft.lastOutput.ok }}", "to": "publish"}],
                    "default": "draft",
                },
            },
            tool("publish"),
        ]
    )
    seen: list[str] = []

    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        seen.append(dispatch.step_path)
        return ("ok", {"ok": dispatch.step_path.endswith("[1]")})

    state = Sim(doc).run(worker)
    assert state.status == "completed"
    assert seen == ["draft.visit[0]", "draft.visit[1]", "publish"]


# -- retries, crashes, fixer -----------------------------------------------------------------


def failing_first(times: int, error: dict[str, Any]) -> Any:
    counts: dict[str, int] = {}

    def worker(sim: Sim, dispatch: StepDispatch, step_input: Any) -> Outcome:
        counts[dispatch.step_path] = counts.get(dispatch.step_path, 0) + 1
        if counts[dispatch.step_path] <= times:
            return ("fail", error)
        return ("ok", {"attempt": dispatch.attempt, "kind": dispatch.kind})

    return worker


def test_retriable_failure_is_retried_up_to_retry_max_attempts() -> None:
    sim = Sim(lwir_doc([tool("a", retry={"maxAttempts": 3})]))
    state = sim.run(failing_first(2, fail_with(retriable=True)))
    assert state.status == "completed"
    assert [d.attempt for d in sim.dispatched] == [1, 2, 3]
    # Retries get no second StepScheduled (upstream loops straight to StepAttemptStarted).
    assert len(sim.types("StepScheduled")) == 1


def test_retry_budget_exhausted_fails_the_run_with_the_step_error() -> None:
    sim = Sim(lwir_doc([tool("a", retry={"maxAttempts": 2})]))
    state = sim.run(failing_first(5, fail_with(retriable=True)))
    assert state.status == "failed"
    assert state.error == {"name": "Boom", "message": "boom", "retriable": False}
    assert [d.attempt for d in sim.dispatched] == [1, 2]


def test_default_is_a_single_attempt_and_run_default_can_raise_it() -> None:
    sim = Sim(lwir_doc([tool("a")]))
    assert sim.run(failing_first(1, fail_with(retriable=True))).status == "failed"
    sim = Sim(lwir_doc([tool("a")]), ctx_options={"default_max_attempts": 2})
    assert sim.run(failing_first(1, fail_with(retriable=True))).status == "completed"


@pytest.mark.parametrize(
    "cause",
    [
        "cancelled",
        "timeout",
        "capability_drift",
        "runtime_config_error",
        "step_schema_error",
        "max_visits_exceeded",
    ],
)
def test_terminal_causes_are_never_retried(cause: str) -> None:
    sim = Sim(lwir_doc([tool("a", retry={"maxAttempts": 5})]))
    state = sim.run(failing_first(1, fail_with(causeCode=cause, retriable=True)))
    assert state.status == "failed"
    assert state.error["causeCode"] == cause
    assert len(sim.dispatched) == 1


def test_non_retriable_error_is_not_retried() -> None:
    sim = Sim(lwir_doc([tool("a", retry={"maxAttempts": 5})]))
    assert sim.run(failing_first(1, fail_with(retriable=False))).status == "failed"
    assert len(sim.dispatched) == 1


def test_lease_expired_retries_do_not_consume_the_budget() -> None:
    sim = Sim(lwir_doc([tool("a")]))  # one attempt of budget
    crash = fail_with(causeCode="lease_expired", retriable=True)
    state = sim.run(failing_first(5, crash))
    assert state.status == "completed"
    assert [d.attempt for d in sim.dispatched] == [1, 2, 3, 4, 5, 6]


def test_lease_expired_retries_are_capped_at_five() -> None:
    sim = Sim(lwir_doc([tool("a")]))
    crash = fail_with(causeCode="lease_expired", retriable=True)
    state = sim.run(failing_first(6, crash))
    assert state.status == "failed"
    assert state.error["causeCode"] == "lease_expired"
    assert len(sim.dispatched) == 6


def code_step(**extra: Any) -> dict[str, Any]:
    import hashlib

    content = "export default () => 1;"
    return {
        "id": "code",
        "uses": "code.run",
        "with": {
            "entrypoint": "main.ts",
            "files": {
                "main.ts": {
                    "content": content,
                    "sha256": "sha256:" + hashlib.sha256(content.encode()).hexdigest(),
                }
            },
            "sandbox": {"network": "deny"},
        },
        "output": {"mode": "json"},
        **extra,
    }


def fixer_doc(max_attempts: int = 1) -> dict[str, Any]:
    doc = lwir_doc(
        [
            code_step(
                onFailure={
                    "fixer": {"model": "fix", "maxAttempts": max_attempts, "system": "fix it"}
                }
            )
        ]
    )
    doc["permissions"] = {"models": ["fix"], "tools": []}
    return doc


def test_fixer_attempt_is_dispatched_after_a_code_step_fails() -> None:
    sim = Sim(fixer_doc())
    state = sim.run(failing_first(1, fail_with(retriable=False)))
    assert state.status == "completed"
    assert [(d.attempt, d.role, d.kind) for d in sim.dispatched] == [
        (1, "worker", "execute_step"),
        (2, "fixer", "fix_step"),
    ]
    assert state.steps["code"].output == {"attempt": 2, "kind": "fix_step"}


def test_failed_fix_attempt_ends_the_step() -> None:
    sim = Sim(fixer_doc(max_attempts=3))
    state = sim.run(failing_first(9, fail_with(retriable=True)))
    assert state.status == "failed"
    assert [d.kind for d in sim.dispatched] == ["execute_step", "fix_step"]


def test_fixer_is_skipped_for_unfixable_causes() -> None:
    sim = Sim(fixer_doc())
    state = sim.run(failing_first(1, fail_with(causeCode="capability_drift")))
    assert state.status == "failed"
    assert [d.kind for d in sim.dispatched] == ["execute_step"]


# -- dispatch bookkeeping, idempotence, cancel -----------------------------------------------


def test_dispatch_lists_scheduled_attempts_not_yet_started() -> None:
    sim = Sim(lwir_doc([tool("a"), tool("b", needs=["a"])]))
    first = sim.decide()
    assert [d.step_path for d in first.dispatch] == ["a"]
    again = sim.decide()  # nothing new to append, but `a` is still due
    assert again.events == ()
    assert [d.step_path for d in again.dispatch] == ["a"]
    sim.start(first.dispatch[0])
    assert sim.decide().dispatch == ()  # started: the worker owns it now


def test_retry_attempt_is_dispatched_until_it_starts() -> None:
    sim = Sim(lwir_doc([tool("a", retry={"maxAttempts": 2})]))
    (first,) = sim.decide().dispatch
    sim.start(first)
    sim.finish(first, ("fail", fail_with(retriable=True)))
    for _ in range(2):
        decision = sim.decide()
        assert decision.events == ()
        assert [(d.step_path, d.attempt) for d in decision.dispatch] == [("a", 2)]


def test_decide_is_idempotent_and_reappending_records_nothing() -> None:
    sim = Sim(routing_doc())
    sim.decide()
    for dispatch in list(sim.outstanding.values()):
        if dispatch.step_path == "score":
            sim.start(dispatch)
            sim.finish(dispatch, ("ok", {"value": 9}))
    state = sim.state
    one = decide(sim.ctx, state)
    two = decide(sim.ctx, state)
    assert one == two
    assert [e.occurrence_id for e in one.events] == [e.occurrence_id for e in two.events]
    sim.append(list(one.events))
    count = sim.world.last_sequence(sim.run_id)
    sim.world.append_batch(sim.run_id, list(two.events))
    assert sim.world.last_sequence(sim.run_id) == count


def test_terminal_run_needs_nothing_more() -> None:
    sim = Sim(lwir_doc([tool("a")]))
    sim.run()
    assert decide(sim.ctx, sim.state) == Decision((), (), True)


def test_run_not_started_yet_needs_nothing() -> None:
    from little_dist.run_state import materialize_run_state

    sim = Sim(lwir_doc([tool("a")]))
    assert decide(sim.ctx, materialize_run_state([], run_id=sim.run_id)) == Decision((), (), False)


def test_cancel_request_fails_the_run() -> None:
    sim = Sim(lwir_doc([tool("a"), tool("b", needs=["a"])]))
    sim.decide()
    decision = decide(replace(sim.ctx, cancel_requested=True), sim.state)
    assert decision.done
    (event,) = decision.events
    assert (event.type, event.occurrence_id) == ("RunFailed", "run-end")
    assert event.payload["error"] == {
        "name": "AbortError",
        "message": "Run was cancelled.",
        "causeCode": "cancelled",
        "retriable": False,
    }


# -- run finalization ------------------------------------------------------------------------


def test_terminal_output_is_validated_against_the_workflow_schema() -> None:
    doc = lwir_doc(
        [tool("a")],
        output_schema={"type": "object", "required": ["answer"], "properties": {"answer": {}}},
    )
    state = Sim(doc).run()
    assert state.status == "failed"
    assert state.error["causeCode"] == "step_schema_error"
    assert state.error["name"] == "StepSchemaError"
    assert "answer" in state.error["message"]


def test_terminal_output_matching_schema_completes() -> None:
    doc = lwir_doc(
        [tool("a")],
        output_schema={"type": "object", "required": ["path"], "properties": {"path": {}}},
    )
    assert Sim(doc).run().status == "completed"


def test_output_ref_only_terminal_output_is_passed_by_ref() -> None:
    sim = Sim(lwir_doc([tool("a")]))
    (dispatch,) = sim.decide().dispatch
    sim.start(dispatch)
    sim.append(
        [
            EventInput(
                type="StepCompleted",
                payload={
                    "stepPath": "a",
                    "stepId": "a",
                    "attempt": 1,
                    "outputRef": "artifact://art_0123456789abcdef",
                },
                occurrence_id="end:a:1",
            )
        ]
    )
    decision = sim.decide()
    (event,) = decision.events
    assert event.payload == {
        "workflowVersionId": sim.version.id,
        "outputRef": "artifact://art_0123456789abcdef",
        "terminalStepPath": "a",
    }


def test_run_context_is_hashed_by_identity() -> None:
    sim = Sim(lwir_doc([tool("a")]))
    other = RunContext(sim.version, {}, sim.run_id)
    assert other != sim.ctx
    assert len({other, sim.ctx}) == 2


def test_a_step_s_downstream_is_found_when_asked_and_is_every_step_needing_it() -> None:
    # A diamond a -> (b, c) -> d, then e after d. Building a plan computes no step's
    # downstream set (for a chain of N steps those sets hold N^2/2 ids); asked, each is the
    # transitive closure of the steps needing it.
    doc = lwir_doc(
        [
            tool("a"),
            tool("b", needs=["a"]),
            tool("c", needs=["a"]),
            tool("d", needs=["b", "c"]),
            tool("e", needs=["d"]),
        ]
    )
    plan = plan_for(Sim(doc).ctx.version)
    steps = plan.top.by_id
    assert all(step._downstream is None for step in steps.values())
    assert steps["a"].downstream == {"b", "c", "d", "e"}
    assert steps["b"].downstream == {"d", "e"}
    assert steps["d"].downstream == {"e"}
    assert steps["e"].downstream == frozenset()
    assert steps["a"].downstream is steps["a"].downstream  # found once, then kept
