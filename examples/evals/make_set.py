"""Build the example eval set for ``ticket-severity`` (upstream's bundle and item bodies):

    .venv/bin/python -m examples.evals.make_set      # writes the two files below

* ``ticket-severity.evalset.json`` — the bundle: the eval card and the index of item hashes
  (no item content);
* ``ticket-severity.items.json`` — the item bodies: each ticket (the input) and its label
  (the output the workflow must give).

The files are checked in; a test rebuilds them and compares, so they never drift from the
workflow. The card's evidence fields (audit, judge, noise floor, ...) are what a real eval
set's author fills in; here they describe a small hand-labelled synthetic set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from little_dist.canonical import sha256_digest
from little_dist.evals import (
    EVAL_ITEM_API_VERSION,
    EVAL_SET_API_VERSION,
    WORKFLOW_TARGET,
    cone_for,
    index_entry,
    seal_key_id,
    sort_index,
)

HERE = Path(__file__).resolve().parent
WHEN = "2026-12-01T09:00:00Z"
#: (ticket, expected severity, role)
TICKETS = [
    ("The printer in room 4 is on fire.", "high", "gate"),
    ("Checkout crashes for every customer since 9am.", "high", "regression"),
    ("A typo on the pricing page: 'monthy'.", "low", "optimizer"),
    ("Could you add a dark mode some day?", "low", "optimizer"),
]


def workflow_lwir() -> dict[str, Any]:
    from little_dist.workspace import load_workflow

    plan = load_workflow(HERE / "ticket-severity").plan
    assert isinstance(plan, dict)
    return plan


def body(ticket: str, severity: str) -> dict[str, Any]:
    return {
        "apiVersion": EVAL_ITEM_API_VERSION,
        "kind": "EvalItem",
        "target": WORKFLOW_TARGET,
        "input": {"kind": "inline", "value": {"ticket": ticket}},
        "label": {"provenance": "human_labeled", "value": severity},
        "rubric": [],
        "provenance": [],
    }


def build() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(bundle, bodies)`` of the example set."""
    from little_dist.compiler import compile_lwir

    lwir = workflow_lwir()
    version = compile_lwir(lwir)
    # A "$workflow" item's cone is the whole document (every step can reach the output).
    cone = cone_for(lwir, WORKFLOW_TARGET)
    assert cone is not None
    bodies = [body(ticket, severity) for ticket, severity, _ in TICKETS]
    entries = [
        index_entry(
            item,
            role=role,
            cluster_id=f"ticket-{number}",
            input_cone_hash=cone,
            created_at=WHEN,
            referenced_fields=["$.output"],
        )
        for number, (item, (_, _, role)) in enumerate(zip(bodies, TICKETS, strict=True))
    ]
    bundle = {
        "apiVersion": EVAL_SET_API_VERSION,
        "kind": "EvalSet",
        "manifest": _card(version.hash),
        "index": sort_index(entries),
    }
    return bundle, bodies


def _card(lwir_sha: str) -> dict[str, Any]:
    author = {"providerId": "openai", "modelId": "gpt-4o-mini", "family": "gpt"}
    return {
        "metadata": {
            "name": "support.ticket-severity.basic",
            "description": "Four hand-labelled synthetic tickets, two of each severity.",
            "createdAt": WHEN,
        },
        "workflowName": "support.ticket-severity",
        "workflowLwirSha": lwir_sha,
        "constructs": [
            {
                "target": WORKFLOW_TARGET,
                "passCriterion": "The workflow answers the ticket's severity as labelled.",
                "criteria": [{"id": "severity", "text": "The severity equals the label."}],
                "resampleK": 1,
                "authoredAt": WHEN,
            }
        ],
        "sampling": {
            "strategy": "stratified",
            "strata": [
                {"id": "high", "definition": "label = high", "count": 2},
                {"id": "low", "definition": "label = low", "count": 2},
            ],
        },
        "sealPolicy": {
            "algorithm": "HMAC-SHA256",
            "sealKeyId": seal_key_id(b"example seal key: not a secret"),
            "custody": "dev_local",
            "cutoff": "9223372036854775808",
            "domain": "evalset-seal/v1/support.ticket-severity",
        },
        "desiderata": {
            "difficultyBand": {"targetLow": "0.2", "targetHigh": "0.8", "achieved": "0.5"},
            "coverage": {"target": "1", "achieved": "1", "basis": "both severities"},
            "diversityClusters": {"target": 4, "achieved": 4},
        },
        "generation": {
            "candidatesGenerated": 4,
            "admitted": 4,
            "rejectedByStage": [],
            "authorModel": author,
        },
        "audit": {
            "nAudited": 4,
            "raters": [{"ref": "rater-1", "kind": "human"}],
            "labelErrorEstimate": {"point": "0", "ciLow": "0", "ciHigh": "0.5"},
        },
        "judge": {
            "modelPin": author,
            "rubricSha": sha256_digest("The severity equals the label."),
            "calibrationSetSha": sha256_digest("no calibration set"),
            "tpr": "1",
            "tnr": "1",
        },
        "independence": {
            "evalAuthorFamily": "human",
            "workflowAuthorFamily": "gpt",
            "distinct": True,
        },
        "noiseFloor": {
            "method": "incumbent_rerun",
            "runs": 1,
            "deltaPpP50": "0",
            "deltaPpP95": "0",
            "measuredAt": WHEN,
        },
        "canaryGuid": "canary-ticket-severity-7d3f2a91",
        "lifecycle": {
            "refresh": {
                "policy": "rotate_fraction",
                "numerator": 1,
                "denominator": 4,
                "cadence": "P90D",
            },
            "gateQueryBudget": 20,
        },
        "pii": {"status": "synthetic", "retentionClass": "example"},
    }


def main() -> None:
    bundle, bodies = build()
    for name, value in (("evalset", bundle), ("items", bodies)):
        path = HERE / f"ticket-severity.{name}.json"
        path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(path.relative_to(HERE.parent.parent))


if __name__ == "__main__":
    main()
