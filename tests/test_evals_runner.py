"""Running an eval set's cases: each sample scored against the item's label (the workflow's
output for ``$workflow`` items, a step's output for a step's), errors kept to their case,
at most ``concurrency`` runs at once, and the result's shape."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest

from little_dist.evals import (
    EVAL_ITEM_API_VERSION,
    WORKFLOW_TARGET,
    CaseRun,
    cases_of,
    compare,
    cone_for,
    eval_item_body_sha,
    eval_item_sha,
    run_cases,
)
from little_dist.lwir.input_cone import input_cone_hash


def item(value: Any, label: Any, target: str = WORKFLOW_TARGET, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": EVAL_ITEM_API_VERSION,
        "kind": "EvalItem",
        "target": target,
        "input": {"kind": "inline", "value": value},
        "label": {"provenance": "human_labeled", "value": label},
        "rubric": [],
        "provenance": [],
        **extra,
    }


def bundle_for(bodies: list[dict[str, Any]], k: int = 1, roles: list[str] | None = None) -> Any:
    targets = sorted({b["target"] for b in bodies})
    return {
        "manifest": {"constructs": [{"target": t, "resampleK": k} for t in targets]},
        "index": [
            {
                "itemSha": eval_item_sha(b),
                "bodySha": eval_item_body_sha(b),
                "target": b["target"],
                "role": (roles or ["gate"] * len(bodies))[n],
            }
            for n, b in enumerate(bodies)
        ],
    }


def shout(value: Any) -> CaseRun:
    """A workflow: its output is the input's text upper-cased; step 'words' splits it."""
    text = value["text"]
    if text == "boom":
        return CaseRun("run_failed", "failed", error={"message": "tool broke", "stepPath": "up"})
    if text == "raise":
        raise RuntimeError("the runner itself broke")
    return CaseRun(
        f"run_{text}",
        "completed",
        output=text.upper(),
        step_outputs={"words": text.split()},
        cost_usd=0.25,
    )


def run(bodies: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    bundle = bundle_for(bodies, **{k: v for k, v in kw.items() if k in ("k", "roles")})
    cases = cases_of(bundle, {eval_item_body_sha(b): b for b in bodies}, kw.get("select"))
    return run_cases(cases, kw.get("run_case", shout), concurrency=kw.get("concurrency", 2))


def statuses(result: dict[str, Any]) -> list[str]:
    return [case["status"] for case in result["cases"]]


def test_the_workflow_output_is_scored_against_the_label() -> None:
    result = run([item({"text": "hi there"}, "HI THERE"), item({"text": "hi"}, "hello")])
    assert statuses(result) == ["passed", "failed"]
    passed, failed = result["cases"]
    assert passed["samples"] == [
        {"runId": "run_hi there", "costUsd": 0.25, "status": "passed", "output": "HI THERE"}
    ]
    assert failed["samples"][0]["output"] == "HI" and failed["expected"] == "hello"


def test_a_step_target_is_scored_against_that_steps_output() -> None:
    result = run(
        [
            item({"text": "a b"}, ["a", "b"], target="words"),
            item({"text": "a b"}, ["a b"], target="words"),
            item({"text": "a b"}, "A B", target="missing"),
        ]
    )
    assert statuses(result) == ["passed", "failed", "error"]
    assert result["cases"][2]["samples"][0]["error"] == "step 'missing' gave no output"


def test_labels_compare_as_canonical_json_whatever_the_key_order() -> None:
    def as_object(value: Any) -> CaseRun:
        return CaseRun("run_o", "completed", output={"b": 1, "a": [1, {"y": 2, "x": 1}]})

    same = item({"text": "x"}, {"a": [1, {"x": 1, "y": 2}], "b": 1})
    other = item({"text": "y"}, {"a": [{"x": 1, "y": 2}, 1], "b": 1})
    assert statuses(run([same, other], run_case=as_object)) == ["passed", "failed"]


def test_a_failed_run_a_crash_and_vault_content_are_their_cases_errors() -> None:
    vaulted = item({"text": "x"}, "X")
    vaulted["input"] = {"kind": "vault", "vaultRef": "evpv_1", "shape": {}}
    result = run(
        [
            item({"text": "boom"}, "BOOM"),
            item({"text": "raise"}, "RAISE"),
            vaulted,
            item({"text": "ok"}, "OK"),
        ]
    )
    assert statuses(result) == ["error", "error", "error", "passed"]
    errors = [case["samples"][0]["error"] for case in result["cases"][:3]]
    assert errors[0] == "up: tool broke"
    assert errors[1] == "RuntimeError: the runner itself broke"
    assert "vault" in errors[2]
    assert result["summary"] == {
        "cases": 4,
        "passed": 1,
        "failed": 0,
        "errored": 3,
        "reused": 0,
        "costUsd": 0.25,
        "judgeCostUsd": None,
    }


def test_resample_k_runs_each_case_k_times_and_one_bad_sample_fails_it() -> None:
    calls: list[str] = []
    lock = threading.Lock()

    def flaky(value: Any) -> CaseRun:
        with lock:
            calls.append(value["text"])
            nth = calls.count(value["text"])
        output = "WRONG" if value["text"] == "flaky" and nth == 2 else value["text"].upper()
        return CaseRun(f"run_{nth}", "completed", output=output, cost_usd=0.1)

    result = run(
        [item({"text": "steady"}, "STEADY"), item({"text": "flaky"}, "FLAKY")], k=3, run_case=flaky
    )
    assert sorted(calls) == ["flaky"] * 3 + ["steady"] * 3
    assert statuses(result) == ["passed", "failed"]
    assert [s["status"] for s in result["cases"][1]["samples"]].count("failed") == 1
    assert result["cases"][0]["costUsd"] == pytest.approx(0.3)


@pytest.mark.parametrize("bound", [1, 3])
def test_no_more_than_the_bound_run_at_once(bound: int) -> None:
    lock = threading.Lock()
    now = 0
    peak = 0

    def slow(value: Any) -> CaseRun:
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
        time.sleep(0.05)
        with lock:
            now -= 1
        return CaseRun("run_s", "completed", output=value["text"].upper())

    bodies = [item({"text": f"t{n}"}, f"T{n}") for n in range(8)]
    result = run(bodies, run_case=slow, concurrency=bound)
    assert statuses(result) == ["passed"] * 8
    assert peak == bound


def test_roles_select_cases_and_the_rubric_is_reported_unscored() -> None:
    judged = item({"text": "c"}, "C", rubric=[{"criterionId": "tone", "expected": True}])
    bodies = [item({"text": "a"}, "A"), item({"text": "b"}, "B"), judged]
    result = run(bodies, roles=["gate", "optimizer", "gate"], select=["gate"])
    assert [c["role"] for c in result["cases"]] == ["gate", "gate"]
    assert result["cases"][1]["rubric"] == "unscored"
    assert "rubric" not in result["cases"][0]


def test_the_result_shape_and_the_comparison_with_the_last_run() -> None:
    first = run([item({"text": "a"}, "A"), item({"text": "b"}, "nope")])
    assert set(first) == {"cases", "summary"}
    assert set(first["cases"][0]) == {
        "itemSha",
        "target",
        "role",
        "status",
        "expected",
        "samples",
        "costUsd",
        "judgeCostUsd",
        "inputConeHash",
        "coneAsIndexed",
    }
    assert first["cases"][0]["inputConeHash"] is None  # (no LWIR given)
    assert first["summary"] == {
        "cases": 2,
        "passed": 1,
        "failed": 1,
        "errored": 0,
        "reused": 0,
        "costUsd": 0.5,
        "judgeCostUsd": None,
    }
    second = run(
        [item({"text": "a"}, "A"), item({"text": "b"}, "nope")],
        run_case=lambda v: CaseRun("r", "completed", output="nope"),
    )
    assert compare(second, None) is None
    diff = compare(second, {**first, "ranAt": "2026-12-01T00:00:00Z"})
    assert diff == {
        "ranAt": "2026-12-01T00:00:00Z",
        "summary": first["summary"],
        "changed": [
            {"itemSha": first["cases"][0]["itemSha"], "was": "passed", "now": "failed"},
            {"itemSha": first["cases"][1]["itemSha"], "was": "failed", "now": "passed"},
        ],
    }


LWIR = {
    "apiVersion": "littleworkflow.dev/v0.1",
    "kind": "Workflow",
    "metadata": {"name": "shout", "version": "1"},
    "input": {"schema": {"type": "object"}},
    "output": {"schema": {"type": "string"}},
    "permissions": {"models": [], "tools": ["t"], "secrets": [], "network": []},
    "steps": [
        {"id": "words", "uses": "tool.call", "with": {"tool": "t", "args": {"x": "{{ input }}"}}},
        {
            "id": "up",
            "uses": "tool.call",
            "needs": ["words"],
            "with": {"tool": "t", "args": {"x": "{{ steps.words.output }}"}},
        },
    ],
}


def test_a_case_whose_cone_did_not_change_keeps_its_earlier_result() -> None:
    bodies = [item({"text": "a b"}, ["a", "b"], target="words"), item({"text": "a b"}, "A B")]
    first = run(bodies)
    assert [c["inputConeHash"] for c in first["cases"]] == [None, None]
    cases = cases_of(bundle_for(bodies), {eval_item_body_sha(b): b for b in bodies})
    ran = run_cases(cases, shout, concurrency=2, lwir=LWIR)
    words_cone = cone_for(LWIR, "words")
    assert words_cone == input_cone_hash(LWIR, "words").hash
    assert [c["inputConeHash"] for c in ran["cases"]] == [words_cone, cone_for(LWIR, "$workflow")]
    assert [c["coneAsIndexed"] for c in ran["cases"]] == [False, False]  # (indexed: none)
    # `up` changes: the cone of `words` does not, the whole workflow's does.
    changed = copy.deepcopy(LWIR)
    changed["steps"][1]["with"]["args"]["x"] = "{{ steps.words.output }}!"
    calls: list[Any] = []

    def counted(value: Any) -> CaseRun:
        calls.append(value)
        return shout(value)

    again = run_cases(
        cases,
        counted,
        concurrency=2,
        lwir=changed,
        reusable={c["itemSha"]: c for c in ran["cases"]},
    )
    assert len(calls) == 1
    assert again["cases"][0] == {**ran["cases"][0], "reused": True}
    assert "reused" not in again["cases"][1]
    assert again["summary"]["reused"] == 1 and again["summary"]["costUsd"] == 0.25
    # An LWIR without the target step: no cone, so nothing to reuse.
    assert cone_for(LWIR, "nowhere") is None and cone_for(None, "words") is None


def test_the_judge_answers_each_rubric_criterion_as_the_item_expects() -> None:
    from little_dist.evals.judge import judge_prompt, parse_verdict

    rubric = [
        {"criterionId": "loud", "expected": True},
        {"criterionId": "short", "expected": False},
    ]
    bodies = [
        item({"text": "hey"}, "HEY", rubric=rubric),  # the judge agrees on both
        item({"text": "long words here"}, "LONG WORDS HERE", rubric=rubric),  # it says short: no
        item({"text": "odd"}, "ODD", rubric=rubric),  # it answers neither yes nor no
        item({"text": "nope"}, "NOPE!", rubric=rubric),  # the label differs
    ]
    bundle = bundle_for(bodies)
    bundle["manifest"]["constructs"][0].update(
        passCriterion="Shouted back.",
        criteria=[{"id": "loud", "text": "All capitals."}, {"id": "short", "text": "Long."}],
    )
    asked: list[str] = []

    def judge(prompt: str) -> str:
        asked.append(prompt)
        if '"odd"' in prompt:
            return "Perhaps."
        if "Criterion: Long." in prompt:
            return "Yes." if "long words" in prompt else "no"
        return "YES"

    cases = cases_of(bundle, {eval_item_body_sha(b): b for b in bodies})
    result = run_cases(cases, shout, concurrency=2, judge=judge)
    assert statuses(result) == ["passed", "failed", "error", "failed"]
    first = result["cases"][0]
    assert first["rubric"] == "judged"
    assert first["samples"][0]["rubric"] == [
        {"criterionId": "loud", "expected": True, "verdict": True},
        {"criterionId": "short", "expected": False, "verdict": False},
    ]
    assert result["cases"][1]["samples"][0]["rubric"][1]["verdict"] is True
    assert "not yes or no" in result["cases"][2]["samples"][0]["error"]
    assert judge_prompt("Shouted back.", "All capitals.", {"text": "hey"}, "HEY") in asked
    assert [parse_verdict(a) for a in ("yes", "No.", " **Yes** it does", "maybe", "")] == [
        True,
        False,
        True,
        None,
        None,
    ]
    unjudged = run_cases(cases, shout, concurrency=2)
    assert statuses(unjudged) == ["passed", "passed", "passed", "failed"]
    assert unjudged["cases"][0]["rubric"] == "unscored"


def test_judge_calls_are_priced_and_become_the_runs_events() -> None:
    """A judge that says what its call was (a JudgeReply) has each call priced as a model
    call of a workflow is, its cost added to the sample, the case and the summary, and the
    calls made events in case, sample and criterion order; a reused case adds none."""
    from little_dist.evals.judge import JudgeReply, judge_events
    from little_dist.pricing import price_model_call

    rubric = [{"criterionId": "loud", "expected": True}, {"criterionId": "odd", "expected": True}]
    bodies = [
        item({"text": "hey"}, "HEY", rubric=rubric),
        item({"text": "odd"}, "ODD", rubric=rubric),  # the second answer is unusable
    ]
    bundle = bundle_for(bodies)
    bundle["manifest"]["constructs"][0]["criteria"] = [
        {"id": "loud", "text": "All capitals."},
        {"id": "odd", "text": "Strange."},
    ]
    usage = {"inputTokens": 1000, "outputTokens": 10, "cachedInputTokens": 200}

    def judge(prompt: str) -> JudgeReply:
        text = "Perhaps" if '"odd"' in prompt and "Strange." in prompt else "yes"
        return JudgeReply(text, "openai/gpt-4o-mini", usage, "2026-12-06T00:00:00.000Z", 5)

    price = price_model_call("openai/gpt-4o-mini", usage).cost_usd
    assert price is not None and price > 0
    cases = cases_of(bundle, {eval_item_body_sha(b): b for b in bodies})
    result = run_cases(cases, shout, concurrency=2, judge=judge)
    assert statuses(result) == ["passed", "error"]
    for case in result["cases"]:
        (sample,) = case["samples"]
        assert len(sample["judgeCalls"]) == 2  # (the unusable answer was paid for too)
        assert sample["judgeCostUsd"] == round(2 * price, 10)
        assert case["judgeCostUsd"] == round(2 * price, 10)
        assert case["costUsd"] == round(sample["costUsd"] + 2 * price, 10)
    assert result["summary"]["judgeCostUsd"] == round(4 * price, 10)
    events = judge_events(result["cases"])
    assert [e["sequence"] for e in events] == [1, 2, 3, 4]
    assert [(e["payload"]["itemSha"], e["payload"]["criterionId"]) for e in events] == [
        (case["itemSha"], criterion) for case in result["cases"] for criterion in ("loud", "odd")
    ]
    first = events[0]
    assert first["type"] == "harness.model.responded"
    assert first["recordedAt"] == "2026-12-06T00:00:00.000Z"
    assert first["payload"]["role"] == "judge" and first["payload"]["sample"] == 1
    assert first["payload"]["model"] == {"provider": "openai", "modelId": "gpt-4o-mini"}
    assert first["payload"]["response"] == {"text": "yes", "usage": usage}
    assert first["payload"]["costUsd"] == price and first["payload"]["durationMs"] == 5
    reused = {case["itemSha"]: case for case in result["cases"]}
    again = run_cases(cases, shout, concurrency=2, judge=judge, reusable=reused, lwir=None)
    assert judge_events([{**c, "reused": True} for c in again["cases"]]) == []
    # A judge that gives only text is not priced: no calls, no judging cost.
    plain = run_cases(cases[:1], shout, concurrency=1, judge=lambda prompt: "yes")
    assert "judgeCalls" not in plain["cases"][0]["samples"][0]
    assert plain["cases"][0]["judgeCostUsd"] is None
