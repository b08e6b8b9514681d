"""Eval-set bundles (upstream's ``eval-set.ts``): the eval card plus a Merkle index of item
hashes, validated and registered by content hash.

A bundle holds no item content: every index field is an id, an enum, a hash, an integer or a
timestamp, so anything that may render a card may read it, while item bodies (inputs,
labels) stay behind their own hashes (:mod:`.items`). That split is what makes a sealed gate
split mean something. Real numbers are decimal strings, never JSON floats, so the bundle's
hash is checkable outside JavaScript. Field names, finding codes and paths are upstream's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.errors import InvalidInputError
from little_dist.evals.card import check_sections
from little_dist.evals.checks import Findings, utf16_key
from little_dist.lwir.input_cone import LWIR_INPUT_CONE_ALGORITHM

__all__ = [
    "EVAL_ITEM_ROLES",
    "EVAL_SET_API_VERSION",
    "EVAL_SET_CANONICALIZER",
    "LABEL_PROVENANCES",
    "LWIR_INPUT_CONE_ALGORITHM",
    "WORKFLOW_TARGET",
    "EvalSetValidationError",
    "EvalSetVersion",
    "register_eval_set",
    "validate_eval_set",
]

EVAL_SET_API_VERSION: Final = "littleworkflow.dev/evalset/v0.1"
EVAL_SET_CANONICALIZER: Final = "little-workflow-canonical-json@alpha"
#: The ``target`` of an item that tests the workflow end to end rather than one step.
WORKFLOW_TARGET: Final = "$workflow"
# No "gate_sealed": a queryable sealed flag is the membership list sealing exists to forbid;
# the key holder computes the split at gate time (:mod:`.seal`).
EVAL_ITEM_ROLES: Final = ("optimizer", "gate", "regression", "honeypot")
REPLAY_VALIDITY_CLASSES: Final = ("pure", "feedback", "side_effectful")
LABEL_PROVENANCES: Final = (
    "replay_inherited",
    "citation_grounded",
    "mutation_entailed",
    "judge_labeled",
    "human_labeled",
)
# A run or event pointer in the readable half would hand every authoring session the inputs
# the split withholds; these get their own code so the reason is legible.
_FORBIDDEN_INDEX_KEYS: Final = ("provenance", "runId", "sequence", "eventId", "events")


class EvalSetValidationError(InvalidInputError):
    """An eval set or item body with error findings (``.findings``, ``.warnings``)."""

    def __init__(self, findings: Findings) -> None:
        first = findings.errors[0] if findings.errors else None
        where = f": {first['path']}: {first['message']}" if first else ""
        super().__init__(f"Invalid eval set{where}")
        self.findings = findings.errors
        self.warnings = findings.warnings


@dataclass(frozen=True)
class EvalSetVersion:
    """A registered bundle: ``id`` is ``evset_`` + 16 hex of ``hash`` (``eval_set_sha``)."""

    id: str
    hash: str
    canonical_json: str
    bundle: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        """Upstream's stored shape (``canonicalJson`` beside the parsed bundle)."""
        return {
            "id": self.id,
            "hash": self.hash,
            "canonicalizer": EVAL_SET_CANONICALIZER,
            "canonicalJson": self.canonical_json,
            "bundle": self.bundle,
        }


def validate_eval_set(value: Any, *, known_lineages: Iterable[str] | None = None) -> Findings:
    """Every finding for ``value`` as a bundle. ``known_lineages``: workflow names seen
    locally; an unknown ``workflowName`` is a warning (a rename orphans old eval sets, but a
    new workflow looks the same)."""
    found = Findings()
    found.integers_only(value)
    bundle = found.record(value, "$")
    if bundle is None:
        return found
    found.keys(bundle, "$", ["apiVersion", "kind", "manifest", "index"])
    found.literal(bundle.get("apiVersion"), EVAL_SET_API_VERSION, "$.apiVersion")
    found.literal(bundle.get("kind"), "EvalSet", "$.kind")
    targets = _manifest(found, bundle.get("manifest"), known_lineages)
    _index(found, bundle.get("index"), targets)
    return found


def register_eval_set(
    value: Any, *, known_lineages: Iterable[str] | None = None
) -> tuple[EvalSetVersion, list[dict[str, str]]]:
    """Validate, then hash: ``(version, warnings)``. Warnings are not evidence and never
    part of the version's bytes. Raises :class:`EvalSetValidationError`."""
    found = validate_eval_set(value, known_lineages=known_lineages)
    if not found.valid:
        raise EvalSetValidationError(found)
    text = canonical_json(value)
    digest = sha256_digest(value)
    hex_part = digest.removeprefix("sha256:")
    version = EvalSetVersion(f"evset_{hex_part[:16]}", digest, text, value)
    return version, found.warnings


def sort_index(entries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Index entries in the order a bundle requires: ascending ``itemSha``."""
    return sorted(entries, key=lambda entry: utf16_key(str(entry.get("itemSha"))))


# -- the card -------------------------------------------------------------------------------


def _manifest(found: Findings, value: Any, known: Iterable[str] | None) -> set[str]:
    path = "$.manifest"
    card = found.record(value, path)
    if card is None:
        return set()
    found.keys(
        card,
        path,
        [
            "metadata",
            "workflowName",
            "workflowLwirSha",
            "constructs",
            "sampling",
            "sealPolicy",
            "desiderata",
            "generation",
            "audit",
            "judge",
            "independence",
            "noiseFloor",
            "canaryGuid",
            "lifecycle",
            "pii",
        ],
        ["parentEvalSetSha", "migrationSha", "extensions"],
    )
    metadata = found.record(card.get("metadata"), f"{path}.metadata")
    if metadata is not None:
        found.keys(metadata, f"{path}.metadata", ["name", "createdAt"], ["description"])
        found.string(metadata.get("name"), f"{path}.metadata.name")
        found.timestamp(metadata.get("createdAt"), f"{path}.metadata.createdAt")
        if "description" in metadata:
            found.string(metadata["description"], f"{path}.metadata.description")
            found.free_text(metadata["description"], f"{path}.metadata.description")
    name = found.string(card.get("workflowName"), f"{path}.workflowName")
    found.digest(card.get("workflowLwirSha"), f"{path}.workflowLwirSha")
    for key in ("parentEvalSetSha", "migrationSha"):
        if key in card:
            found.digest(card[key], f"{path}.{key}")
    if name is not None and known is not None:
        known_set = set(known)
        if name not in known_set:
            listed = f" (known: {', '.join(sorted(known_set))})" if known_set else ""
            found.warn(
                "evalset.unknown_lineage",
                f"{path}.workflowName",
                f"Lineage '{name}' has not been seen before{listed}. If this workflow was "
                "renamed, its existing eval sets are now orphaned under the old name — migrate "
                "them rather than starting a new lineage.",
            )
    targets = _constructs(found, card.get("constructs"), f"{path}.constructs")
    check_sections(found, card, path)
    return targets


def _constructs(found: Findings, value: Any, path: str) -> set[str]:
    targets: set[str] = set()
    constructs = found.array(value, path)
    if constructs is None:
        return targets
    if not constructs:
        found.error(
            "evalset.schema.invalid",
            path,
            f"{path} must declare at least one construct: the pass criterion is written before "
            "items are generated, and an item with no construct cannot be scored.",
        )
    for index, item in enumerate(constructs):
        at = f"{path}[{index}]"
        construct = found.record(item, at)
        if construct is None:
            continue
        found.keys(
            construct, at, ["target", "passCriterion", "criteria", "resampleK", "authoredAt"]
        )
        target = found.string(construct.get("target"), f"{at}.target")
        if target is not None:
            if target in targets:
                found.error(
                    "evalset.duplicate_construct",
                    f"{at}.target",
                    f"Target '{target}' is defined by more than one construct.",
                )
            targets.add(target)
        found.string(construct.get("passCriterion"), f"{at}.passCriterion")
        found.free_text(construct.get("passCriterion"), f"{at}.passCriterion")
        found.integer(construct.get("resampleK"), f"{at}.resampleK", 1)
        found.timestamp(construct.get("authoredAt"), f"{at}.authoredAt")
        criteria = found.array(construct.get("criteria"), f"{at}.criteria")
        seen: set[str] = set()
        for position, entry in enumerate(criteria or []):
            where = f"{at}.criteria[{position}]"
            criterion = found.record(entry, where)
            if criterion is None:
                continue
            found.keys(criterion, where, ["id", "text"])
            cid = found.string(criterion.get("id"), f"{where}.id")
            if cid is not None:
                if cid in seen:
                    found.error(
                        "evalset.duplicate_criterion",
                        f"{where}.id",
                        f"Criterion id '{cid}' is declared twice for target "
                        f"'{construct.get('target')}'.",
                    )
                seen.add(cid)
            found.string(criterion.get("text"), f"{where}.text")
            found.free_text(criterion.get("text"), f"{where}.text")
    return targets


# -- the index ------------------------------------------------------------------------------


def _index(found: Findings, value: Any, targets: set[str]) -> None:
    path = "$.index"
    entries = found.array(value, path)
    if entries is None:
        return
    previous: str | None = None
    group_roles: dict[str, tuple[str, int]] = {}
    for position, item in enumerate(entries):
        at = f"{path}[{position}]"
        entry = found.record(item, at)
        if entry is None:
            continue
        for key in _FORBIDDEN_INDEX_KEYS:
            if key in entry:
                found.error(
                    "evalset.index_run_pointer",
                    f"{at}.{key}",
                    f"Index entries must not carry '{key}'. A run or event pointer "
                    "dereferences to the item's recorded input for anything with run-history "
                    "access, so it would hand every authoring session the gate and honeypot "
                    "inputs the manifest/body split exists to withhold. Provenance belongs in "
                    "the item body.",
                )
        found.keys(
            entry,
            at,
            [
                "itemSha",
                "bodySha",
                "target",
                "role",
                "replayValidity",
                "labelProvenance",
                "clusterId",
                "referencedFields",
                "inputConeHash",
                "inputConeAlgorithm",
                "createdAt",
            ],
            ["variantGroupId", "resampleK"],
        )
        item_sha = found.digest(entry.get("itemSha"), f"{at}.itemSha")
        found.digest(entry.get("bodySha"), f"{at}.bodySha")
        if item_sha is not None:
            if previous is not None and utf16_key(previous) >= utf16_key(item_sha):
                found.error(
                    "evalset.index_unsorted",
                    f"{at}.itemSha",
                    f"Index entries must be strictly ascending by itemSha: {item_sha} follows "
                    f"{previous}. The order is part of eval_set_sha, and strictness is what "
                    "makes a duplicate item sha impossible.",
                )
            previous = item_sha
        target = found.string(entry.get("target"), f"{at}.target")
        if target is not None and targets and target not in targets:
            found.error(
                "evalset.unknown_target",
                f"{at}.target",
                f"No construct declares target '{target}', so this item has no pass criterion.",
            )
        role = found.enum(entry.get("role"), EVAL_ITEM_ROLES, f"{at}.role")
        if entry.get("role") in ("gate_sealed", "gate_dev"):
            found.error(
                "evalset.sealed_role",
                f"{at}.role",
                f"'{entry.get('role')}' is not a role. Store 'gate' — the union of the dev and "
                "sealed splits — and let the key holder compute the partition at gate time; a "
                "queryable sealed flag is precisely the stored membership list sealing exists "
                "to forbid.",
            )
        found.enum(entry.get("replayValidity"), REPLAY_VALIDITY_CLASSES, f"{at}.replayValidity")
        found.enum(entry.get("labelProvenance"), LABEL_PROVENANCES, f"{at}.labelProvenance")
        found.string(entry.get("clusterId"), f"{at}.clusterId")
        found.digest(entry.get("inputConeHash"), f"{at}.inputConeHash")
        found.literal(
            entry.get("inputConeAlgorithm"), LWIR_INPUT_CONE_ALGORITHM, f"{at}.inputConeAlgorithm"
        )
        found.timestamp(entry.get("createdAt"), f"{at}.createdAt")
        if "resampleK" in entry:
            found.integer(entry["resampleK"], f"{at}.resampleK", 1)
        found.sorted_strings(entry.get("referencedFields"), f"{at}.referencedFields")
        if "variantGroupId" in entry:
            group = found.string(entry["variantGroupId"], f"{at}.variantGroupId")
            if group is not None and role is not None:
                first = group_roles.setdefault(group, (role, position))
                if first[0] != role:
                    found.error(
                        "evalset.variant_group_role_conflict",
                        f"{at}.role",
                        f"Variant group '{group}' holds role '{first[0]}' at index {first[1]} "
                        f"and '{role}' here. A mixed-role variant group leaks the gate item into "
                        "the optimizer set.",
                    )
