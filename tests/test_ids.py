from __future__ import annotations

import re
from typing import Any

import pytest

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.ids import (
    InvalidIdError,
    artifact_id_for,
    artifact_id_from_ref,
    artifact_ref,
    event_id_for,
    event_id_for_payload_json,
    step_path_for,
    validate_run_id,
    workflow_version_id_for,
)
from tests.conftest import load_vectors

IDS = load_vectors("ids")
PATTERNS = {p["name"]: re.compile(p["regex"]) for p in IDS["patterns"]}
EXAMPLES = IDS["examples"]


@pytest.mark.parametrize("case", EXAMPLES["event_ids"]["cases"], ids=lambda c: c["eventId"])
def test_event_ids(case: dict[str, Any]) -> None:
    assert canonical_json(case["hashed_object"]) == case["hashed_canonical"]
    event_id = event_id_for(
        case["runId"], case["sequence"], case["type"], case["payload"], case.get("occurrenceId")
    )
    assert event_id == case["eventId"]
    assert PATTERNS["event_id"].match(event_id)


@pytest.mark.parametrize("case", EXAMPLES["event_ids"]["cases"], ids=lambda c: c["eventId"])
def test_event_ids_from_canonical_payload_text(case: dict[str, Any]) -> None:
    event_id = event_id_for_payload_json(
        case["runId"],
        case["sequence"],
        case["type"],
        canonical_json(case["payload"]),
        case.get("occurrenceId"),
    )
    assert event_id == case["eventId"]


@pytest.mark.parametrize(
    ("event_type", "occurrence_id", "payload"),
    [
        ("StepCompleted", None, {}),
        ("StepCompleted", "occ-1", {"z": [1, 2.5, None], "a": {"y": True, "b": "x"}}),
        ('t\u00e9"quoted"', "occ\n\u2603", {"\U0001f600": 1, "\uffff": 2, "n": 1e21}),
        ("little.bench", "o" * 300, {"big": 2**60, "tiny": 1e-7, "neg": -0.0}),
    ],
    ids=["empty", "nested", "escapes-and-utf16-order", "js-numbers"],
)
def test_event_id_from_payload_text_equals_the_dict_form(
    event_type: str, occurrence_id: str | None, payload: dict[str, Any]
) -> None:
    expected = event_id_for("run_x-1", 42, event_type, payload, occurrence_id)
    text = canonical_json(payload)
    assert event_id_for_payload_json("run_x-1", 42, event_type, text, occurrence_id) == expected


@pytest.mark.parametrize("case", EXAMPLES["artifact_ids"]["cases"], ids=lambda c: c["artifactId"])
def test_artifact_ids(case: dict[str, Any]) -> None:
    given = case["input"]
    artifact_id = artifact_id_for(
        run_id=given["runId"],
        step_path=given.get("stepPath"),
        name=given["name"],
        content_type=given["contentType"],
        encoding=case["encoding"],
        payload_hash=case["payloadHash"],
    )
    assert artifact_id == case["artifactId"]
    assert artifact_ref(artifact_id) == case["artifactRef"]
    assert artifact_id_from_ref(case["artifactRef"]) == artifact_id
    assert PATTERNS["artifact_ref"].match(case["artifactRef"])


@pytest.mark.parametrize(
    "case", EXAMPLES["step_paths"]["cases"], ids=lambda c: f"{c['expected']}-{c['visitIndex']}"
)
def test_step_paths(case: dict[str, Any]) -> None:
    step = case["step"]
    path = step_path_for(
        step["id"], case["branchPath"], case["visitIndex"], max_visits=step.get("maxVisits")
    )
    assert path == case["expected"]


def test_canonical_digest_example() -> None:
    example = EXAMPLES["canonical_digest"]
    assert canonical_json(example["value"]) == example["canonical"]
    assert sha256_digest(example["value"]) == example["digest"]


def test_workflow_version_id_pattern() -> None:
    digest = sha256_digest({"a": 1})
    assert PATTERNS["workflow_version_id"].match(workflow_version_id_for(digest))
    assert workflow_version_id_for(digest) == "wfver_" + digest[7:23]


@pytest.mark.parametrize("bad", ["", "run_", "run_a b", "RUN_x", "run_" + "x" * 81, None, 5])
def test_invalid_run_ids_are_refused_with_the_id_in_the_message(bad: object) -> None:
    with pytest.raises(InvalidIdError, match="Invalid run id"):
        validate_run_id(bad)


@pytest.mark.parametrize("good", ["run_1", "run_a-b_C", "run_" + "x" * 80])
def test_valid_run_ids(good: str) -> None:
    assert validate_run_id(good) == good
    assert PATTERNS["run_id"].match(good)


@pytest.mark.parametrize("bad", ["art_1", "artifact://", "artifact://nope", "s3://art_1", 3])
def test_invalid_artifact_refs(bad: object) -> None:
    with pytest.raises(InvalidIdError, match="Invalid artifact ref"):
        artifact_id_from_ref(bad)
