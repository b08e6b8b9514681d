from __future__ import annotations

import copy
import itertools
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from little_dist.errors import EventLogCorruptError, InvalidInputError
from little_dist.events import Event
from little_dist.pricing import add_priced_call, empty_usage_totals, price_model_call
from little_dist.run_state import (
    RunState,
    RunStateBuilder,
    RunStateEventMismatchError,
    fold_events,
    materialize_run_state,
    step_paths_in_event_order,
)
from little_dist.run_state._usage import add_call, empty_totals, price_call, totals_json
from tests.conftest import load_vectors

VECTORS: list[dict[str, Any]] = load_vectors("run_state")
STATE_VECTORS = [v for v in VECTORS if "expected_state" in v]
ERROR_VECTORS = [v for v in VECTORS if "error" in v]
# (Three state vectors also carry a "visitIndexFor" case, for upstream's helper that gives
# a loop step's next visit index. The engine has no such helper: decide counts visits as it
# replays the log; the rule they pin is tested on decide in tests/test_scheduling.py.)
ASSERTED = [
    pytest.param(v, check, id=f"{v['name']}-{'.'.join(check['path'])}")
    for v in STATE_VECTORS
    for check in v["asserted"]
]


def _names(vectors: list[dict[str, Any]]) -> list[str]:
    return [v["name"] for v in vectors]


def _at(data: Any, path: list[str]) -> Any:
    for key in path:
        data = data[key]
    return data


def _event(run_id: str, sequence: int, type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "eventId": f"evt_{sequence:016x}",
        "runId": run_id,
        "sequence": sequence,
        "type": type_,
        "recordedAt": f"2026-01-01T00:00:{sequence % 60:02d}.000Z",
        "payload": payload,
    }


def _log(run_id: str, items: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    return [_event(run_id, i, t, p) for i, (t, p) in enumerate(items, start=1)]


# -- conformance vectors ----------------------------------------------------------------------


def test_every_vector_is_covered() -> None:
    assert len(VECTORS) == len(STATE_VECTORS) + len(ERROR_VECTORS)
    assert len(STATE_VECTORS) >= 19 and len(ERROR_VECTORS) == 2


@pytest.mark.parametrize("vector", STATE_VECTORS, ids=_names(STATE_VECTORS))
def test_expected_state(vector: dict[str, Any]) -> None:
    # Upstream has no price fallback: the vectors are folded with registry rates only.
    state = materialize_run_state(vector["events"], run_id=vector["runId"], pricing_fallback=None)
    assert state.to_json() == vector["expected_state"]
    assert state.event_count == len(vector["events"])


@pytest.mark.parametrize("vector", STATE_VECTORS, ids=_names(STATE_VECTORS))
def test_expected_state_from_event_models(vector: dict[str, Any]) -> None:
    events = [Event.model_validate(e) for e in vector["events"]]
    state = materialize_run_state(events, run_id=vector["runId"], pricing_fallback=None)
    assert state.to_json() == vector["expected_state"]


@pytest.mark.parametrize(("vector", "check"), ASSERTED)
def test_asserted_paths(vector: dict[str, Any], check: dict[str, Any]) -> None:
    state = materialize_run_state(vector["events"], run_id=vector["runId"], pricing_fallback=None)
    actual = _at(state.to_json(), check["path"])
    if "approx" in check:
        # vitest toBeCloseTo(expected, digits): |actual - expected| < 10^-digits / 2
        assert abs(actual - check["approx"]) < 0.5 * 10 ** -check["digits"]
    else:
        assert actual == check["equals"]
        assert type(actual) is type(check["equals"]) or isinstance(actual, int | float)


@pytest.mark.parametrize("vector", ERROR_VECTORS, ids=_names(ERROR_VECTORS))
def test_error_vectors(vector: dict[str, Any]) -> None:
    with pytest.raises(RunStateEventMismatchError) as caught:
        materialize_run_state(vector["events"], run_id=vector["runId"])
    assert str(caught.value) == vector["error"]["message"]
    assert vector["error"]["message_contains"] in str(caught.value)
    assert isinstance(caught.value, EventLogCorruptError)


# -- log shape ----------------------------------------------------------------------------------


def test_gap_is_refused_with_upstream_message() -> None:
    events = _log("run_gap", [("RunStarted", {}), ("StepScheduled", {"stepPath": "a"})])
    events[1]["sequence"] = 3
    with pytest.raises(
        RunStateEventMismatchError,
        match=r"^Event sequence mismatch for "
        r"run_gap: expected 2, received 3\.$",
    ):
        materialize_run_state(events)


def test_bool_sequence_is_not_one() -> None:
    events = _log("run_bool", [("RunStarted", {})])
    events[0]["sequence"] = True
    with pytest.raises(RunStateEventMismatchError, match="received true"):
        materialize_run_state(events)


def test_incremental_mismatch_reports_global_index() -> None:
    events = _log("run_idx", [("RunStarted", {}), ("StepScheduled", {"stepPath": "a"})])
    state = materialize_run_state(events[:1])
    foreign = dict(events[1], runId="run_other")
    with pytest.raises(
        RunStateEventMismatchError, match="at index 1: expected run_idx, received run_other"
    ):
        fold_events(state, [foreign])
    with pytest.raises(RunStateEventMismatchError, match="expected 2, received 1"):
        fold_events(state, events[:1])


def test_empty_log_is_pending_but_needs_a_run_id() -> None:
    state = materialize_run_state([], run_id="run_missing")
    assert state.status == "pending" and state.event_count == 0
    with pytest.raises(InvalidInputError):
        materialize_run_state([])


def test_run_id_defaults_to_first_event() -> None:
    vector = STATE_VECTORS[0]
    assert materialize_run_state(iter(vector["events"])).to_json() == vector["expected_state"]


# -- fold rules beyond the vectors --------------------------------------------------------------


def test_engine_events_are_counted_and_tolerated() -> None:
    events = _log(
        "run_engine",
        [
            ("RunStarted", {}),
            ("little.lease.acquired", {"stepPath": "a", "token": 3}),
            ("ParallelBranchCompleted", {"stepPath": "p", "branchPath": "p[x]"}),
            ("harness.session.started", {"manifest": {"stepPath": "a"}}),
        ],
    )
    state = materialize_run_state(events)
    assert state.event_count == 4 and dict(state.steps) == {}
    assert step_paths_in_event_order(events) == ["a", "p"]


def test_legacy_names_and_v7_usage_details() -> None:
    model = {"provider": "openai.responses", "modelId": "gpt-4o-mini"}
    usage = {
        "inputTokens": 1000,
        "outputTokens": 500,
        "inputTokenDetails": {"cacheReadTokens": 400},
        "outputTokenDetails": {"reasoningTokens": 100},
    }
    events = _log(
        "run_legacy",
        [
            ("RunStarted", {}),
            (
                "HarnessModelResponded",
                {"stepPath": "s", "model": model, "response": {"usage": usage}},
            ),
            ("HarnessSessionCompleted", {"usage": {"inputTokens": 1000}}),
        ],
    )
    state = materialize_run_state(events)
    expected = add_priced_call(empty_usage_totals(), price_model_call(model, usage))
    assert state.usage == expected
    assert state.steps["s"].usage == expected
    assert state.usage.cached_input_tokens == 400 and state.usage.reasoning_tokens == 100


def test_artifact_created_and_output_presence() -> None:
    ref = "artifact://art_0123456789abcdef"
    events = _log(
        "run_art",
        [
            ("RunStarted", {}),
            ("ArtifactCreated", {"stepPath": "a", "artifactRef": ref}),
            ("ArtifactCreated", {"stepPath": "a", "artifactRef": "s3://nope"}),
            (
                "StepCompleted",
                {
                    "stepPath": "a",
                    "output": None,
                    "outputRef": ref,
                    "artifactRefs": [ref, "file://x", 3],
                    "metadata": ["no"],
                },
            ),
            ("StepCompleted", {"stepPath": "b"}),
            ("RunFailed", {}),
        ],
    )
    state = materialize_run_state(events)
    a, b = state.steps["a"], state.steps["b"]
    assert a.has_output and a.output is None and a.artifact_refs == (ref,)
    assert a.metadata is None and "metadata" not in a.to_json()
    assert not b.has_output and "output" not in b.to_json()
    assert state.artifacts == (ref,)
    assert state.status == "failed" and not state.has_error and "error" not in state.to_json()


def test_attempt_restart_clears_output_and_keeps_failed_error_on_late_completion() -> None:
    events = _log(
        "run_attempts",
        [
            ("RunStarted", {}),
            ("StepCompleted", {"stepPath": "a", "output": 1, "outputRef": "artifact://art_x"}),
            ("StepAttemptStarted", {"stepPath": "a"}),
            ("StepFailed", {"stepPath": "a", "error": None}),
            ("StepCompleted", {"stepPath": "a"}),
        ],
    )
    step = materialize_run_state(events).steps["a"]
    assert [a.attempt_id for a in step.attempts] == ["attempt_1", "attempt_2"]
    last = step.attempts[-1].to_json()
    assert last["status"] == "completed" and last["error"] is None
    assert not step.has_output and step.output_ref is None and not step.has_error


def test_parallel_groups_are_tracked_beside_the_upstream_shape() -> None:
    ref = "artifact://art_branch"
    events = _log(
        "run_par",
        [
            ("RunStarted", {}),
            (
                "ParallelGroupStarted",
                {"stepPath": "p", "branchCount": 2, "failureMode": "all_settled"},
            ),
            (
                "ParallelBranchScheduled",
                {"stepPath": "p", "branchPath": "p[a]", "itemKey": "a", "branchIndex": 0},
            ),
            (
                "ParallelBranchScheduled",
                {"stepPath": "p", "branchPath": "p[b]", "itemKey": "b", "branchIndex": 1},
            ),
            ("ParallelBranchCompleted", {"stepPath": "p", "branchPath": "p[a]", "outputRef": ref}),
            ("ParallelBranchFailed", {"stepPath": "p", "branchPath": "p[b]", "error": "x"}),
            ("ParallelGroupFailed", {"stepPath": "p"}),
        ],
    )
    state = materialize_run_state(events)
    group = state.parallel_groups["p"]
    assert (group.status, group.branch_count, group.failure_mode) == ("failed", 2, "all_settled")
    assert [(b.item_key, b.branch_index, b.status) for b in group.branches.values()] == [
        ("a", 0, "completed"),
        ("b", 1, "failed"),
    ]
    assert group.branches["p[a]"].output_ref == ref
    assert "p" not in state.to_json()["steps"]
    retried = fold_events(state, [_event("run_par", 8, "ParallelGroupStarted", {"stepPath": "p"})])
    assert dict(retried.parallel_groups["p"].branches) == {}
    assert len(state.parallel_groups["p"].branches) == 2


# -- incremental folding -------------------------------------------------------------------------


@pytest.mark.parametrize("vector", STATE_VECTORS, ids=_names(STATE_VECTORS))
def test_split_anywhere_folds_the_same(vector: dict[str, Any]) -> None:
    events, run_id = vector["events"], vector["runId"]
    whole = materialize_run_state(events, run_id=run_id)
    for cut in range(len(events) + 1):
        head = materialize_run_state(events[:cut], run_id=run_id)
        head_json = head.to_json()
        assert fold_events(head, events[cut:]) == whole
        assert head.to_json() == head_json  # the state folded onto is untouched


_STEP_PATHS = ["a", "b", "p[x].c", "10", "2"]
_MODELS = [
    {"provider": "openai", "modelId": "gpt-4o-mini"},
    {"provider": "openai.chat", "modelId": "gpt-4o"},
    {"provider": "acme", "modelId": "unknown"},
    None,
]
_usage_values = st.one_of(st.none(), st.integers(-5, 50_000), st.floats(allow_nan=True))
_usages = st.fixed_dictionaries(
    {"inputTokens": _usage_values, "outputTokens": _usage_values},
    optional={
        "cachedInputTokens": _usage_values,
        "reasoningTokens": _usage_values,
        "inputTokenDetails": st.fixed_dictionaries({"cacheReadTokens": _usage_values}),
        "costUsd": st.floats(0, 10),
    },
)
_path = st.sampled_from(_STEP_PATHS)
_items = st.one_of(
    st.tuples(st.just("StepScheduled"), st.fixed_dictionaries({"stepPath": _path})),
    st.tuples(
        st.just("StepAttemptStarted"),
        st.fixed_dictionaries(
            {"stepPath": _path}, optional={"attemptId": st.sampled_from(["x", "y"])}
        ),
    ),
    st.tuples(
        st.just("StepCompleted"),
        st.fixed_dictionaries(
            {"stepPath": _path},
            optional={
                "output": st.one_of(st.none(), st.integers()),
                "outputRef": st.sampled_from(["artifact://art_1", "artifact://art_2", "x"]),
                "artifactRefs": st.lists(st.sampled_from(["artifact://art_3", 4])),
            },
        ),
    ),
    st.tuples(
        st.just("StepFailed"),
        st.fixed_dictionaries(
            {"stepPath": _path}, optional={"error": st.sampled_from(["boom", None])}
        ),
    ),
    st.tuples(
        st.just("harness.model.responded"),
        st.fixed_dictionaries(
            {"response": st.fixed_dictionaries({"usage": _usages})},
            optional={"stepPath": _path, "model": st.sampled_from(_MODELS)},
        ),
    ),
    st.tuples(
        st.just("ModelCallCompleted"),
        st.fixed_dictionaries({"usage": _usages}, optional={"model": st.sampled_from(_MODELS)}),
    ),
    st.tuples(
        st.just("ArtifactCreated"),
        st.fixed_dictionaries(
            {"artifactRef": st.sampled_from(["artifact://art_1", "artifact://art_4"])},
            optional={"stepPath": _path},
        ),
    ),
    st.tuples(
        st.sampled_from(
            [
                "ParallelGroupStarted",
                "ParallelBranchScheduled",
                "ParallelBranchCompleted",
                "ParallelGroupCompleted",
            ]
        ),
        st.fixed_dictionaries(
            {"stepPath": st.just("p"), "branchPath": st.sampled_from(["p[x]", "p[y]"])}
        ),
    ),
    st.tuples(
        st.sampled_from(["RunCompleted", "RunFailed"]),
        st.fixed_dictionaries({}, optional={"output": st.integers(), "error": st.just("e")}),
    ),
)
_logs = st.lists(_items, max_size=40).map(
    lambda items: _log("run_prop", [("RunStarted", {}), *items])
)


@settings(max_examples=150, deadline=None)
@given(events=_logs, cuts=st.lists(st.integers(0, 41), max_size=4))
def test_folding_in_batches_equals_folding_once(
    events: list[dict[str, Any]], cuts: list[int]
) -> None:
    pristine = copy.deepcopy(events)
    whole = materialize_run_state(events)
    bounds = sorted({min(c, len(events)) for c in cuts} | {0, len(events)})
    state = materialize_run_state([], run_id="run_prop")
    snapshots: list[tuple[RunState, dict[str, Any]]] = []
    for start, end in itertools.pairwise(bounds):
        state = fold_events(state, events[start:end])
        snapshots.append((state, state.to_json()))
    assert state == whole
    assert all(s.to_json() == j for s, j in snapshots)  # no snapshot was disturbed
    builder = RunStateBuilder("run_prop")
    for event in events:
        builder.apply(event)
        builder.snapshot()
    assert builder.snapshot() == whole
    assert events == pristine  # the fold never writes into payloads


# -- pricing fast path against the pricing module ------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(
        [*_MODELS, {"provider": "", "modelId": "gpt-4o"}, {"provider": "openai", "modelId": 3}]
    ),
    usages=st.lists(_usages, min_size=1, max_size=6),
)
def test_fast_pricing_matches_pricing_module(model: Any, usages: list[dict[str, Any]]) -> None:
    totals = empty_totals()
    reference = empty_usage_totals()
    for usage in usages:
        fast = price_call(model, usage)
        slow = price_model_call(model if model is not None else {}, usage)
        assert fast[:4] == (
            slow.input_tokens,
            slow.output_tokens,
            slow.cached_input_tokens,
            slow.reasoning_tokens,
        )
        assert fast[4] == slow.cost_usd or (
            fast[4] is not None
            and slow.cost_usd is not None
            and math.isnan(fast[4])
            and math.isnan(slow.cost_usd)
        )
        add_call(totals, fast)
        reference = add_priced_call(reference, slow)
    assert totals_json(totals) == reference.model_dump(by_alias=True)


# -- price fallback for models the registry lacks ----------------------------------------------

GPT41 = {"provider": "openai", "modelId": "gpt-4.1"}
"""In litellm's bundled cost map ($2 / $0.50 cached / $8 per 1M), not in upstream's registry."""

GPT41_USAGE = {"inputTokens": 1_000_000, "cachedInputTokens": 200_000, "outputTokens": 100_000}
GPT41_COST = (800_000 * 2.0 + 200_000 * 0.5 + 100_000 * 8.0) / 1_000_000


def _gpt41_run(run_id: str = "run_gpt41") -> list[dict[str, Any]]:
    return _log(
        run_id,
        [
            ("RunStarted", {"workflowVersionId": "wfver_1"}),
            ("StepAttemptStarted", {"stepPath": "draft", "attemptId": "a1"}),
            (
                "harness.model.responded",
                {"stepPath": "draft", "model": GPT41, "response": {"usage": GPT41_USAGE}},
            ),
            ("ModelCallCompleted", {"stepPath": "draft", "model": GPT41, "usage": GPT41_USAGE}),
            ("StepCompleted", {"stepPath": "draft", "output": "x"}),
            ("RunCompleted", {"output": "x"}),
        ],
    )


def test_litellm_fallback_prices_a_model_the_registry_lacks() -> None:
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.model_registry import get_model_info_for

    assert get_model_info_for("openai", "gpt-4.1") is None
    events = _gpt41_run()

    unpriced = materialize_run_state(events, pricing_fallback=None)
    assert unpriced.usage.cost_usd is None
    assert (unpriced.usage.priced_calls, unpriced.usage.unpriced_calls) == (0, 2)
    assert unpriced.steps["draft"].usage.cost_usd is None

    priced = materialize_run_state(events, pricing_fallback=litellm_price_fallback)
    assert priced.usage.cost_usd == pytest.approx(2 * GPT41_COST)
    assert (priced.usage.priced_calls, priced.usage.unpriced_calls) == (2, 0)
    assert priced.steps["draft"].usage.cost_usd == pytest.approx(2 * GPT41_COST)
    assert priced.usage.input_tokens == unpriced.usage.input_tokens == 2_000_000


def test_fallback_is_asked_once_per_model_and_only_for_models_the_registry_lacks() -> None:
    from little_dist.model_registry import ModelPricing

    asked: list[str] = []

    def fallback(key: str) -> ModelPricing | None:
        asked.append(key)
        return ModelPricing(input=1, output=1) if key == "openai/gpt-4.1" else None

    acme = {"provider": "acme", "modelId": "x"}
    known = {"provider": "openai.responses", "modelId": "gpt-4o"}
    calls = [
        ("ModelCallCompleted", {"model": model, "usage": {"inputTokens": 1_000_000}})
        for model in (GPT41, acme, known, GPT41, acme, known)
    ]
    builder = RunStateBuilder("run_f", pricing_fallback=fallback)
    builder.apply_all(_log("run_f", [("RunStarted", {}), *calls]))
    state = builder.snapshot()
    assert asked == ["openai/gpt-4.1", "acme/x"]  # the registry answers for gpt-4o
    assert state.usage.cost_usd == 2 * 1.0 + 2 * 2.5
    assert (state.usage.priced_calls, state.usage.unpriced_calls) == (4, 2)
    # Another run folded with the same fallback shares the cache: no new questions.
    materialize_run_state(_log("run_g", [("RunStarted", {}), *calls]), pricing_fallback=fallback)
    assert asked == ["openai/gpt-4.1", "acme/x"]


def test_fold_events_continues_with_the_states_pricing_source() -> None:
    from little_dist.litellm_prices import litellm_price_fallback

    events = _gpt41_run()
    for fallback, expected in ((None, None), (litellm_price_fallback, 2 * GPT41_COST)):
        head = materialize_run_state(events[:3], pricing_fallback=fallback)
        whole = fold_events(head, events[3:])
        cost = whole.usage.cost_usd
        assert cost == expected if expected is None else cost == pytest.approx(expected)
        assert whole == materialize_run_state(events, pricing_fallback=fallback)


def test_a_fold_prices_unknown_models_only_from_the_fallback_it_is_given() -> None:
    from little_dist.litellm_prices import litellm_price_fallback

    events = _gpt41_run()
    assert materialize_run_state(events).usage.cost_usd is None
    builder = RunStateBuilder("run_gpt41", pricing_fallback=litellm_price_fallback)
    builder.apply_all(events)
    assert builder.snapshot().usage.cost_usd == pytest.approx(2 * GPT41_COST)
    # One fold's fallback is not the next one's: there is no process-wide default.
    assert materialize_run_state(events).usage.cost_usd is None


def test_the_fold_never_imports_litellm() -> None:
    import subprocess
    import sys

    code = (
        "import sys, little_dist.run_state as rs\n"
        f"events = {_gpt41_run()!r}\n"
        "state = rs.materialize_run_state(events)\n"
        "assert state.usage.cost_usd is None, state.usage\n"
        "b = rs.RunStateBuilder('run_gpt41', pricing_fallback=None); b.apply_all(events)\n"
        "banned = ('litellm', 'celery', 'boto3', 'redis', 'little_dist.litellm_prices')\n"
        "loaded = sorted(m for m in sys.modules if m in banned or m.split('.')[0] in banned)\n"
        "sys.exit('imported: ' + ', '.join(loaded) if loaded else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
