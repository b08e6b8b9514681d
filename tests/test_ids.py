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
