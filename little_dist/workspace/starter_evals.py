"""The starter eval set ``little init`` writes beside its starter workflow (ours: upstream's
``init`` makes no eval set), so that ``little eval run`` works right after ``init``:

    workflows/NAME/evals/NAME.evalset.json   the bundle (eval card and item-hash index)
    workflows/NAME/evals/NAME.items.json     the item bodies (inputs and labels)

Two candidates, each labelled with what the scripted model answers (so the set passes
offline; on a real model, relabel it) and a rubric criterion the card's judge answers: the
judge is the workflow's own scripted model (``scripted/NAME``), priced as its model slot is.
"""

from __future__ import annotations

import json
from typing import Any

from little_dist.workspace.templates import INPUT_EXAMPLE, REVIEW_TEXT, starter_lwir

__all__ = ["starter_eval_files"]

_WHEN = "2026-01-01T00:00:00Z"
_CANDIDATES = [
    (INPUT_EXAMPLE, "gate"),
    (
        {
            "name": "Grace Hopper",
            "notes": "Built the first compiler; explains hard ideas plainly; leads teams well.",
        },
        "regression",
    ),
]
_CRITERION = {"id": "next-step", "text": "The review names one next step for the candidate."}


def starter_eval_files(name: str) -> dict[str, str]:
    """The starter eval set's files (relative to the workflow folder -> text)."""
    bundle, bodies = _build(name)
    return {
        f"evals/{name}.evalset.json": json.dumps(bundle, indent=2, ensure_ascii=False) + "\n",
        f"evals/{name}.items.json": json.dumps(bodies, indent=2, ensure_ascii=False) + "\n",
    }


def _build(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from little_dist.compiler import compile_lwir
    from little_dist.evals import (
        EVAL_ITEM_API_VERSION,
        EVAL_SET_API_VERSION,
        WORKFLOW_TARGET,
        cone_for,
        index_entry,
        sort_index,
    )

    lwir = starter_lwir(name)
    cone = cone_for(lwir, WORKFLOW_TARGET)
    assert cone is not None  # (the whole document's: never unknown)
    bodies = [
        {
            "apiVersion": EVAL_ITEM_API_VERSION,
            "kind": "EvalItem",
            "target": WORKFLOW_TARGET,
            "input": {"kind": "inline", "value": value},
            "label": {"provenance": "human_labeled", "value": REVIEW_TEXT},
            "rubric": [{"criterionId": _CRITERION["id"], "expected": True}],
            "provenance": [],
        }
        for value, _ in _CANDIDATES
    ]
    entries = [
        index_entry(
            body,
            role=role,
            cluster_id=f"candidate-{number}",
            input_cone_hash=cone,
            created_at=_WHEN,
            referenced_fields=["$.output"],
        )
        for number, (body, (_, role)) in enumerate(zip(bodies, _CANDIDATES, strict=True))
    ]
    bundle = {
        "apiVersion": EVAL_SET_API_VERSION,
        "kind": "EvalSet",
        "manifest": _card(name, lwir["metadata"]["name"], compile_lwir(lwir).hash),
        "index": sort_index(entries),
    }
    return bundle, bodies


def _card(name: str, workflow_id: str, lwir_sha: str) -> dict[str, Any]:
    from little_dist.canonical import sha256_digest
    from little_dist.evals import seal_key_id

    judge = {"providerId": "scripted", "modelId": name, "family": "scripted"}
    return {
        "metadata": {
            "name": f"{workflow_id}.starter",
            "description": f"The starter eval set of {name} (made by little init).",
            "createdAt": _WHEN,
        },
        "workflowName": workflow_id,
        "workflowLwirSha": lwir_sha,
        "constructs": [
            {
                "target": "$workflow",
                "passCriterion": "The review is the expected one and names a next step.",
                "criteria": [_CRITERION],
                "resampleK": 1,
                "authoredAt": _WHEN,
            }
        ],
        "sampling": {
            "strategy": "stratified",
            "strata": [{"id": "all", "definition": "every candidate", "count": 2}],
        },
        "sealPolicy": {
            "algorithm": "HMAC-SHA256",
            "sealKeyId": seal_key_id(f"starter seal key of {name}: not a secret".encode()),
            "custody": "dev_local",
            "cutoff": "9223372036854775808",
            "domain": f"evalset-seal/v1/{workflow_id}",
        },
        "desiderata": {
            "difficultyBand": {"targetLow": "0", "targetHigh": "1", "achieved": "0"},
            "coverage": {"target": "1", "achieved": "1", "basis": "a starter set"},
            "diversityClusters": {"target": 2, "achieved": 2},
        },
        "generation": {
            "candidatesGenerated": 2,
            "admitted": 2,
            "rejectedByStage": [],
            "authorModel": judge,
        },
        "audit": {
            "nAudited": 2,
            "raters": [{"ref": "little-init", "kind": "human"}],
            "labelErrorEstimate": {"point": "0", "ciLow": "0", "ciHigh": "1"},
        },
        "judge": {
            "modelPin": judge,
            "rubricSha": sha256_digest(_CRITERION["text"]),
            "calibrationSetSha": sha256_digest("no calibration set"),
            "tpr": "1",
            "tnr": "1",
        },
        "independence": {
            "evalAuthorFamily": "human",
            "workflowAuthorFamily": "scripted",
            "distinct": True,
        },
        "noiseFloor": {
            "method": "incumbent_rerun",
            "runs": 1,
            "deltaPpP50": "0",
            "deltaPpP95": "0",
            "measuredAt": _WHEN,
        },
        "canaryGuid": f"canary-{name}-starter",
        "lifecycle": {
            "refresh": {
                "policy": "rotate_fraction",
                "numerator": 1,
                "denominator": 2,
                "cadence": "P90D",
            },
            "gateQueryBudget": 20,
        },
        "pii": {"status": "synthetic", "retentionClass": "example"},
    }
