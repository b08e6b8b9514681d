"""Eval item bodies (upstream's ``EvalItemBody``): the privileged half of an eval set, each
addressed by its own hash and never inlined into the bundle.

Two hashes per item: ``itemSha`` (identity: the body minus ``provenance``, so one item mined
from two traces is one item) and ``bodySha`` (integrity: the whole body, what a reader
verifies and the store's address). Inline content is legal only when the owning card says
its PII status is ``synthetic``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.evals.bundle import LABEL_PROVENANCES, EvalSetValidationError
from little_dist.evals.checks import Findings

__all__ = [
    "EVAL_ITEM_API_VERSION",
    "eval_item_body_sha",
    "eval_item_sha",
    "index_entry",
    "registered_body",
    "validate_eval_item_body",
    "verify_eval_set_bodies",
]

EVAL_ITEM_API_VERSION: Final = "littleworkflow.dev/evalitem/v0.1"


def eval_item_sha(body: Mapping[str, Any]) -> str:
    """Identity hash: the body without ``provenance``."""
    return sha256_digest({key: value for key, value in body.items() if key != "provenance"})


def eval_item_body_sha(body: Mapping[str, Any]) -> str:
    """Integrity hash of the whole body, provenance included."""
    return sha256_digest(body)


def validate_eval_item_body(value: Any, pii: Mapping[str, Any] | None = None) -> Findings:
    """Every finding for ``value`` as an item body under the card's PII policy ``pii``."""
    found = Findings()
    found.integers_only(value)
    body = found.record(value, "$")
    if body is None:
        return found
    found.keys(
        body,
        "$",
        ["apiVersion", "kind", "target", "input", "label", "rubric", "provenance"],
        ["referenceAnswer"],
    )
    found.literal(body.get("apiVersion"), EVAL_ITEM_API_VERSION, "$.apiVersion")
    found.literal(body.get("kind"), "EvalItem", "$.kind")
    found.string(body.get("target"), "$.target")
    _content(found, body.get("input"), pii, "$.input")
    if "referenceAnswer" in body:
        _content(found, body["referenceAnswer"], pii, "$.referenceAnswer")
    _label(found, body.get("label"), "$.label")
    seen: set[str] = set()
    for index, item in enumerate(found.array(body.get("rubric"), "$.rubric") or []):
        at = f"$.rubric[{index}]"
        criterion = found.record(item, at)
        if criterion is None:
            continue
        found.keys(criterion, at, ["criterionId", "expected"])
        cid = found.string(criterion.get("criterionId"), f"{at}.criterionId")
        if cid is not None:
            if cid in seen:
                found.error(
                    "evalset.duplicate_criterion",
                    f"{at}.criterionId",
                    f"Criterion '{cid}' appears twice in this rubric.",
                )
            seen.add(cid)
        found.boolean(criterion.get("expected"), f"{at}.expected")
    for index, item in enumerate(found.array(body.get("provenance"), "$.provenance") or []):
        at = f"$.provenance[{index}]"
        pointer = found.record(item, at)
        if pointer is None:
            continue
        found.keys(pointer, at, ["runId", "sequence"], ["eventId"])
        found.string(pointer.get("runId"), f"{at}.runId")
        found.integer(pointer.get("sequence"), f"{at}.sequence")
        if "eventId" in pointer:
            found.string(pointer["eventId"], f"{at}.eventId")
    return found


def registered_body(value: Any, pii: Mapping[str, Any]) -> tuple[str, str, str]:
    """Validate, then hash: ``(itemSha, bodySha, canonical JSON)``. Raises
    :class:`~.bundle.EvalSetValidationError`."""
    found = validate_eval_item_body(value, pii)
    if not found.valid:
        raise EvalSetValidationError(found)
    return eval_item_sha(value), eval_item_body_sha(value), canonical_json(value)


def verify_eval_set_bodies(
    bundle: Mapping[str, Any], bodies: Iterable[Any], *, partial: bool = False
) -> Findings:
    """Check ``bodies`` against the index ``bundle`` commits to, both ways (every body is
    indexed with its hashes; unless ``partial``, every entry has a body), and the facts the
    index repeats from a body (target, label provenance, rubric criteria)."""
    found = Findings()
    manifest = bundle["manifest"]
    by_item = {entry["itemSha"]: entry for entry in bundle["index"]}
    criteria = {
        construct["target"]: {criterion["id"] for criterion in construct["criteria"]}
        for construct in manifest["constructs"]
    }
    seen: set[str] = set()
    for position, body in enumerate(bodies):
        path = f"$.bodies[{position}]"
        checked = validate_eval_item_body(body, manifest["pii"])
        found.extend(checked, path)
        if not checked.valid:
            continue
        item_sha, body_sha = eval_item_sha(body), eval_item_body_sha(body)
        entry = by_item.get(item_sha)
        if entry is None:
            found.error(
                "evalset.body_not_indexed",
                path,
                f"Body has item sha {item_sha}, which no index entry of this bundle claims.",
            )
            continue
        seen.add(item_sha)
        if entry["bodySha"] != body_sha:
            found.error(
                "evalset.body_sha_mismatch",
                path,
                f"Body hashes to {body_sha} but the index entry for {item_sha} pins bodySha "
                f"{entry['bodySha']}.",
            )
        if entry["target"] != body["target"]:
            found.error(
                "evalset.body_target_mismatch",
                f"{path}.target",
                f"Body target '{body['target']}' disagrees with the index entry's "
                f"'{entry['target']}'.",
            )
        if entry["labelProvenance"] != body["label"]["provenance"]:
            found.error(
                "evalset.body_label_provenance_mismatch",
                f"{path}.label.provenance",
                f"Body label provenance '{body['label']['provenance']}' disagrees with the "
                f"index entry's '{entry['labelProvenance']}'.",
            )
        declared = criteria.get(body["target"])
        for index, criterion in enumerate(body["rubric"]):
            if declared is not None and criterion["criterionId"] not in declared:
                found.error(
                    "evalset.unknown_criterion",
                    f"{path}.rubric[{index}].criterionId",
                    f"Criterion '{criterion['criterionId']}' is not declared by the construct "
                    f"for target '{body['target']}'.",
                )
    if not partial:
        for item_sha in by_item:
            if item_sha not in seen:
                found.error(
                    "evalset.body_missing",
                    "$.bodies",
                    f"No body was supplied for index entry {item_sha}. Pass partial=True to "
                    "verify a subset.",
                )
    return found


def _content(found: Findings, value: Any, pii: Mapping[str, Any] | None, path: str) -> None:
    content = found.record(value, path)
    if content is None:
        return
    kind = found.enum(content.get("kind"), ("inline", "vault"), f"{path}.kind")
    if kind == "inline":
        found.keys(content, path, ["kind", "value"])
        if pii is None:
            found.error(
                "evalset.inline_content_requires_pii_policy",
                path,
                "Inline item content can only be validated against a PII policy. Register the "
                "body with the owning bundle's { pii } so the check runs before anything is "
                "hashed.",
            )
        elif pii.get("status") != "synthetic":
            found.error(
                "evalset.inline_content_not_synthetic",
                path,
                "Inline content is legal only when the manifest declares pii.status === "
                f"\"synthetic\"; this manifest declares '{pii.get('status')}'. Use "
                '{ kind: "vault", vaultRef, shape } so disposal can be executed by shredding '
                "a key rather than by deleting immutable evidence.",
            )
    elif kind == "vault":
        found.keys(content, path, ["kind", "vaultRef", "shape"])
        found.string(content.get("vaultRef"), f"{path}.vaultRef")


def _label(found: Findings, value: Any, path: str) -> None:
    label = found.record(value, path)
    if label is None:
        return
    found.keys(label, path, ["provenance", "value"], ["evidence"])
    found.enum(label.get("provenance"), LABEL_PROVENANCES, f"{path}.provenance")
    if "evidence" not in label:
        return
    at = f"{path}.evidence"
    evidence = found.record(label["evidence"], at)
    if evidence is None:
        return
    kind = found.enum(evidence.get("kind"), ("citation", "mutation", "replay"), f"{at}.kind")
    if kind == "citation":
        found.keys(evidence, at, ["kind", "sourceSha", "locator", "matchScore"])
        found.digest(evidence.get("sourceSha"), f"{at}.sourceSha")
        found.string(evidence.get("locator"), f"{at}.locator")
        found.decimal(evidence.get("matchScore"), f"{at}.matchScore")
    elif kind == "mutation":
        found.keys(evidence, at, ["kind", "baseItemSha", "transform", "entailedVia"])
        found.digest(evidence.get("baseItemSha"), f"{at}.baseItemSha")
        found.string(evidence.get("transform"), f"{at}.transform")
        found.sorted_strings(evidence.get("entailedVia"), f"{at}.entailedVia")
    elif kind == "replay":
        found.keys(evidence, at, ["kind", "runId", "sequence"])
        found.string(evidence.get("runId"), f"{at}.runId")
        found.integer(evidence.get("sequence"), f"{at}.sequence")


def index_entry(
    body: Mapping[str, Any],
    *,
    role: str,
    cluster_id: str,
    input_cone_hash: str,
    created_at: str,
    replay_validity: str = "pure",
    referenced_fields: Iterable[str] = (),
    variant_group_id: str | None = None,
    resample_k: int | None = None,
) -> dict[str, Any]:
    """The index entry for ``body`` with its set-scoped assignments (role, cluster, ...);
    the hashes and the facts the index repeats (target, label provenance) come from the
    body, so an author cannot get them wrong."""
    from little_dist.evals.bundle import LWIR_INPUT_CONE_ALGORITHM
    from little_dist.evals.checks import utf16_key

    entry: dict[str, Any] = {
        "itemSha": eval_item_sha(body),
        "bodySha": eval_item_body_sha(body),
        "target": body["target"],
        "role": role,
        "replayValidity": replay_validity,
        "labelProvenance": body["label"]["provenance"],
        "clusterId": cluster_id,
        "referencedFields": sorted(set(referenced_fields), key=utf16_key),
        "inputConeHash": input_cone_hash,
        "inputConeAlgorithm": LWIR_INPUT_CONE_ALGORITHM,
        "createdAt": created_at,
    }
    if variant_group_id is not None:
        entry["variantGroupId"] = variant_group_id
    if resample_k is not None:
        entry["resampleK"] = resample_k
    return entry
