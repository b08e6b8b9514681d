"""Artifact encoding, manifests and the world clock (little_dist.world.artifacts)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from little_dist.errors import InvalidInputError
from little_dist.ids import InvalidIdError
from little_dist.world.artifacts import (
    build_manifest,
    decode_artifact_payload,
    encode_artifact_payload,
    now_iso,
    payload_sha256,
)
from little_dist.world.base import ArtifactInput, ArtifactManifest
from tests.conftest import load_vectors

CASES = load_vectors("ids")["examples"]["artifact_ids"]["cases"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["artifactId"])
def test_manifest_matches_upstream_vectors(case: dict[str, Any]) -> None:
    given = case["input"]
    data, encoding = encode_artifact_payload(given["payload"])
    assert encoding == case["encoding"]
    assert data == case["payload_bytes"].encode("utf-8")
    assert payload_sha256(data) == case["payloadHash"]
    artifact = ArtifactInput(
        run_id=given["runId"],
        name=given["name"],
        payload=given["payload"],
        content_type=given["contentType"],
        step_path=given.get("stepPath"),
    )
    manifest = build_manifest(artifact, data, encoding, "2026-05-19T18:43:11.452Z")
    assert manifest.artifact_id == case["artifactId"]
    assert manifest.artifact_ref == case["artifactRef"]
    assert manifest.sha256 == case["payloadHash"]
    assert manifest.size_bytes == case["sizeBytes"]
    expected = {
        "artifactId": case["artifactId"],
        "artifactRef": case["artifactRef"],
        "runId": given["runId"],
        "name": given["name"],
        "contentType": given["contentType"],
        "encoding": case["encoding"],
        "sha256": case["payloadHash"],
        "sizeBytes": case["sizeBytes"],
        "createdAt": "2026-05-19T18:43:11.452Z",
    }
    if "stepPath" in given:
        expected["stepPath"] = given["stepPath"]
    assert manifest.to_json() == expected
    assert ArtifactManifest.from_json(manifest.to_json()) == manifest


@pytest.mark.parametrize(
    ("payload", "data", "encoding"),
    [
        (b"\x00\xff", b"\x00\xff", "binary"),
        (bytearray(b"ab"), b"ab", "binary"),
        (memoryview(b"cd"), b"cd", "binary"),
        ("é", "é".encode(), "utf-8"),
        ('{"a":1}', b'{"a":1}', "utf-8"),  # a string that looks like JSON stays a string
        ({"b": 1.0, "a": True}, b'{"a":true,"b":1}', "json"),
        (None, b"null", "json"),
        (0, b"0", "json"),
        (False, b"false", "json"),
    ],
    ids=[
        "bytes",
        "bytearray",
        "memoryview",
        "text",
        "json-looking-text",
        "object",
        "null",
        "zero",
        "false",
    ],
)
def test_encode_and_decode(payload: Any, data: bytes, encoding: str) -> None:
    assert encode_artifact_payload(payload) == (data, encoding)
    decoded = decode_artifact_payload(data, encoding)
    if encoding == "binary":
        assert decoded == bytes(payload)
        assert type(decoded) is bytes
    else:
        assert decoded == payload


def test_encode_refuses_values_without_json_form() -> None:
    for bad in (math.nan, {"x": math.inf}, {1, 2}, object(), "\ud800"):
        with pytest.raises(InvalidInputError):
            encode_artifact_payload(bad)


def test_decode_refuses_unknown_encoding() -> None:
    with pytest.raises(InvalidInputError, match="Unknown artifact encoding 'gzip'"):
        decode_artifact_payload(b"x", "gzip")


def test_build_manifest_checks_its_input() -> None:
    with pytest.raises(InvalidIdError):
        build_manifest(ArtifactInput(run_id="nope", name="n", payload=1), b"1", "json", "t")
    with pytest.raises(InvalidInputError, match="name"):
        build_manifest(ArtifactInput(run_id="run_a", name="", payload=1), b"1", "json", "t")
    with pytest.raises(InvalidInputError, match="contentType"):
        build_manifest(
            ArtifactInput(run_id="run_a", name="n", payload=1, content_type=""), b"1", "json", "t"
        )


def test_step_path_changes_the_artifact_id() -> None:
    base = ArtifactInput(run_id="run_a", name="n", payload=1)
    with_step = ArtifactInput(run_id="run_a", name="n", payload=1, step_path="s")
    first = build_manifest(base, b"1", "json", "t")
    second = build_manifest(with_step, b"1", "json", "t")
    assert first.artifact_id != second.artifact_id
    assert "stepPath" not in first.to_json()
    assert second.to_json()["stepPath"] == "s"


def test_now_iso_prints_like_javascript() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    stamp = now_iso()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", stamp)
    parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert before <= parsed <= datetime.now(UTC)
