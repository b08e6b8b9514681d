"""Property: deciding from the index the fold's journal keeps equals replaying every step.

``decide`` follows the top scope's readiness incrementally (``scheduling.dag_index``); the
reference here is the full replay (the index switched off) on a state folded from scratch.
Random DAGs (some with a parallel step, completed inline), random completion orders, retries
and failures, odd logs (a completed step started again), and decisions on older states of
the lineage and on a fork of it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little_dist.events import EventInput
from little_dist.run_state import RunState, RunStateBuilder, materialize_run_state
from little_dist.scheduling import Decision, RunContext, decide
from little_dist.scheduling import drive as drive_module
from tests import test_scheduling_sim as sim_module
from tests.test_scheduling_sim import Sim, lwir_doc, parallel, tool


@contextmanager
def _full_replay() -> Iterator[None]:
    """``decide`` without the index: every call replays the whole top scope."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(drive_module, "readiness_for", lambda *args: None)
        yield


def _reference(ctx: RunContext, sim: Sim, upto: int | None = None) -> Decision:
    events = sim.events()[:upto]
    with _full_replay():
        return decide(ctx, materialize_run_state(events))


@st.composite
def workflows(draw: st.DrawFn) -> list[dict[str, Any]]:
    size = draw(st.integers(min_value=1, max_value=8))
    fan = draw(st.booleans())
    steps: list[dict[str, Any]] = []
    for index in range(size):
        needs = sorted(draw(st.sets(st.sampled_from(range(index)), max_size=3)) if index else set())
        names = [f"s{n}" for n in needs] or None
        if fan and index == size // 2:
            steps.append(parallel(f"s{index}", [tool("w")], needs=names, max_concurrency=2))
        else:
            retry = draw(st.sampled_from([None, 1, 2]))
            extra = {"retry": {"maxAttempts": retry}} if retry else {}
            steps.append(tool(f"s{index}", needs=names, **extra))
    needed = {need for step in steps for need in step.get("needs", [])}
    sinks = [step["id"] for step in steps if step["id"] not in needed]
    if len(sinks) > 1:
        steps.append(tool("final", needs=sinks))
    order = draw(st.permutations(range(len(steps))))
    return [steps[i] for i in order]


def _reopen(sim: Sim, rng: random.Random) -> None:
    """An odd log: a completed top-level step gets a new attempt started."""
    done = [
        s for s in sim.state.steps.values() if s.status == "completed" and "[" not in s.step_path
    ]
    if not done:
        return
    step = rng.choice(done)
    attempt = len(step.attempts) + 1
    sim.append(
        [
            EventInput(
                type="StepAttemptStarted",
                payload={"stepPath": step.step_path, "attempt": attempt},
                occurrence_id=f"reopen:{step.step_path}:{attempt}",
            )
        ]
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=workflows(), seed=st.integers(min_value=0, max_value=2**16))
def test_incremental_decisions_equal_full_replays(steps: list[dict[str, Any]], seed: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(drive_module, "_INDEX_FROM", 0)  # (the index follows these small scopes)
        _play(steps, seed)


def _play(steps: list[dict[str, Any]], seed: int) -> None:
    rng = random.Random(seed)
    sim = Sim(lwir_doc(steps), {"items": [{"id": f"k{i}"} for i in range(3)]})
    kept: list[tuple[RunState, int]] = []
    for _ in range(80):
        state = sim.state
        decision = decide(sim.ctx, state)
        assert decision == _reference(sim.ctx, sim), f"at event {state.event_count}"
        kept.append((state, state.event_count))
        if rng.random() < 0.2:  # an older state of the lineage, decided again
            old, count = rng.choice(kept)
            assert decide(sim.ctx, old) == _reference(sim.ctx, sim, count)
        if rng.random() < 0.1:  # a fork: another builder continued from an older state
            old, count = rng.choice(kept)
            fork = RunStateBuilder.from_state(old)
            fork.apply_all(sim.events()[count : count + 1])
            forked = fork.snapshot()
            assert decide(sim.ctx, forked) == _reference(sim.ctx, sim, forked.event_count)
        if decision.done:
            return
        sim.append(list(decision.events))
        for dispatch in decision.dispatch:
            key = (dispatch.step_path, dispatch.attempt)
            if key not in sim.running:
                sim.outstanding.setdefault(key, dispatch)
        if rng.random() < 0.05:
            _reopen(sim, rng)
            continue
        if not sim.outstanding:
            continue
        dispatch = rng.choice(list(sim.outstanding.values()))
        sim.start(dispatch)
        if rng.random() < 0.25:
            sim.finish(dispatch, ("fail", {"name": "E", "message": "no", "retriable": True}))
        else:
            sim.finish(dispatch, ("ok", {"path": dispatch.step_path}))


def test_a_chain_is_scheduled_from_the_journal_not_by_replaying_every_step() -> None:
    """Over a whole 300-step chain, decide reads each step record a bounded number of times
    (the full replay read all of them on every call: 300 x 600)."""
    sim = Sim(lwir_doc([tool("s0")] + [tool(f"s{i}", needs=[f"s{i - 1}"]) for i in range(1, 300)]))
    reads = 0
    deciding = False
    steps_of = RunState.steps.fget
    assert steps_of is not None

    class Counting(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            nonlocal reads
            reads += deciding
            return super().get(key, default)

    def counted(ctx: RunContext, state: RunState) -> Decision:
        nonlocal deciding
        deciding = True
        try:
            return decide(ctx, state)
        finally:
            deciding = False

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RunState, "steps", property(lambda self: Counting(steps_of(self))))
        patch.setattr(sim_module, "decide", counted)
        state = sim.run()
    assert state.status == "completed"
    assert reads < 10 * 300, reads
