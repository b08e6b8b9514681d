"""The fold of sub-run events (``little.subrun.started`` / ``.ended``, ``little.step.suspended``)
is incremental: the builder keeps them in a mutable form and makes the immutable view once
per snapshot. Pinned here: whatever the interleaving of events and snapshots, every
snapshot equals the fold of the log up to it from scratch and from any earlier state
(``fold_events``), and a snapshot never changes as the builder folds on."""

from __future__ import annotations

import random
from typing import Any

import pytest

from little_dist.run_state import RunState, RunStateBuilder, fold_events, materialize_run_state
from little_dist.run_state._subruns import STEP_SUSPENDED, SUB_RUN_ENDED, SUB_RUN_STARTED

RUN = "run_parent"


def _event(sequence: int, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "runId": RUN,
        "sequence": sequence,
        "type": kind,
        "payload": payload,
        "recordedAt": f"2026-01-01T00:00:{sequence % 60:02d}Z",
    }


def _log(seed: int) -> list[dict[str, Any]]:
    """A parent whose two steps start children, suspend, see ends (some before the
    suspension, some twice), and start again; shuffled where the order is free."""
    rng = random.Random(seed)
    kinds: list[tuple[str, dict[str, Any]]] = [("RunStarted", {"workflowVersionId": "v"})]
    for path in ("a", "b"):
        kids = [f"run_sub_{path}{n}" for n in range(rng.randint(1, 12))]
        kinds.append(("StepScheduled", {"stepPath": path}))
        kinds.append(("StepAttemptStarted", {"stepPath": path, "attempt": 1}))
        kinds += [(SUB_RUN_STARTED, {"childRunId": kid, "stepPath": path}) for kid in kids]
        early = rng.sample(kids, rng.randint(0, len(kids)))
        kinds += [(SUB_RUN_ENDED, {"childRunId": kid, "stepPath": path}) for kid in early]
        kinds.append((STEP_SUSPENDED, {"stepPath": path, "attempt": 1, "waitingFor": kids}))
        late = [kid for kid in kids if kid not in early] + rng.sample(kids, 1)  # one again
        rng.shuffle(late)
        kinds += [(SUB_RUN_ENDED, {"childRunId": kid, "stepPath": path}) for kid in late]
        if rng.random() < 0.5:
            kinds.append(("StepAttemptStarted", {"stepPath": path, "attempt": 2}))
    return [_event(n, kind, payload) for n, (kind, payload) in enumerate(kinds, start=1)]


def _seen(state: RunState) -> tuple[Any, ...]:
    view = state.sub_runs
    return (
        view.parent_run_id,
        view.started,
        view.ended,
        view.suspended,
        view.open_children,
        {path: (step.status, step.waiting_for) for path, step in state.steps.items()},
    )


@pytest.mark.parametrize("seed", range(40))
def test_every_snapshot_equals_the_fold_from_scratch_and_never_changes(seed: int) -> None:
    events = _log(seed)
    rng = random.Random(seed + 1000)
    builder = RunStateBuilder(RUN)
    taken: list[tuple[int, RunState, tuple[Any, ...]]] = []
    at = 0
    while at < len(events):
        step = rng.randint(1, 6)
        builder.apply_all(events[at : at + step])
        at = min(len(events), at + step)
        state = builder.snapshot()
        assert _seen(state) == _seen(materialize_run_state(events[:at]))
        if taken:  # continuing an earlier snapshot gives the same state
            before, earlier, _ = taken[rng.randrange(len(taken))]
            assert _seen(fold_events(earlier, events[before:at])) == _seen(state)
        taken.append((at, state, _seen(state)))
    for _, state, seen in taken:  # the builder folded on: what it handed out stayed
        assert _seen(state) == seen


def test_a_thousand_children_fold_to_the_same_view() -> None:
    kids = [f"run_sub_{n}" for n in range(1000)]
    kinds: list[tuple[str, dict[str, Any]]] = [
        ("RunStarted", {"workflowVersionId": "v"}),
        ("StepAttemptStarted", {"stepPath": "a", "attempt": 1}),
        *[(SUB_RUN_STARTED, {"childRunId": kid, "stepPath": "a"}) for kid in kids],
        (STEP_SUSPENDED, {"stepPath": "a", "attempt": 1, "waitingFor": kids}),
        *[(SUB_RUN_ENDED, {"childRunId": kid, "stepPath": "a"}) for kid in kids[:-1]],
    ]
    events = [_event(n, kind, payload) for n, (kind, payload) in enumerate(kinds, start=1)]
    state = materialize_run_state(events)
    assert state.sub_runs.started == tuple(kids)
    assert state.sub_runs.open_children == (kids[-1],)
    assert state.steps["a"].waiting_for == {kids[-1]}
    assert state.sub_runs.suspended == {"a"}
    last = _event(len(events) + 1, SUB_RUN_ENDED, {"childRunId": kids[-1], "stepPath": "a"})
    after = fold_events(state, [last])
    assert after.steps["a"].waiting_for == frozenset() and after.sub_runs.suspended == frozenset()
    assert state.steps["a"].waiting_for == {kids[-1]}  # (the earlier state did not change)
