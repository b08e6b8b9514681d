"""Running an eval set: every selected item's input through the workflow, ``resampleK`` times,
a bounded number of runs at once, each run scored against the item's label.

Upstream defines the eval set (the bundle, item bodies, labels, rubrics) but no runner; this
is ours. What running a workflow means is passed in (``run_case``: in process, or on a
fleet), so this module only selects, schedules and scores. A sample passes when the run
completed and the target's output equals ``label.value`` (canonical JSON equality: the
label is the expected value) and, when a judge is given, the judge's verdict on every
rubric criterion is the item's ``expected``; without a judge a rubric is reported
``unscored`` and does not decide the case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.errors import LittleError
from little_dist.evals.bundle import LWIR_INPUT_CONE_ALGORITHM, WORKFLOW_TARGET
from little_dist.evals.judge import Judge, JudgeError, judge_cost, judge_rubric
from little_dist.lwir.input_cone import LwirInputConeError, input_cone_hash

__all__ = ["Case", "CaseRun", "cases_of", "compare", "cone_for", "run_cases"]


@dataclass(frozen=True)
class CaseRun:
    """What one run of one input gave."""

    run_id: str | None
    status: str  # "completed" or "failed"
    output: Any = None
    step_outputs: Mapping[str, Any] = field(default_factory=dict)
    error: Any = None
    cost_usd: float | None = None


@dataclass(frozen=True)
class Case:
    """One index entry with its body, ready to run."""

    item_sha: str
    target: str
    role: str
    resample_k: int
    body: Mapping[str, Any]
    indexed_cone: str | None = None
    #: the construct's pass criterion and criterion texts by id (for the judge)
    pass_criterion: str = ""
    criteria: Mapping[str, str] = field(default_factory=dict)


RunCase = Callable[[Any], CaseRun]


def cases_of(
    bundle: Mapping[str, Any],
    bodies: Mapping[str, Mapping[str, Any]],
    roles: Iterable[str] | None = None,
) -> list[Case]:
    """The cases of ``bundle`` (in index order) whose role is in ``roles`` (all when
    ``None``); ``bodies`` maps ``bodySha`` to body. K is the entry's ``resampleK``, else
    its construct's."""
    wanted = None if roles is None else set(roles)
    constructs = {c["target"]: c for c in bundle["manifest"]["constructs"]}
    cases = []
    for entry in bundle["index"]:
        if wanted is not None and entry["role"] not in wanted:
            continue
        construct = constructs.get(entry["target"], {})
        cases.append(
            Case(
                item_sha=entry["itemSha"],
                target=entry["target"],
                role=entry["role"],
                resample_k=int(entry.get("resampleK", construct.get("resampleK", 1))),
                body=bodies[entry["bodySha"]],
                indexed_cone=entry.get("inputConeHash"),
                pass_criterion=str(construct.get("passCriterion", "")),
                criteria={c["id"]: c["text"] for c in construct.get("criteria", [])},
            )
        )
    return cases


def run_cases(
    cases: list[Case],
    run_case: RunCase,
    *,
    concurrency: int,
    lwir: Mapping[str, Any] | None = None,
    reusable: Mapping[str, Mapping[str, Any]] | None = None,
    judge: Judge | None = None,
) -> dict[str, Any]:
    """Run every sample of every case, at most ``concurrency`` at once; the per-case results
    (in ``cases``' order) and their summary.

    With the LWIR that runs (``lwir``), each result carries its target's input cone hash
    under it, and whether that is still the cone the item was authored against. A case in
    ``reusable`` (``itemSha`` -> a result of an earlier run) whose cone is the same as then
    is not run again: nothing it reads has changed, so its earlier result stands
    (``"reused": true``). With a ``judge``, each sample's output is also judged against the
    item's rubric (:mod:`.judge`); without one, a rubric is reported ``unscored``.
    """
    cones = {case.item_sha: cone_for(lwir, case.target) for case in cases}
    kept: dict[int, dict[str, Any]] = {}
    for index, case in enumerate(cases):
        earlier = (reusable or {}).get(case.item_sha)
        cone = cones[case.item_sha]
        if earlier is not None and cone is not None and earlier.get("inputConeHash") == cone:
            kept[index] = {**earlier, "reused": True}
    jobs = [
        (index, case)
        for index, case in enumerate(cases)
        if index not in kept
        for _ in range(case.resample_k)
    ]
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        samples = list(pool.map(lambda job: _sample(job[1], run_case, judge), jobs))
    per_case: list[list[dict[str, Any]]] = [[] for _ in cases]
    for (index, _), sample in zip(jobs, samples, strict=True):
        per_case[index].append(sample)
    results = [
        kept[index]
        if index in kept
        else _case_result(case, per_case[index], cones[case.item_sha], judged=judge is not None)
        for index, case in enumerate(cases)
    ]
    return {"cases": results, "summary": _summary(results)}


def cone_for(lwir: Mapping[str, Any] | None, target: str) -> str | None:
    """The input cone hash of ``target`` in ``lwir``: upstream's ``lwir-input-cone@v1`` for
    a step; for ``$workflow`` (every step can reach the output) the whole document, as
    upstream's whole-document scope hashes it. ``None`` when unknown (no LWIR before the run,
    a target the LWIR does not have)."""
    if lwir is None:
        return None
    if target == WORKFLOW_TARGET:
        return sha256_digest(
            {
                "algorithm": LWIR_INPUT_CONE_ALGORITHM,
                "scope": "whole-document",
                "stepId": WORKFLOW_TARGET,
                "document": lwir,
            }
        )
    try:
        return input_cone_hash(lwir, target).hash
    except LwirInputConeError:
        return None


def compare(now: Mapping[str, Any], before: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """How ``now`` differs from the last run of the same set: its summary, and the cases
    whose status changed."""
    if before is None:
        return None
    was = {case["itemSha"]: case["status"] for case in before.get("cases", [])}
    changed = [
        {"itemSha": case["itemSha"], "was": was[case["itemSha"]], "now": case["status"]}
        for case in now["cases"]
        if case["itemSha"] in was and was[case["itemSha"]] != case["status"]
    ]
    return {
        "ranAt": before.get("ranAt"),
        "summary": before.get("summary"),
        "changed": changed,
    }


def _sample(case: Case, run_case: RunCase, judge: Judge | None) -> dict[str, Any]:
    content = case.body["input"]
    if content.get("kind") != "inline":
        return {
            "runId": None,
            "status": "error",
            "error": "vault content needs a vault reader, which this runner does not have",
        }
    try:
        ran = run_case(content["value"])
    except Exception as exc:  # (one case's crash is that case's error, not the set's)
        return {"runId": None, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
    cost = None if ran.cost_usd is None else round(ran.cost_usd, 10)
    sample: dict[str, Any] = {"runId": ran.run_id, "costUsd": cost}
    if ran.status != "completed":
        return {**sample, "status": "error", "error": _message(ran.error)}
    if case.target == WORKFLOW_TARGET:
        output = ran.output
    elif case.target in ran.step_outputs:
        output = ran.step_outputs[case.target]
    else:
        return {**sample, "status": "error", "error": f"step {case.target!r} gave no output"}
    expected = case.body["label"]["value"]
    same = _canonical(output) == _canonical(expected)
    result = {**sample, "status": "passed" if same else "failed", "output": output}
    if judge is None or not case.body["rubric"]:
        return result
    try:
        verdicts = judge_rubric(
            case.body["rubric"], case.criteria, case.pass_criterion, content["value"], output, judge
        )
    except Exception as exc:  # (the judge's failure is this sample's error)
        calls = exc.calls if isinstance(exc, JudgeError) else []
        return {
            **result,
            **_judged(calls),
            "status": "error",
            "error": f"judge: {type(exc).__name__}: {exc}",
        }
    agrees = all(v["verdict"] == v["expected"] for v in verdicts)
    calls = [v.pop("call") for v in verdicts if "call" in v]
    return {
        **result,
        **_judged(calls),
        "status": "passed" if same and agrees else "failed",
        "rubric": verdicts,
    }


def _judged(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """A sample's judge calls and what they cost (nothing for a judge that does not say)."""
    if not calls:
        return {}
    return {"judgeCalls": calls, "judgeCostUsd": judge_cost(calls)}


def _case_result(
    case: Case, samples: list[dict[str, Any]], cone: str | None, *, judged: bool
) -> dict[str, Any]:
    statuses = {sample["status"] for sample in samples}
    status = "error" if "error" in statuses else "failed" if "failed" in statuses else "passed"
    costs = [s["costUsd"] for s in samples if s.get("costUsd") is not None]
    judging = [s["judgeCostUsd"] for s in samples if s.get("judgeCostUsd") is not None]
    result: dict[str, Any] = {
        "itemSha": case.item_sha,
        "target": case.target,
        "role": case.role,
        "status": status,
        "expected": case.body["label"]["value"],
        "samples": samples,
        # (what the case cost: its runs and, when judged, its judge calls)
        "costUsd": round(sum(costs) + sum(judging), 10) if costs or judging else None,
        "judgeCostUsd": round(sum(judging), 10) if judging else None,
        "inputConeHash": cone,
        # (the label was made against the indexed cone; a changed cone may make it stale)
        "coneAsIndexed": None if cone is None else cone == case.indexed_cone,
    }
    if case.body["rubric"]:
        result["rubric"] = "judged" if judged else "unscored"
    return result


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    # (the cost is this run's: a reused case was paid for by the run it comes from)
    fresh = [r for r in results if not r.get("reused")]
    costs = [r["costUsd"] for r in fresh if r["costUsd"] is not None]
    judging = [r["judgeCostUsd"] for r in fresh if r.get("judgeCostUsd") is not None]
    return {
        "cases": len(results),
        "passed": sum(r["status"] == "passed" for r in results),
        "failed": sum(r["status"] == "failed" for r in results),
        "errored": sum(r["status"] == "error" for r in results),
        "reused": sum(bool(r.get("reused")) for r in results),
        "costUsd": round(sum(costs), 10) if costs else None,
        "judgeCostUsd": round(sum(judging), 10) if judging else None,
    }


def _canonical(value: Any) -> str | None:
    try:
        return canonical_json(value)
    except LittleError:  # (no canonical form: equal to nothing)
        return None


def _message(error: Any) -> str:
    if isinstance(error, Mapping):
        message = str(error.get("message") or error.get("name") or "the run failed")
        where = error.get("stepPath")
        return f"{where}: {message}" if isinstance(where, str) else message
    return str(error) if error is not None else "the run failed"
