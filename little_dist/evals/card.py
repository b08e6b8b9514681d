"""The eval card's evidence sections (upstream's ``EvalCard`` past its name and constructs):
sampling, seal policy, desiderata, generation, audit, judge, independence, noise floor,
canary, lifecycle, PII policy and extensions. Each is checked as upstream checks it; the
card holds no key material and no float.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from little_dist.evals.checks import Findings

__all__ = ["PII_STATUSES", "SAMPLING_STRATEGIES", "SEAL_CUSTODY", "check_sections"]

SAMPLING_STRATEGIES: Final = ("stratified", "replay_window", "desiderata_search", "mixed")
PII_STATUSES: Final = ("synthetic", "surrogate", "redacted", "raw_prohibited")
SEAL_CUSTODY: Final = ("dev_local", "customer_held")
_UINT64_MAX: Final = 2**64 - 1
_MIN_CANARY_LENGTH: Final = 8
_SEAL_KEY_ID = re.compile(r"hmac-sha256-id:[0-9a-f]{64}")
_EXTENSION_KEY = re.compile(r"[a-z0-9][a-z0-9.\-_]*/v[0-9]+")


def check_sections(found: Findings, card: Mapping[str, Any], path: str) -> None:
    """Check every evidence section of ``card`` (at ``path``) into ``found``."""
    _sampling(found, card.get("sampling"), f"{path}.sampling")
    _seal_policy(found, card.get("sealPolicy"), f"{path}.sealPolicy")
    _desiderata(found, card.get("desiderata"), f"{path}.desiderata")
    _generation(found, card.get("generation"), f"{path}.generation")
    _audit(found, card.get("audit"), f"{path}.audit")
    _judge(found, card.get("judge"), f"{path}.judge")
    _independence(found, card.get("independence"), f"{path}.independence")
    _noise_floor(found, card.get("noiseFloor"), f"{path}.noiseFloor")
    _canary(found, card.get("canaryGuid"), f"{path}.canaryGuid")
    _lifecycle(found, card.get("lifecycle"), f"{path}.lifecycle")
    _pii(found, card.get("pii"), f"{path}.pii")
    if "extensions" in card:
        extensions = found.record(card["extensions"], f"{path}.extensions")
        for key in extensions or {}:
            if not _EXTENSION_KEY.fullmatch(key):
                found.error(
                    "evalset.extension_key_unnamespaced",
                    f"{path}.extensions.{key}",
                    "Extension keys must be namespaced and versioned, e.g. "
                    f'"lending.fairness/v1"; received "{key}".',
                )


def _sampling(found: Findings, value: Any, path: str) -> None:
    sampling = found.record(value, path)
    if sampling is None:
        return
    found.keys(sampling, path, ["strategy", "strata"], ["window"])
    found.enum(sampling.get("strategy"), SAMPLING_STRATEGIES, f"{path}.strategy")
    if "window" in sampling:
        window = found.record(sampling["window"], f"{path}.window")
        if window is not None:
            found.keys(window, f"{path}.window", ["fromAt", "toAt"])
            start = found.timestamp(window.get("fromAt"), f"{path}.window.fromAt")
            end = found.timestamp(window.get("toAt"), f"{path}.window.toAt")
            if start is not None and end is not None and start > end:
                found.error(
                    "evalset.schema.invalid",
                    f"{path}.window",
                    f"{path}.window.fromAt must not be after toAt.",
                )
    strata = found.array(sampling.get("strata"), f"{path}.strata")
    ids: set[str] = set()
    for index, item in enumerate(strata or []):
        at = f"{path}.strata[{index}]"
        stratum = found.record(item, at)
        if stratum is None:
            continue
        found.keys(stratum, at, ["id", "definition", "count"])
        sid = found.string(stratum.get("id"), f"{at}.id")
        if sid is not None:
            if sid in ids:
                found.error(
                    "evalset.schema.invalid", f"{at}.id", f"Stratum id '{sid}' is repeated."
                )
            ids.add(sid)
        found.string(stratum.get("definition"), f"{at}.definition")
        found.integer(stratum.get("count"), f"{at}.count")


def _seal_policy(found: Findings, value: Any, path: str) -> None:
    policy = found.record(value, path)
    if policy is None:
        return
    found.keys(policy, path, ["algorithm", "sealKeyId", "custody", "cutoff", "domain"])
    found.literal(policy.get("algorithm"), "HMAC-SHA256", f"{path}.algorithm")
    key_id = policy.get("sealKeyId")
    if not isinstance(key_id, str) or not _SEAL_KEY_ID.fullmatch(key_id):
        found.error(
            "evalset.schema.invalid",
            f"{path}.sealKeyId",
            f'{path}.sealKeyId must be "hmac-sha256-id:<64 lowercase hex>" — a KDF-derived '
            "identifier, never the key and never a plain hash of it.",
        )
    found.enum(policy.get("custody"), SEAL_CUSTODY, f"{path}.custody")
    check_cutoff(found, policy.get("cutoff"), f"{path}.cutoff")
    found.string(policy.get("domain"), f"{path}.domain")


def check_cutoff(found: Findings, value: Any, path: str) -> None:
    """The seal cutoff: a decimal uint64 string (beyond JavaScript's safe integers)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        found.error(
            "evalset.decimal_not_string",
            path,
            f"{path} must be a decimal uint64 string: it exceeds Number.MAX_SAFE_INTEGER and it "
            "decides gate membership, so it has to be bit-reproducible in any language.",
        )
    elif not isinstance(value, str) or not (
        value.isascii() and value.isdigit() and (value == "0" or not value.startswith("0"))
    ):
        found.error(
            "evalset.schema.invalid",
            path,
            f"{path} must be an unsigned decimal integer string with no leading zeros.",
        )
    elif int(value) > _UINT64_MAX:
        found.error("evalset.schema.invalid", path, f"{path} exceeds 2^64 - 1.")


def _desiderata(found: Findings, value: Any, path: str) -> None:
    desiderata = found.record(value, path)
    if desiderata is None:
        return
    found.keys(
        desiderata, path, ["difficultyBand", "coverage", "diversityClusters"], ["separability"]
    )
    _decimals(
        found,
        desiderata.get("difficultyBand"),
        f"{path}.difficultyBand",
        ["targetLow", "targetHigh", "achieved"],
    )
    coverage = found.record(desiderata.get("coverage"), f"{path}.coverage")
    if coverage is not None:
        found.keys(coverage, f"{path}.coverage", ["target", "achieved", "basis"])
        found.decimal(coverage.get("target"), f"{path}.coverage.target")
        found.decimal(coverage.get("achieved"), f"{path}.coverage.achieved")
        found.string(coverage.get("basis"), f"{path}.coverage.basis")
    clusters = found.record(desiderata.get("diversityClusters"), f"{path}.diversityClusters")
    if clusters is not None:
        found.keys(clusters, f"{path}.diversityClusters", ["target", "achieved"])
        found.integer(clusters.get("target"), f"{path}.diversityClusters.target")
        found.integer(clusters.get("achieved"), f"{path}.diversityClusters.achieved")
    if "separability" in desiderata:
        _decimals(found, desiderata["separability"], f"{path}.separability", ["target", "achieved"])


def _decimals(found: Findings, value: Any, path: str, keys: list[str]) -> None:
    record = found.record(value, path)
    if record is not None:
        found.keys(record, path, keys)
        for key in keys:
            found.decimal(record.get(key), f"{path}.{key}")


def _generation(found: Findings, value: Any, path: str) -> None:
    generation = found.record(value, path)
    if generation is None:
        return
    found.keys(
        generation, path, ["candidatesGenerated", "admitted", "rejectedByStage", "authorModel"]
    )
    candidates = found.integer(generation.get("candidatesGenerated"), f"{path}.candidatesGenerated")
    admitted = found.integer(generation.get("admitted"), f"{path}.admitted")
    if candidates is not None and admitted is not None and admitted > candidates:
        found.error(
            "evalset.schema.invalid",
            f"{path}.admitted",
            f"{path}.admitted ({admitted}) cannot exceed candidatesGenerated ({candidates}); "
            "the keep rate is derived from these two integers.",
        )
    stages = found.array(generation.get("rejectedByStage"), f"{path}.rejectedByStage")
    for index, item in enumerate(stages or []):
        at = f"{path}.rejectedByStage[{index}]"
        stage = found.record(item, at)
        if stage is not None:
            found.keys(stage, at, ["stage", "count"])
            found.string(stage.get("stage"), f"{at}.stage")
            found.integer(stage.get("count"), f"{at}.count")
    _model_pin(found, generation.get("authorModel"), f"{path}.authorModel")


def _model_pin(found: Findings, value: Any, path: str) -> None:
    pin = found.record(value, path)
    if pin is not None:
        found.keys(pin, path, ["providerId", "modelId", "family"])
        for key in ("providerId", "modelId", "family"):
            found.string(pin.get(key), f"{path}.{key}")


def _audit(found: Findings, value: Any, path: str) -> None:
    audit = found.record(value, path)
    if audit is None:
        return
    found.keys(audit, path, ["nAudited", "raters", "labelErrorEstimate"], ["fleissKappa"])
    found.integer(audit.get("nAudited"), f"{path}.nAudited")
    raters = found.array(audit.get("raters"), f"{path}.raters")
    for index, item in enumerate(raters or []):
        at = f"{path}.raters[{index}]"
        rater = found.record(item, at)
        if rater is not None:
            found.keys(rater, at, ["ref", "kind"])
            found.string(rater.get("ref"), f"{at}.ref")
            found.free_text(rater.get("ref"), f"{at}.ref")
            found.enum(rater.get("kind"), ("human", "model"), f"{at}.kind")
    _decimals(
        found,
        audit.get("labelErrorEstimate"),
        f"{path}.labelErrorEstimate",
        ["point", "ciLow", "ciHigh"],
    )
    if "fleissKappa" in audit:
        found.decimal(audit["fleissKappa"], f"{path}.fleissKappa")


def _judge(found: Findings, value: Any, path: str) -> None:
    judge = found.record(value, path)
    if judge is None:
        return
    optional = ["kappaVsHuman", "kappaHumanHuman", "alignmentScore"]
    found.keys(judge, path, ["modelPin", "rubricSha", "calibrationSetSha", "tpr", "tnr"], optional)
    _model_pin(found, judge.get("modelPin"), f"{path}.modelPin")
    found.digest(judge.get("rubricSha"), f"{path}.rubricSha")
    found.digest(judge.get("calibrationSetSha"), f"{path}.calibrationSetSha")
    found.decimal(judge.get("tpr"), f"{path}.tpr")
    found.decimal(judge.get("tnr"), f"{path}.tnr")
    for key in optional:
        if key in judge:
            found.decimal(judge[key], f"{path}.{key}")


def _independence(found: Findings, value: Any, path: str) -> None:
    record = found.record(value, path)
    if record is None:
        return
    found.keys(
        record, path, ["evalAuthorFamily", "workflowAuthorFamily", "distinct"], ["humanReviewerRef"]
    )
    evals = found.string(record.get("evalAuthorFamily"), f"{path}.evalAuthorFamily")
    workflow = found.string(record.get("workflowAuthorFamily"), f"{path}.workflowAuthorFamily")
    distinct = found.boolean(record.get("distinct"), f"{path}.distinct")
    if evals is not None and workflow is not None and distinct is not None:
        actual = evals != workflow
        if actual != distinct:
            found.error(
                "evalset.independence_inconsistent",
                f"{path}.distinct",
                f"{path}.distinct is {str(distinct).lower()} but evalAuthorFamily '{evals}' and "
                f"workflowAuthorFamily '{workflow}' are {'different' if actual else 'the same'}. "
                "The attestation must agree with the fields it attests to.",
            )
    if "humanReviewerRef" in record:
        found.string(record["humanReviewerRef"], f"{path}.humanReviewerRef")
        found.free_text(record["humanReviewerRef"], f"{path}.humanReviewerRef")


def _noise_floor(found: Findings, value: Any, path: str) -> None:
    floor = found.record(value, path)
    if floor is None:
        return
    found.keys(floor, path, ["method", "runs", "deltaPpP50", "deltaPpP95", "measuredAt"])
    found.literal(floor.get("method"), "incumbent_rerun", f"{path}.method")
    found.integer(floor.get("runs"), f"{path}.runs", 1)
    found.decimal(floor.get("deltaPpP50"), f"{path}.deltaPpP50")
    found.decimal(floor.get("deltaPpP95"), f"{path}.deltaPpP95")
    found.timestamp(floor.get("measuredAt"), f"{path}.measuredAt")


def _canary(found: Findings, value: Any, path: str) -> None:
    canary = found.string(value, path)
    if canary is not None and (
        len(canary) < _MIN_CANARY_LENGTH or any(c.isspace() for c in canary)
    ):
        found.error(
            "evalset.schema.invalid",
            path,
            f"{path} must be a whitespace-free string of at least {_MIN_CANARY_LENGTH} "
            "characters: it exists to be greppable in a leaked context.",
        )


def _lifecycle(found: Findings, value: Any, path: str) -> None:
    lifecycle = found.record(value, path)
    if lifecycle is None:
        return
    found.keys(lifecycle, path, ["refresh", "gateQueryBudget"], ["expiresAt"])
    if "expiresAt" in lifecycle:
        found.timestamp(lifecycle["expiresAt"], f"{path}.expiresAt")
    refresh = found.record(lifecycle.get("refresh"), f"{path}.refresh")
    if refresh is not None:
        at = f"{path}.refresh"
        found.keys(refresh, at, ["policy", "numerator", "denominator", "cadence"])
        found.literal(refresh.get("policy"), "rotate_fraction", f"{at}.policy")
        numerator = found.integer(refresh.get("numerator"), f"{at}.numerator")
        denominator = found.integer(refresh.get("denominator"), f"{at}.denominator", 1)
        if numerator is not None and denominator is not None and numerator > denominator:
            found.error(
                "evalset.schema.invalid",
                f"{at}.numerator",
                f"{at} must be a fraction <= 1; received {numerator}/{denominator}.",
            )
        found.string(refresh.get("cadence"), f"{at}.cadence")
    found.integer(lifecycle.get("gateQueryBudget"), f"{path}.gateQueryBudget")


def _pii(found: Findings, value: Any, path: str) -> None:
    pii = found.record(value, path)
    if pii is None:
        return
    found.keys(pii, path, ["status", "retentionClass"], ["disposalDue"])
    status = found.enum(pii.get("status"), PII_STATUSES, f"{path}.status")
    found.string(pii.get("retentionClass"), f"{path}.retentionClass")
    if "disposalDue" in pii:
        found.timestamp(pii["disposalDue"], f"{path}.disposalDue")
    elif status is not None and status != "synthetic":
        found.error(
            "evalset.schema.missing",
            f"{path}.disposalDue",
            f"{path}.disposalDue is required when pii.status is '{status}': a non-synthetic set "
            "carries a disposal clock.",
        )
