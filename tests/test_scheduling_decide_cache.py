"""decide() with a warm context (its per-run parallel memo in use) equals decide() with a fresh
context and with the memo off, on every state of randomized runs over parallel workflows.

The runs mix what the memo must not get wrong: branch children that are chains, decision
loops (visit paths) and retried steps; failures under fail_fast and all_settled, terminal
causes, worker crashes, retries of the parallel step itself (attempt paths), top-level needs
and steps after the fan-in, cancel. Attempts are started and finished in random order and in
bursts, decisions are sometimes not appended (the next call sees the same state), and the
warm context is also asked about earlier snapshots (a caller with a stale state).
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import little_dist.scheduling.fanout as fanout_module
from little_dist.run_state import ParallelBranchState, RunState
from little_dist.scheduling import Decision, RunContext, StepDispatch, decide
from little_dist.scheduling.walk import Walk
from tests.test_scheduling_sim import Outcome, Sim, lwir_doc, parallel, tool

OBJECT = {"mode": "object", "schema": {"type": "object"}}
Family = Callable[[random.Random], tuple[dict[str, Any], dict[str, Any]]]


# -- workflows -------------------------------------------------------------------------------


def _items(rng: random.Random, most: int = 10) -> dict[str, Any]:
    return {"items": [{"id": f"k{i:02d}"} for i in rng.sample(range(40), rng.randint(0, most))]}


def _fan_options(rng: random.Random) -> dict[str, Any]:
    options: dict[str, Any] = {
        "max_concurrency": rng.randint(1, 4),
        "failure_mode": rng.choice(["all_settled", "fail_fast"]),
        "order": rng.choice(["input", "itemKey"]),
    }
    if rng.random() < 0.4:
        options["retry"] = {"maxAttempts": 2}  # a new attempt of the parallel step itself
    return options


def single_child(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    child = tool("work", input={"id": "{{ item.id }}"})
    if rng.random() < 0.5:
        child["retry"] = {"maxAttempts": rng.randint(2, 3)}
    doc = lwir_doc([parallel("p", [child], **_fan_options(rng))], output_schema={"type": "array"})
    return doc, _items(rng)


def chain_children(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    children = [
        tool("one", input={"id": "{{ item.id }}"}, retry={"maxAttempts": 2}),
        tool("two", needs=["one"], input={"prev": "{{ steps.one.output.path }}"}),
        tool("three", needs=["one"]),
    ]
    steps = [
        tool("prep"),
        parallel("p", children, needs=["prep"], **_fan_options(rng)),
        tool("after", needs=["p"]),
    ]
    return lwir_doc(steps), _items(rng, 8)


def decision_loop(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    visits = rng.randint(2, 4)
    children = [
        tool("worker", maxVisits=visits, input={"id": "{{ item.id }}"}, output=OBJECT),
        tool("review", needs=["worker"], maxVisits=visits, output=OBJECT),
        {
            "id": "route",
            "uses": "decision",
            "needs": ["review"],
            "maxVisits": visits,
            "with": {
                "cases": [{"when": "{{ steps.review.lastOutput.passed }}", "to": "end"}],
                "default": "worker",
            },
        },
    ]
    options = _fan_options(rng)
    doc = lwir_doc(
        [parallel("p", children, output_step="review", **options)],
        output_schema={"type": "array"},
    )
    return doc, _items(rng, 6)


def two_groups(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    first = parallel("p", [tool("a", input={"id": "{{ item.id }}"})], **_fan_options(rng))
    second = parallel("q", [tool("b")], needs=["p"], **_fan_options(rng))
    return lwir_doc([first, second], output_schema={"type": "array"}), _items(rng, 6)


FAMILIES: dict[str, Family] = {
    "single": single_child,
    "chain": chain_children,
    "loop": decision_loop,
    "two-groups": two_groups,
}


# -- workers ---------------------------------------------------------------------------------


def outcome_for(rng: random.Random, dispatch: StepDispatch, *, harm: float = 1.0) -> Outcome:
    """ok mostly; else a retriable, a final, a terminal (timeout) failure or a crash."""
    roll = rng.random() / harm
    if roll < 0.08:
        return ("fail", {"name": "Flaky", "message": "again", "retriable": True})
    if roll < 0.11:
        return ("fail", {"name": "Boom", "message": "no", "retriable": False})
    if roll < 0.12:
        return ("fail", {"name": "Slow", "message": "late", "causeCode": "timeout"})
    if roll < 0.15:
        return ("fail", {"name": "Lost", "message": "crash", "causeCode": "lease_expired"})
    return ("ok", {"path": dispatch.step_path, "passed": rng.random() < 0.5})


# -- the differential check ------------------------------------------------------------------


def fresh_context(sim: Sim, **changes: Any) -> RunContext:
    ctx = RunContext(sim.version, sim.run_input, sim.run_id, **sim.ctx_options)
    return dataclasses.replace(ctx, **changes) if changes else ctx


def same_decision(sim: Sim, state: RunState) -> Decision:
    """decide with the warm context, checked against a fresh context and the memo off."""
    warm = decide(sim.ctx, state)
    fresh = decide(fresh_context(sim), state)
    reference = decide(fresh_context(sim, memoize=False), state)
    assert warm == fresh, f"warm and fresh contexts differ on {state!r}"
    assert warm == reference, f"memo and reference walk differ on {state!r}"
    return warm


def play(
    sim: Sim,
    rng: random.Random,
    *,
    cancel_at: int | None = None,
    rounds: int = 400,
    harm: float = 1.0,
    pace: float = 0.3,
) -> int:
    """Random rounds: decide (checked), maybe append, start and finish random attempts.
    ``pace``: the chance that an attempt is started (finished) in a round. Returns the number
    of rounds played."""
    history: list[RunState] = []
    for round_number in range(rounds):
        if cancel_at is not None and round_number == cancel_at:
            sim.ctx = dataclasses.replace(sim.ctx, cancel_requested=True)
            sim.ctx_options = {**sim.ctx_options, "cancel_requested": True}
        state = sim.state
        history.append(state)
        decision = same_decision(sim, state)
        if history and rng.random() < 0.25:
            same_decision(sim, rng.choice(history))  # a caller with a stale snapshot
        if decision.done:
            sim.append(list(decision.events))
            assert sim.state.status in ("completed", "failed")
            return round_number
        if rng.random() < 0.85:  # else: not appended; the next call sees the same state
            sim.append(list(decision.events))
            for dispatch in decision.dispatch:
                key = (dispatch.step_path, dispatch.attempt)
                if key not in sim.outstanding and key not in sim.running:
                    sim.outstanding[key] = dispatch
        burst = rng.random() < 0.1 * pace
        for dispatch in list(sim.outstanding.values()):
            if burst or rng.random() < pace:
                sim.start(dispatch)
        for dispatch in list(sim.running.values()):
            if burst or rng.random() < pace:
                sim.finish(dispatch, outcome_for(rng, dispatch, harm=harm))
    raise AssertionError("run did not finish")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    family=st.sampled_from(sorted(FAMILIES)),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    cancel=st.booleans(),
)
def test_warm_context_decides_like_a_fresh_one_at_every_step(
    family: str, seed: int, cancel: bool
) -> None:
    rng = random.Random(seed)
    doc, run_input = FAMILIES[family](rng)
    sim = Sim(doc, run_input, run_id=f"run_diff_{seed}")
    play(sim, rng, cancel_at=rng.randint(1, 30) if cancel else None)


@pytest.mark.parametrize(
    ("seed", "mode", "pace"),
    [
        (1, "all_settled", 0.3),
        (2, "fail_fast", 0.3),
        (3, "all_settled", 0.02),
        (4, "fail_fast", 0.02),
    ],
)
def test_wide_group_with_bursts_and_failures(seed: int, mode: str, pace: float) -> None:
    """300 branches (engine cap), concurrency 80: many records change at once (pace 0.3,
    bursts) or a few per round (pace 0.02, like a live run)."""
    rng = random.Random(seed)
    child = tool("work", input={"id": "{{ item.id }}"}, retry={"maxAttempts": 2})
    doc = lwir_doc(
        [parallel("p", [child], max_concurrency=80, failure_mode=mode)],
        output_schema={"type": "array"},
    )
    run_input = {"items": [{"id": f"k{i:03d}"} for i in range(300)]}
    sim = Sim(doc, run_input, run_id=f"run_wide_{seed}", ctx_options={"max_branches_cap": 1000})
    played = play(sim, rng, rounds=5000, harm=0.05, pace=pace)
    assert played > (100 if pace < 0.1 else 10)
    assert len(sim.state.parallel_groups["p"].branches) > 80


# -- threads and the memo itself -------------------------------------------------------------


def recorded_states(seed: int) -> tuple[Sim, list[RunState]]:
    rng = random.Random(seed)
    doc, _ = single_child(rng)
    sim = Sim(doc, {"items": [{"id": f"k{i:02d}"} for i in range(40)]}, run_id="run_threads")
    states: list[RunState] = []

    def keep(s: Sim) -> None:
        states.append(s.state)

    sim.run(
        lambda s, d, i: outcome_for(rng, d), choose=lambda r: rng.randrange(len(r)), on_round=keep
    )
    return sim, states


def test_threads_sharing_one_context_get_the_reference_decisions() -> None:
    sim, states = recorded_states(11)
    expected = [decide(fresh_context(sim, memoize=False), state) for state in states]
    shared = fresh_context(sim)
    failures: list[str] = []

    def worker(order_seed: int) -> None:
        order = list(range(len(states)))
        random.Random(order_seed).shuffle(order)
        for index in order * 3:
            if decide(shared, states[index]) != expected[index]:
                failures.append(f"state {index} (thread {order_seed})")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_a_warm_context_drives_only_the_branches_that_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After one attempt finished, the next decide re-drives that branch and the one it
    schedules, not the other in-flight branches (which it replays)."""
    doc = lwir_doc(
        [parallel("p", [tool("work")], max_concurrency=50)], output_schema={"type": "array"}
    )
    sim = Sim(
        doc,
        {"items": [{"id": f"k{i:03d}"} for i in range(400)]},
        ctx_options={"max_branches_cap": 1000},
    )
    for _ in range(3):
        sim.decide()
    first = next(iter(sim.outstanding.values()))
    sim.start(first)
    sim.finish(first, ("ok", {"done": True}))
    driven: list[str] = []
    real = fanout_module.drive_branch

    def counting(env: Any, group: Any, branch: Any) -> Any:
        driven.append(branch.branch_path)
        return real(env, group, branch)

    monkeypatch.setattr(fanout_module, "drive_branch", counting)
    decision = sim.decide()
    assert len(decision.dispatch) == 50
    assert driven == ["p[k000]", "p[k050]"]
    assert decide(fresh_context(sim, memoize=False), sim.state) == decide(sim.ctx, sim.state)


def test_a_stale_worker_on_a_finished_branch_is_seen_at_the_fan_in() -> None:
    """A branch's result kept for the fan-in is re-read once its steps changed afterwards."""
    doc = lwir_doc([parallel("p", [tool("work")], max_concurrency=2)], output_schema=True)
    sim = Sim(doc, {"items": [{"id": "a"}, {"id": "b"}]})
    sim.decide()
    sim.decide()
    first, second = sim.outstanding.values()
    sim.start(first)
    sim.finish(first, ("ok", {"first": True}))
    sim.decide()  # p[a] completes; its result is kept
    assert sim.state.parallel_groups["p"].branches["p[a]"].status == "completed"
    stale = dataclasses.replace(first, attempt=2)
    sim.start(stale)  # p[a].work runs again: its output is gone from the state
    sim.start(second)
    sim.finish(second, ("ok", {"second": True}))
    warm = same_decision(sim, sim.state)
    (done,) = [e for e in warm.events if e.type == "ParallelGroupCompleted"]
    assert done.payload["stepPath"] == "p"
    (fan_in,) = [
        e for e in warm.events if e.type == "StepCompleted" and e.payload["stepPath"] == "p"
    ]
    assert [entry.get("output") for entry in fan_in.payload["output"]] == [None, {"second": True}]


# -- the walk's record diff against a full read ----------------------------------------------


class FakeGroup:
    """Stands in for a recorded ParallelGroupState: only ``branches`` is read."""

    def __init__(self, records: dict[str, Any]) -> None:
        self._records = records

    @property
    def branches(self) -> Any:
        return MappingProxyType(self._records)


def walk_view(walk: Walk) -> tuple[Any, ...]:
    failures = {index: (record.status, record.error) for index, record in walk.failures.items()}
    return (
        walk.unscheduled,
        walk.active,
        walk.failed,
        walk.flagged,
        walk.terminal,
        walk.completed,
        failures,
    )


@pytest.mark.parametrize("seed", range(40))
def test_following_group_objects_sorts_records_like_reading_them_all(seed: int) -> None:
    """Random edits (the fold's kind — replace in place, append — and others: records under
    foreign keys, dropped or reordered keys) between group objects."""
    rng = random.Random(seed)
    paths = [f"p[k{i}]" for i in range(rng.randint(1, 120))]
    index_of = {path: index for index, path in enumerate(paths)}
    errors = [None, {"message": "no"}, {"message": "late", "causeCode": "timeout"}]
    records: dict[str, Any] = {}
    walk = Walk.build(None, len(paths), index_of)
    for _ in range(60):
        records = dict(records)
        for _ in range(rng.choice([0, 1, 2, 3, 80])):
            roll = rng.random()
            path = rng.choice([*paths, "q[other]"])
            if roll < 0.8:
                status = rng.choice(["scheduled", "completed", "failed"])
                error = rng.choice(errors) if status == "failed" else None
                records[path] = ParallelBranchState(path, None, None, status, error=error)
            elif roll < 0.9 and records:
                records.pop(rng.choice(list(records)))
            elif records:  # a record under another key than its own path
                other = rng.choice(list(records))
                records[other] = ParallelBranchState(path, None, None, "completed")
        group = None if rng.random() < 0.05 else FakeGroup(records)
        hint = tuple(rng.sample(range(len(paths)), min(2, len(paths))))
        walk = walk.follow(group, len(paths), index_of, hint)
        assert walk_view(walk) == walk_view(Walk.build(group, len(paths), index_of))
