"""decide() with claims: the refills another owner holds are left out; and what a decision
schedules, may ride with and leaves for another round is part of the decision (no fleet, no
Redis)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from little_dist.scheduling import Claims, Decision, RunContext, StepDispatch, decide
from little_dist.scheduling.fanout import _lane_refill
from tests.test_scheduling import routing_doc
from tests.test_scheduling_sim import Sim, echo_worker, lwir_doc, parallel, tool


def fan_sim(keys: Sequence[str], *, window: int, first_window: int, memoize: bool = True) -> Sim:
    """A fan-out ``p`` over ``keys`` (one branch per letter) with ``maxConcurrency``
    ``window``, decided first under ``max_in_flight`` ``first_window``: the room between the
    two is what an earlier look left, which anyone may fill."""
    doc = lwir_doc(
        [parallel("p", [tool("score")], max_concurrency=window)],
        output_schema={"type": "array"},
    )
    options = {"max_in_flight": first_window, "memoize": memoize}
    return Sim(doc, {"items": [{"id": key} for key in keys]}, ctx_options=options)


def finish_all(sim: Sim) -> None:
    """Start and complete every attempt dispatched so far (their branches' ends are the next
    decision's to record)."""
    for dispatch in list(sim.outstanding.values()):
        sim.start(dispatch)
        sim.finish(dispatch, echo_worker(sim, dispatch, None))


def uncapped(sim: Sim) -> RunContext:
    return RunContext(sim.version, sim.run_input, sim.run_id, memoize=sim.ctx.memoize)


def branches(decision: Decision) -> list[str]:
    return [e.payload["branchPath"] for e in decision.events if e.type == "ParallelBranchScheduled"]


def paths(decision: Decision) -> set[str]:
    return {
        str(e.payload.get("stepPath") or "") + "|" + str(e.payload.get("branchPath") or "")
        for e in decision.events
    }


def scheduled_by(decision: Decision) -> set[str]:
    return set(branches(decision))


def ended_by(decision: Decision) -> list[str]:
    return [
        e.payload["branchPath"]
        for e in decision.events
        if e.type in ("ParallelBranchCompleted", "ParallelBranchFailed")
    ]


@pytest.mark.parametrize("memoize", [True, False])
def test_each_refill_is_the_next_branch_in_the_lane_of_the_end_it_refills(memoize: bool) -> None:
    # a, b, c in flight (branches 0, 1, 2 of a window of 4: lanes 0, 1, 2) and completed;
    # lane 3 has room an earlier look left (d: anyone's). The next branch of lane 0 is e,
    # of lane 1 f, of lane 2 g.
    sim = fan_sim("abcdefgh", window=4, first_window=3, memoize=memoize)
    sim.decide()
    assert sorted(sim.outstanding) == [("p[a].score", 1), ("p[b].score", 1), ("p[c].score", 1)]
    finish_all(sim)
    ctx = uncapped(sim)

    def decided(own: list[str]) -> Decision:
        return decide(ctx, sim.state, Claims(own_ends=frozenset(f"p[{k}]" for k in own)))

    # Process P committed a and c; process Q committed b. Each records its own ends only and
    # refills them in their lanes; b, completed by Q, is in flight for P until Q records it.
    p = decided(["a", "c"])
    assert ended_by(p) == ["p[a]", "p[c]"]
    assert branches(p) == ["p[e]", "p[g]", "p[d]"]
    assert [d.step_path for d in p.dispatch] == ["p[e].score", "p[g].score", "p[d].score"]
    assert p.left == ()
    q = decided(["b"])
    assert ended_by(q) == ["p[b]"]
    assert branches(q) == ["p[f]", "p[d]"]
    # Deciding at once on the same view, the two refill their ends with different branches
    # (only the room an earlier look left is anyone's).
    assert scheduled_by(p) & scheduled_by(q) == {"p[d]"}
    # Nothing of b in P's decision: neither its end nor its lane's next branch.
    assert not any("p[b]" in path or "p[f]" in path for path in paths(p))
    # Every end ours: the same branches as without claims (which go in item order).
    everything = decided(["a", "b", "c"])
    plain = decide(ctx, sim.state)
    assert branches(everything) == ["p[e]", "p[f]", "p[g]", "p[d]"]
    assert branches(plain) == ["p[d]", "p[e]", "p[f]", "p[g]"]
    assert ended_by(everything) == ended_by(plain) == ["p[a]", "p[b]", "p[c]"]
    assert sorted(map(repr, everything.events)) == sorted(map(repr, plain.events))
    assert set(everything.dispatch) == set(plain.dispatch)
    assert everything.left == plain.left == ()


def test_an_end_that_failed_is_recorded_by_anyone_and_its_refill_left_to_its_owner() -> None:
    # A failure settles the fan-out's fate (fail-fast stops it), so any look records it.
    doc = lwir_doc(
        [parallel("p", [tool("score")], max_concurrency=2, failure_mode="all_settled")],
        output_schema={"type": "array"},
    )
    sim = Sim(doc, {"items": [{"id": key} for key in "abcd"]})
    sim.decide()
    failing = sim.outstanding.pop(("p[a].score", 1))
    sim.start(failing)
    sim.finish(failing, ("fail", {"name": "Boom", "message": "boom", "retriable": False}))
    decision = decide(sim.ctx, sim.state, Claims(own_ends=frozenset()))
    assert ended_by(decision) == ["p[a]"]
    assert decision.left == ("p[c]",)  # (a's lane: a window of 2 puts c after a)
    assert branches(decision) == []


@pytest.mark.parametrize("memoize", [True, False])
def test_the_look_after_the_last_commit_ends_the_group_whoever_committed(memoize: bool) -> None:
    # c and d are the last branches (their lanes have nothing after them). P commits c and
    # decides before Q's commit of d; Q commits d and decides on a view with both commits,
    # before P's decision is appended. Nothing can be refilled, so Q records c's end as well
    # as its own and ends the group: no look has to wait for the other's.
    sim = fan_sim("abcd", window=2, first_window=2, memoize=memoize)
    sim.decide()
    for branch in "ab":
        dispatch = sim.outstanding.pop((f"p[{branch}].score", 1))
        sim.start(dispatch)
        sim.finish(dispatch, echo_worker(sim, dispatch, None))
    refills = decide(sim.ctx, sim.state, Claims(own_ends=frozenset({"p[a]", "p[b]"})))
    assert branches(refills) == ["p[c]", "p[d]"]
    sim.append(list(refills.events))
    c, d = (
        StepDispatch("run_sim", f"p[{k}].score", "score", 1, "worker", "execute_step") for k in "cd"
    )
    for dispatch in (c, d):
        sim.start(dispatch)
    sim.finish(c, echo_worker(sim, c, None))
    by_p = decide(sim.ctx, sim.state, Claims(own_ends=frozenset({"p[c]"})))
    assert ended_by(by_p) == ["p[c]"]
    sim.finish(d, echo_worker(sim, d, None))
    by_q = decide(sim.ctx, sim.state, Claims(own_ends=frozenset({"p[d]"})))
    assert ended_by(by_q) == ["p[c]", "p[d]"]
    assert "ParallelGroupCompleted" in [e.type for e in by_q.events]
    sim.append(list(by_p.events))
    sim.append(list(by_q.events))
    assert decide(sim.ctx, sim.state).done


def test_a_branch_the_decision_itself_completes_is_recorded_by_any_look() -> None:
    # Another process committed a's score; the decision settles a's route inline (to the
    # end of the branch): the branch ends by this call's own events, so this look records it
    # (nobody else would), and leaves the lane's refill to the committer.
    children = [
        tool("score"),
        {
            "id": "route",
            "uses": "decision",
            "needs": ["score"],
            "with": {
                "cases": [{"when": "{{ steps.score.output.value == 0 }}", "to": "end"}],
                "default": "low",
            },
        },
        tool("low"),
    ]
    doc = lwir_doc([parallel("p", children, max_concurrency=2)], output_schema={"type": "array"})
    sim = Sim(doc, {"items": [{"id": key} for key in "abc"]})
    sim.decide()
    score = sim.outstanding.pop(("p[a].score", 1))
    sim.start(score)
    sim.finish(score, ("ok", {"value": 0}))
    decision = decide(sim.ctx, sim.state, Claims(own_ends=frozenset()))
    assert ended_by(decision) == ["p[a]"]
    assert decision.left == ("p[c]",)
    # Without the inline step (the branch's own end only a commit away), it is the
    # committer's: see test_each_refill_is_the_next_branch_in_the_lane_of_the_end_it_refills.


def test_a_branch_left_before_stays_left_and_is_nobody_elses_refill() -> None:
    # e was left by an earlier round of the same look: it stays left (in flight for the
    # window), and a's lane goes on past it (no branch there: the room goes to d).
    sim = fan_sim("abcdefgh", window=4, first_window=3)
    sim.decide()
    finish_all(sim)
    own = frozenset({"p[a]", "p[b]", "p[c]"})
    decision = decide(uncapped(sim), sim.state, Claims(own_ends=own, left=frozenset({"p[e]"})))
    assert decision.left == ("p[e]",)
    assert branches(decision) == ["p[f]", "p[g]", "p[d]"]
    # Once taken back (no longer in ``left``), it is a's refill again.
    again = decide(uncapped(sim), sim.state, Claims(own_ends=own))
    assert branches(again) == ["p[e]", "p[f]", "p[g]", "p[d]"]


def test_a_left_branch_leaves_everything_inside_it_and_no_branch_whose_key_extends_it() -> None:
    sim = fan_sim(["z", "a", "ab"], window=2, first_window=1)
    sim.decide()
    assert sorted(sim.outstanding) == [("p[z].score", 1)]
    finish_all(sim)
    claims = Claims(own_ends=frozenset({"p[z]"}), left=frozenset({"p[a]"}))
    decision = decide(uncapped(sim), sim.state, claims)
    # a stays left, with its steps; ab (the next in z's lane) is scheduled, with its steps.
    assert decision.left == ("p[a]",)
    assert branches(decision) == ["p[ab]"]
    assert [p for p in paths(decision) if p.startswith("p[a].") or p.endswith("|p[a]")] == []
    assert [d.step_path for d in decision.dispatch] == ["p[ab].score"]
    assert decision.scheduled == decision.dispatch


@pytest.mark.parametrize("window", [1, 3, 4, 7])
def test_a_lane_refill_is_the_first_unscheduled_branch_after_the_end_in_its_lane(
    window: int,
) -> None:
    unscheduled = [index for index in range(40) if index % 5 != 2]
    for ended in range(0, 30):
        for taken in (set(), {ended + window}, {ended + window, ended + 2 * window}):
            expected = next(
                (
                    index
                    for index in unscheduled
                    if index > ended and (index - ended) % window == 0 and index not in taken
                ),
                None,
            )
            assert _lane_refill(unscheduled, ended, window, taken) == expected


def work(path: str) -> StepDispatch:
    return StepDispatch("run_sim", path, path.rsplit(".", 1)[-1], 1, "worker", "execute_step")


def test_a_decision_says_which_attempts_it_schedules_and_which_it_may_ride_with() -> None:
    sim = Sim(lwir_doc([tool("a"), tool("b", needs=["a"])]))
    first = sim.decide()
    assert first.scheduled == first.dispatch == (work("a"),)
    assert first.rider == work("a")  # nothing but a's schedule
    again = decide(sim.ctx, sim.state)  # scheduled before: dispatched, not scheduled
    assert again.dispatch == (work("a"),) and again.scheduled == () and again.rider is None
    finish_all(sim)
    chain = decide(sim.ctx, sim.state)
    assert [e.occurrence_id for e in chain.events] == ["sched:b:1"]
    assert chain.scheduled == (work("b"),) and chain.rider == work("b")


def test_a_refill_rides_only_when_the_decision_schedules_nothing_else() -> None:
    sim = fan_sim("abcdefgh", window=4, first_window=3)
    sim.decide()
    finish_all(sim)
    ctx = uncapped(sim)
    # Three ends and their refills plus one more: four attempts, nothing to ride with.
    assert decide(ctx, sim.state).rider is None
    # Only a's end is ours (b and c are others', in flight until they record them; g is
    # left): the decision records a's end and e's schedule, so it rides with e.
    claims = Claims(own_ends=frozenset({"p[a]"}), left=frozenset({"p[g]"}))
    refill = decide(ctx, sim.state, claims)
    assert branches(refill) == ["p[e]"]
    assert refill.scheduled == (work("p[e].score"),)
    assert refill.rider == work("p[e].score")
    kinds = [e.type for e in refill.events]
    assert kinds == ["ParallelBranchCompleted", "ParallelBranchScheduled", "StepScheduled"]


def test_a_decision_step_settled_inline_rides_with_nothing() -> None:
    sim = Sim(routing_doc())
    sim.decide()
    (score,) = sim.outstanding.values()
    sim.start(score)
    sim.finish(score, ("ok", {"value": 3}))  # routes to low
    decision = decide(sim.ctx, sim.state)
    assert decision.scheduled == (work("low"),)
    assert decision.rider is None  # it also records the decision step


def _retry_doc() -> dict[str, Any]:
    return lwir_doc([tool("a", retry={"maxAttempts": 2})])


def test_a_retry_is_dispatched_but_not_scheduled_again() -> None:
    sim = Sim(_retry_doc())
    sim.decide()
    (dispatch,) = sim.outstanding.values()
    sim.start(dispatch)
    sim.finish(dispatch, ("fail", {"name": "Boom", "message": "boom", "retriable": True}))
    decision = decide(sim.ctx, sim.state)
    assert [(d.step_path, d.attempt) for d in decision.dispatch] == [("a", 2)]
    assert decision.scheduled == () and decision.rider is None


@pytest.mark.parametrize("memoize", [True, False])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_two_owners_deciding_with_their_claims_run_every_branch_once_within_the_window(
    seed: int, memoize: bool
) -> None:
    # Two processes share a fan-out: each commit is one's, who then decides with its claims;
    # often both decide at once, on the same view of the log, and both append. Their
    # refills never meet; every branch is scheduled, the window holds, and the run
    # completes as without claims.
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(23)]
    sim = fan_sim(keys, window=4, first_window=4, memoize=memoize)
    own: dict[str, set[str]] = {"P": set(), "Q": set()}

    def decided(owner: str) -> Decision:
        return decide(sim.ctx, sim.state, Claims(own_ends=frozenset(own[owner])))

    def record(decision: Decision) -> None:
        sim.append(list(decision.events))
        for ended in decision.events:
            if ended.type == "ParallelBranchCompleted":
                for mine in own.values():
                    mine.discard(ended.payload["branchPath"])
        for dispatch in decision.dispatch:
            sim.outstanding.setdefault((dispatch.step_path, dispatch.attempt), dispatch)

    decision = decide(sim.ctx, sim.state)  # (the run's start, as a client's look)
    record(decision)
    met = 0
    for _ in range(200):
        if decision.done:
            break
        for owner in rng.sample(["P", "Q"], rng.randint(1, 2)):
            if sim.outstanding:
                ready = sorted(sim.outstanding)
                dispatch = sim.outstanding.pop(ready[rng.randrange(len(ready))])
                sim.start(dispatch)
                sim.finish(dispatch, echo_worker(sim, dispatch, None))
                own[owner].add(dispatch.step_path.split(".")[0])
        if rng.random() < 0.6:
            p, q = decided("P"), decided("Q")  # at once, on the same view
            assert not scheduled_by(p) & scheduled_by(q)
            met += bool(scheduled_by(p) and scheduled_by(q))
            record(p)
            record(q)
            decision = q
        else:
            decision = decided(rng.choice(["P", "Q"]))
            record(decision)
        if not decision.done and not sim.outstanding and not any(own.values()):
            decision = decide(sim.ctx, sim.state)  # (nobody's: as the scheduler's sweep)
            record(decision)
        assert len(sim.outstanding) + len(sim.running) <= 4
    assert sim.state.status == "completed"
    assert met  # (the two did refill at once)
    scheduled = [p["branchPath"] for p in sim.types("ParallelBranchScheduled")]
    assert sorted(scheduled) == sorted(f"p[{key}]" for key in keys)
    output = sim.types("RunCompleted")[0]["output"]
    assert [entry["itemKey"] for entry in output] == keys


def test_a_decision_says_when_deciding_again_would_find_nothing_new() -> None:
    # Schedules only: in flight, and nothing for another round.
    chain = Sim(lwir_doc([tool("a"), tool("b", needs=["a"])]))
    first = chain.decide()
    assert first.in_flight_only and first.last_round
    # A parallel step's start (its attempt, group and branches): in flight only.
    fan = fan_sim("abcd", window=4, first_window=3)
    started = fan.decide()
    assert "StepAttemptStarted" in [e.type for e in started.events]
    assert started.in_flight_only and not started.last_round
    # Branch ends and their refills: the same call refilled the slots, nothing left to decide.
    finish_all(fan)
    refills = decide(uncapped(fan), fan.state)
    assert not refills.in_flight_only and refills.last_round
    # A decision step settled inline, or the run's end: another round may have work.
    routed = Sim(routing_doc())
    routed.decide()
    (score,) = routed.outstanding.values()
    routed.start(score)
    routed.finish(score, ("ok", {"value": 3}))
    inline = decide(routed.ctx, routed.state)
    assert not inline.in_flight_only and not inline.last_round
    finish_all(chain)
    chain.decide()
    finish_all(chain)
    end = decide(chain.ctx, chain.state)
    assert end.done and [e.type for e in end.events] == ["RunCompleted"]
    assert not end.in_flight_only and not end.last_round
