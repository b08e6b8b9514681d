"""Eval-set bundles and item bodies, checked as upstream's ``eval-set.test.ts`` checks them
(its cases, ported: same bundle, same finding codes and paths), and the sealed gate split."""

from __future__ import annotations

import copy
import hashlib
import hmac
from typing import Any

import pytest

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.evals import (
    EVAL_ITEM_API_VERSION,
    EVAL_ITEM_ROLES,
    EVAL_SET_API_VERSION,
    EvalSetValidationError,
    eval_item_body_sha,
    eval_item_sha,
    is_sealed,
    register_eval_set,
    registered_body,
    seal_key_id,
    sort_index,
    validate_eval_item_body,
    validate_eval_set,
    verify_eval_set_bodies,
)

SEAL_KEY_ID = "hmac-sha256-id:" + sha256_digest("seal-key").removeprefix("sha256:")
SYNTHETIC = {"status": "synthetic", "retentionClass": "evidence-5y"}


def body(**overrides: Any) -> dict[str, Any]:
    return {
        "apiVersion": EVAL_ITEM_API_VERSION,
        "kind": "EvalItem",
        "target": "summarize",
        "input": {"kind": "inline", "value": {"ticket": "the printer is on fire"}},
        "label": {"provenance": "human_labeled", "value": {"severity": "high"}},
        "rubric": [{"criterionId": "names-severity", "expected": True}],
        "provenance": [{"runId": "run_a", "sequence": 3}],
        **overrides,
    }


def entry_for(item: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {
        "itemSha": eval_item_sha(item),
        "bodySha": eval_item_body_sha(item),
        "target": item["target"],
        "role": "gate",
        "replayValidity": "pure",
        "labelProvenance": item["label"]["provenance"],
        "clusterId": "trace-1",
        "referencedFields": ["$.output.severity"],
        "inputConeHash": sha256_digest("cone"),
        "inputConeAlgorithm": "lwir-input-cone@v1",
        "createdAt": "2026-08-01T09:00:00Z",
        **overrides,
    }


def card(**overrides: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "support.summarize.gate",
            "description": "Gate set for the support summariser.",
            "createdAt": "2026-08-01T09:00:00Z",
        },
        "workflowName": "support.summarize",
        "workflowLwirSha": sha256_digest("lwir"),
        "constructs": [
            {
                "target": "summarize",
                "passCriterion": "The summary names the severity and the affected system.",
                "criteria": [{"id": "names-severity", "text": "Severity is stated explicitly."}],
                "resampleK": 3,
                "authoredAt": "2026-07-30T12:00:00Z",
            }
        ],
        "sampling": {
            "strategy": "replay_window",
            "window": {"fromAt": "2026-06-01T00:00:00Z", "toAt": "2026-07-01T00:00:00Z"},
            "strata": [{"id": "p1", "definition": "priority = 1", "count": 40}],
        },
        "sealPolicy": {
            "algorithm": "HMAC-SHA256",
            "sealKeyId": SEAL_KEY_ID,
            "custody": "dev_local",
            "cutoff": "9223372036854775808",
            "domain": "evalset-seal/v1/support.summarize",
        },
        "desiderata": {
            "difficultyBand": {"targetLow": "0.30", "targetHigh": "0.70", "achieved": "0.52"},
            "coverage": {"target": "0.90", "achieved": "0.93", "basis": "contract fields touched"},
            "diversityClusters": {"target": 20, "achieved": 24},
        },
        "generation": {
            "candidatesGenerated": 210,
            "admitted": 100,
            "rejectedByStage": [{"stage": "dedup", "count": 60}],
            "authorModel": {
                "providerId": "deepseek",
                "modelId": "deepseek-chat",
                "family": "deepseek",
            },
        },
        "audit": {
            "nAudited": 30,
            "raters": [{"ref": "rater-7", "kind": "human"}],
            "labelErrorEstimate": {"point": "0.04", "ciLow": "0.01", "ciHigh": "0.09"},
        },
        "judge": {
            "modelPin": {"providerId": "anthropic", "modelId": "judge-1", "family": "claude"},
            "rubricSha": sha256_digest("rubric"),
            "calibrationSetSha": sha256_digest("calibration"),
            "tpr": "0.93",
            "tnr": "0.88",
        },
        "independence": {
            "evalAuthorFamily": "claude",
            "workflowAuthorFamily": "deepseek",
            "distinct": True,
            "humanReviewerRef": "reviewer-2",
        },
        "noiseFloor": {
            "method": "incumbent_rerun",
            "runs": 5,
            "deltaPpP50": "0.4",
            "deltaPpP95": "1.9",
            "measuredAt": "2026-07-31T18:00:00Z",
        },
        "canaryGuid": "canary-3f9a1c2b4d5e6f70",
        "lifecycle": {
            "refresh": {
                "policy": "rotate_fraction",
                "numerator": 1,
                "denominator": 6,
                "cadence": "P30D",
            },
            "gateQueryBudget": 12,
        },
        "pii": {"status": "synthetic", "retentionClass": "evidence-5y"},
        **overrides,
    }


def bundle_of(entries: list[dict[str, Any]], **card_overrides: Any) -> dict[str, Any]:
    return {
        "apiVersion": EVAL_SET_API_VERSION,
        "kind": "EvalSet",
        "manifest": card(**card_overrides),
        "index": sort_index(entries),
    }


def codes(value: Any, **options: Any) -> list[str]:
    return [f["code"] for f in validate_eval_set(value, **options).errors]


def reverse_keys(value: Any) -> Any:
    if isinstance(value, list):
        return [reverse_keys(item) for item in value]
    if isinstance(value, dict):
        return {key: reverse_keys(value[key]) for key in reversed(list(value))}
    return value


def test_a_valid_bundle_registers_under_its_content_hash() -> None:
    version, warnings = register_eval_set(bundle_of([entry_for(body())]))
    assert warnings == []
    assert version.hash == sha256_digest(version.bundle)
    assert version.id == "evset_" + version.hash.removeprefix("sha256:")[:16]
    assert version.canonical_json == canonical_json(version.bundle)
    stored = version.to_json()
    assert stored["canonicalizer"] == "little-workflow-canonical-json@alpha"
    assert set(stored) == {"id", "hash", "canonicalizer", "canonicalJson", "bundle"}


def test_the_hash_is_independent_of_key_order() -> None:
    bundle = bundle_of([entry_for(body())])
    assert register_eval_set(reverse_keys(bundle))[0].hash == register_eval_set(bundle)[0].hash


def test_warnings_stay_out_of_the_registered_bytes() -> None:
    bundle = bundle_of([entry_for(body())])
    warned, warnings = register_eval_set(bundle, known_lineages=["something.else"])
    assert [w["code"] for w in warnings] == ["evalset.unknown_lineage"]
    assert "renamed" in warnings[0]["message"] and "something.else" in warnings[0]["message"]
    assert warned.hash == register_eval_set(bundle)[0].hash
    assert validate_eval_set(bundle, known_lineages=["support.summarize"]).warnings == []


def test_a_float_in_a_decimal_position_is_refused_twice_over() -> None:
    judge = {**card()["judge"], "tpr": 0.93}
    found = codes(bundle_of([entry_for(body())], judge=judge))
    assert "evalset.decimal_not_string" in found
    assert "evalset.float_in_hashed_payload" in found
    with pytest.raises(EvalSetValidationError) as raised:
        register_eval_set(bundle_of([entry_for(body())], judge=judge))
    assert "$.manifest.judge.tpr" in str(raised.value)


def test_an_integer_in_a_decimal_position_is_refused_by_the_decimal_rule_only() -> None:
    found = codes(bundle_of([entry_for(body())], judge={**card()["judge"], "tnr": 1}))
    assert "evalset.decimal_not_string" in found
    assert "evalset.float_in_hashed_payload" not in found


def test_a_float_anywhere_is_refused_with_its_path_even_in_extensions() -> None:
    bundle = bundle_of([entry_for(body())], extensions={"lending.fairness/v1": {"air": 0.82}})
    found = validate_eval_set(bundle).errors
    assert ("evalset.float_in_hashed_payload", "$.manifest.extensions.lending.fairness/v1.air") in [
        (f["code"], f["path"]) for f in found
    ]


@pytest.mark.parametrize("malformed", ["1e-3", "+1", "01", "-0", "-0.00", ".5", "1.", "0,5", ""])
def test_malformed_decimal_strings_are_refused(malformed: str) -> None:
    judge = {**card()["judge"], "tpr": malformed}
    found = validate_eval_set(bundle_of([entry_for(body())], judge=judge))
    assert not found.valid
    assert {f["code"] for f in found.errors} & {
        "evalset.decimal_malformed",
        "evalset.decimal_not_string",
    }


def test_trailing_zeros_are_significant_to_the_hash() -> None:
    two = register_eval_set(
        bundle_of([entry_for(body())], judge={**card()["judge"], "tpr": "0.90"})
    )
    one = register_eval_set(bundle_of([entry_for(body())], judge={**card()["judge"], "tpr": "0.9"}))
    assert two[0].hash != one[0].hash


def test_the_seal_cutoff_is_a_uint64_string_and_no_key_is_accepted() -> None:
    policy = card()["sealPolicy"]
    as_number = codes(bundle_of([entry_for(body())], sealPolicy={**policy, "cutoff": 2**63}))
    too_large = codes(
        bundle_of([entry_for(body())], sealPolicy={**policy, "cutoff": "18446744073709551616"})
    )
    with_key = codes(bundle_of([entry_for(body())], sealPolicy={**policy, "key": "hunter2"}))
    assert "evalset.decimal_not_string" in as_number
    assert "evalset.schema.invalid" in too_large
    assert "evalset.schema.unknown_key" in with_key


def test_roles_are_upstreams_four_and_sealed_roles_are_refused_with_a_reason() -> None:
    assert EVAL_ITEM_ROLES == ("optimizer", "gate", "regression", "honeypot")
    for role in ("gate_sealed", "gate_dev"):
        found = validate_eval_set(bundle_of([entry_for(body(), role=role)])).errors
        sealed = [f for f in found if f["code"] == "evalset.sealed_role"]
        assert sealed and "gate" in sealed[0]["message"]


def test_a_variant_group_with_mixed_roles_is_refused() -> None:
    first = body()
    second = body(input={"kind": "inline", "value": {"ticket": "printer ablaze"}})
    bundle = bundle_of(
        [
            entry_for(first, role="gate", variantGroupId="paraphrase-1"),
            entry_for(second, role="optimizer", variantGroupId="paraphrase-1"),
        ]
    )
    assert "evalset.variant_group_role_conflict" in codes(bundle)


def test_the_index_is_strictly_ascending_by_item_sha() -> None:
    first, second = body(), body(input={"kind": "inline", "value": {"ticket": "b"}})
    ordered = sort_index([entry_for(first), entry_for(second)])
    assert validate_eval_set(bundle_of(ordered)).valid
    reversed_bundle = {**bundle_of(ordered), "index": list(reversed(ordered))}
    assert "evalset.index_unsorted" in codes(reversed_bundle)
    twice = {**bundle_of([]), "index": [entry_for(first), entry_for(first)]}
    assert "evalset.index_unsorted" in codes(twice)


@pytest.mark.parametrize(
    "pointer",
    [{"runId": "run_a"}, {"sequence": 3}, {"eventId": "evt_1"}, {"provenance": [{"runId": "r"}]}],
)
def test_an_index_entry_never_carries_a_run_pointer(pointer: dict[str, Any]) -> None:
    assert "evalset.index_run_pointer" in codes(bundle_of([entry_for(body(), **pointer)]))


def test_an_item_needs_a_construct_and_the_cone_algorithm_is_pinned() -> None:
    other = body(target="classify")
    assert "evalset.unknown_target" in codes(bundle_of([entry_for(other)]))
    bumped = bundle_of([entry_for(body(), inputConeAlgorithm="lwir-input-cone@v2")])
    assert not validate_eval_set(bumped).valid


def test_item_identity_ignores_provenance_and_integrity_does_not() -> None:
    a = body(provenance=[{"runId": "run_a", "sequence": 3}])
    b = body(provenance=[{"runId": "run_b", "sequence": 41, "eventId": "evt_9"}])
    assert eval_item_sha(a) == eval_item_sha(b)
    assert eval_item_body_sha(a) != eval_item_body_sha(b)
    assert eval_item_sha(body(label={"provenance": "human_labeled", "value": "low"})) != (
        eval_item_sha(body())
    )
    item_sha, body_sha, text = registered_body(body(), SYNTHETIC)
    assert (item_sha, body_sha) == (eval_item_sha(body()), eval_item_body_sha(body()))
    assert sha256_digest(body()) == body_sha and text == canonical_json(body())


@pytest.mark.parametrize("status", ["surrogate", "redacted", "raw_prohibited"])
def test_inline_content_is_only_for_synthetic_sets(status: str) -> None:
    policy = {"status": status, "retentionClass": "e", "disposalDue": "2028-01-01T00:00:00Z"}
    found = [f["code"] for f in validate_eval_item_body(body(), policy).errors]
    assert "evalset.inline_content_not_synthetic" in found
    vaulted = body(
        input={"kind": "vault", "vaultRef": "evpv_1", "shape": {}},
        referenceAnswer={"kind": "inline", "value": "high"},
    )
    found = [(f["code"], f["path"]) for f in validate_eval_item_body(vaulted, policy).errors]
    assert found == [("evalset.inline_content_not_synthetic", "$.referenceAnswer")]
    assert validate_eval_item_body(body(), SYNTHETIC).valid
    no_policy = [f["code"] for f in validate_eval_item_body(body()).errors]
    assert no_policy == ["evalset.inline_content_requires_pii_policy"]


def test_a_non_synthetic_set_needs_a_disposal_clock_and_free_text_no_contacts() -> None:
    found = validate_eval_set(
        bundle_of([entry_for(body())], pii={"status": "surrogate", "retentionClass": "pii"})
    ).errors
    assert ("evalset.schema.missing", "$.manifest.pii.disposalDue") in [
        (f["code"], f["path"]) for f in found
    ]
    email = {**card()["audit"], "raters": [{"ref": "jane.doe@example.com", "kind": "human"}]}
    phone = {**card()["metadata"], "description": "Owner: 555-123-4567"}
    assert "evalset.pii_in_free_text" in codes(bundle_of([entry_for(body())], audit=email))
    assert "evalset.pii_in_free_text" in codes(bundle_of([entry_for(body())], metadata=phone))


def test_bodies_are_verified_against_the_index_both_ways() -> None:
    item, stranger = body(), body(input={"kind": "inline", "value": {"ticket": "stranger"}})
    bundle = register_eval_set(bundle_of([entry_for(item), entry_for(stranger)]))[0].bundle
    assert verify_eval_set_bodies(bundle, [item, stranger]).valid
    tampered = {**item, "provenance": [{"runId": "run_z", "sequence": 1}]}
    alone = register_eval_set(bundle_of([entry_for(item)]))[0].bundle

    def found(b: Any, bodies: list[Any], **kw: Any) -> list[str]:
        return [f["code"] for f in verify_eval_set_bodies(b, bodies, **kw).errors]

    assert "evalset.body_sha_mismatch" in found(alone, [tampered])
    assert "evalset.body_not_indexed" in found(alone, [stranger])
    assert "evalset.body_missing" in found(bundle, [item])
    assert found(bundle, [item], partial=True) == []
    relabelled = register_eval_set(bundle_of([entry_for(item, labelProvenance="judge_labeled")]))[
        0
    ].bundle
    assert "evalset.body_label_provenance_mismatch" in found(relabelled, [item])
    invented = body(rubric=[{"criterionId": "invented", "expected": True}])
    with_invented = register_eval_set(bundle_of([entry_for(invented)]))[0].bundle
    assert found(with_invented, [invented]) == ["evalset.unknown_criterion"]


def test_structural_rules_name_the_path() -> None:
    assert "evalset.schema.unknown_key" in codes({**bundle_of([entry_for(body())]), "surprise": 1})
    for stamp in (
        "2026-08-01T09:00:00.000Z",
        "2026-08-01T09:00:00+00:00",
        "2026-08-01",
        "2026-02-30T00:00:00Z",
    ):
        found = validate_eval_set(bundle_of([entry_for(body(), createdAt=stamp)])).errors
        assert ("evalset.schema.invalid", "$.index[0].createdAt") in [
            (f["code"], f["path"]) for f in found
        ]
    same = {"evalAuthorFamily": "claude", "workflowAuthorFamily": "claude", "distinct": True}
    assert "evalset.independence_inconsistent" in codes(
        bundle_of([entry_for(body())], independence=same)
    )
    generation = {**card()["generation"], "candidatesGenerated": 10, "admitted": 11}
    assert "evalset.schema.invalid" in codes(bundle_of([entry_for(body())], generation=generation))
    assert "evalset.extension_key_unnamespaced" in codes(
        bundle_of([entry_for(body())], extensions={"fairness": {}})
    )
    missing = copy.deepcopy(bundle_of([entry_for(body())]))
    del missing["manifest"]["judge"]
    assert ("evalset.schema.missing", "$.manifest.judge") in [
        (f["code"], f["path"]) for f in validate_eval_set(missing).errors
    ]
    assert codes(["not", "a", "bundle"]) == ["evalset.schema.invalid"]


def test_the_seal_split_is_the_hmac_rule_and_the_key_id_is_no_plain_hash() -> None:
    key = b"the seal key"
    expected_id = hmac.new(key, b"littleworkflow/evalset/seal-key-id/v1", hashlib.sha256)
    assert seal_key_id(key) == "hmac-sha256-id:" + expected_id.hexdigest()
    assert seal_key_id(key) != "hmac-sha256-id:" + hashlib.sha256(key).hexdigest()
    item = eval_item_sha(body())
    mac = hmac.new(key, b"domain" + item.encode(), hashlib.sha256).digest()
    value = int.from_bytes(mac[:8], "big")
    assert is_sealed(key, "domain", item, str(value + 1))
    assert not is_sealed(key, "domain", item, str(value))
    assert not is_sealed(key, "domain", item, "0")
    assert is_sealed(key, "domain", item, str(2**64 - 1)) == (value < 2**64 - 1)
    # About half of many items fall under a cutoff of 2^63.
    shas = [sha256_digest(n) for n in range(400)]
    sealed = sum(is_sealed(key, "d", sha, str(2**63)) for sha in shas)
    assert 150 < sealed < 250
