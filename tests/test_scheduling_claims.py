"""decide() with claims: the refills another owner holds are left out; and what a decision
schedules, may ride with and leaves for another round is part of the decision (no fleet, no
Redis)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from little_dist.scheduling import Claims, Decision, RunContext, StepDispatch, decide
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


@pytest.mark.parametrize("memoize", [True, False])
def test_each_refill_goes_with_the_end_it_refills_and_is_left_when_another_owner_ended_it(
    memoize: bool,
) -> None:
    # a, b, c in flight and ended; the window has room for one more (a fourth branch fills
    # room an earlier look left: anyone's). d goes with a's end, e with b's, f with c's.
    sim = fan_sim("abcdefgh", window=4, first_window=3, memoize=memoize)
    sim.decide()
    assert sorted(sim.outstanding) == [("p[a].score", 1), ("p[b].score", 1), ("p[c].score", 1)]
    finish_all(sim)
    ctx = uncapped(sim)

    def decided(own: list[str]) -> Decision:
        return decide(ctx, sim.state, Claims(own_ends=frozenset(f"p[{k}]" for k in own)))

    # Process P committed a and c; process Q committed b.
    p = decided(["a", "c"])
    assert branches(p) == ["p[d]", "p[f]", "p[g]"]
    assert p.left == ("p[e]",)
    q = decided(["b"])
    assert branches(q) == ["p[e]", "p[g]"]
    assert q.left == ("p[d]", "p[f]")
    # A left branch is in flight for the window (its owner schedules it): h waits.
    assert "p[h]" not in branches(q)
    # Left means not recorded and not dispatched: nothing of e in P's decision.
    assert not any("p[e]" in path for path in paths(p))
    assert [d.step_path for d in p.dispatch] == ["p[d].score", "p[f].score", "p[g].score"]
    # Every end ours, or no claims at all: nothing is left, and the two agree.
    everything = decided(["a", "b", "c"])
    plain = decide(ctx, sim.state)
    assert branches(everything) == branches(plain) == ["p[d]", "p[e]", "p[f]", "p[g]"]
    assert everything.events == plain.events and everything.dispatch == plain.dispatch
    assert everything.left == plain.left == ()
    # The ends themselves are recorded whoever owns them.
    ends = [e.payload["branchPath"] for e in q.events if e.type == "ParallelBranchCompleted"]
    assert ends == ["p[a]", "p[b]", "p[c]"]


def test_a_branch_left_before_stays_left_and_takes_no_end() -> None:
    # d was left by an earlier round of the same look: it stays left (in flight for the
    # window) and the ends pair with the branches after it.
    sim = fan_sim("abcdefgh", window=4, first_window=3)
    sim.decide()
    finish_all(sim)
    own = frozenset({"p[a]", "p[b]", "p[c]"})
    decision = decide(uncapped(sim), sim.state, Claims(own_ends=own, left=frozenset({"p[d]"})))
    assert branches(decision) == ["p[e]", "p[f]", "p[g]"]
    assert decision.left == ("p[d]",)
    # Once taken back (no longer in ``left``), it is anyone's again.
    again = decide(uncapped(sim), sim.state, Claims(own_ends=own))
    assert branches(again) == ["p[d]", "p[e]", "p[f]", "p[g]"]


def test_a_left_branch_leaves_everything_inside_it_and_no_branch_whose_key_extends_it() -> None:
    sim = fan_sim(["z", "a", "ab"], window=2, first_window=1)
    sim.decide()
    assert sorted(sim.outstanding) == [("p[z].score", 1)]
    finish_all(sim)
    decision = decide(uncapped(sim), sim.state, Claims(own_ends=frozenset()))
    # z's end was another process's: a (paired with it) is left, with its steps; ab fills
    # room an earlier look left and is scheduled, with its steps.
    assert decision.left == ("p[a]",)
    assert branches(decision) == ["p[ab]"]
    assert [p for p in paths(decision) if p.startswith("p[a].") or p.endswith("|p[a]")] == []
    assert [d.step_path for d in decision.dispatch] == ["p[ab].score"]
    assert decision.scheduled == decision.dispatch


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
    # Ends of a, b, c; only d is ours (the others' refills left, g capped by the claims'
    # left branches): the decision records ends and d's schedule, so it rides with d.
    claims = Claims(own_ends=frozenset({"p[a]"}), left=frozenset({"p[g]"}))
    refill = decide(ctx, sim.state, claims)
    assert branches(refill) == ["p[d]"]
    assert refill.scheduled == (work("p[d].score"),)
    assert refill.rider == work("p[d].score")
    kinds = [e.type for e in refill.events]
    assert kinds == ["ParallelBranchCompleted"] * 3 + ["ParallelBranchScheduled", "StepScheduled"]


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
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_two_owners_deciding_with_their_claims_run_every_branch_once_within_the_window(
    seed: int, memoize: bool
) -> None:
    # Two processes share a fan-out: each commit is one's, who then decides with its claims;
    # sometimes the other decides first (it records the end and leaves the refill, which the
    # committer then schedules as room left by an earlier look). Every branch is scheduled
    # once, the window holds, and the run completes as without claims.
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    sim = fan_sim(keys, window=3, first_window=3, memoize=memoize)
    own: dict[str, set[str]] = {"P": set(), "Q": set()}
    left: list[str] = []

    def look(owner: str) -> Decision:
        claims = Claims(own_ends=frozenset(own[owner]))
        decision = decide(sim.ctx, sim.state, claims)
        sim.append(list(decision.events))
        left.extend(decision.left)
        for ended in decision.events:
            if ended.type == "ParallelBranchCompleted":
                for mine in own.values():
                    mine.discard(ended.payload["branchPath"])
        for dispatch in decision.dispatch:
            sim.outstanding.setdefault((dispatch.step_path, dispatch.attempt), dispatch)
        return decision

    decision = look("P")
    for _ in range(100):
        if decision.done:
            break
        ready = sorted(sim.outstanding)
        dispatch = sim.outstanding.pop(ready[rng.randrange(len(ready))])
        sim.start(dispatch)
        sim.finish(dispatch, echo_worker(sim, dispatch, None))
        owner, other = rng.choice([("P", "Q"), ("Q", "P")])
        own[owner].add(dispatch.step_path.split(".")[0])
        if rng.random() < 0.5:
            look(other)
        decision = look(owner)
        assert len(sim.outstanding) <= 3
    assert sim.state.status == "completed"
    assert left  # (the other owner did leave refills)
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
