"""Deterministic identifiers: run, event, artifact and workflow-version ids, step paths.

Every id here is a pure function of its inputs, as upstream computes it, so two processes (or
upstream and us) that see the same facts mint the same id. The prefixes of the ids the engine
draws or derives (a sub-run's, an outer loop's and its cycles') are named here too: the fleet
tells such runs apart by them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from little_dist.canonical import canonical_json, sha256_digest, sha256_hex_text
from little_dist.errors import InvalidInputError

__all__ = [
    "ARTIFACT_ID_PATTERN",
    "ARTIFACT_REF_PREFIX",
    "CYCLE_RUN_ID_PREFIX",
    "OUTER_LOOP_ID_PREFIX",
    "PLAN_RUN_ID_PREFIX",
    "RUN_ID_PATTERN",
    "RUN_ID_PREFIX",
    "SUB_RUN_ID_PREFIX",
    "InvalidIdError",
    "artifact_id_for",
    "artifact_id_from_ref",
    "artifact_ref",
    "event_id_for",
    "event_id_for_payload_json",
    "json_string",
    "short_id",
    "step_path_for",
    "validate_run_id",
    "workflow_version_id_for",
]

#: Every run id starts so (:func:`validate_run_id`).
RUN_ID_PREFIX: Final = "run_"
#: A sub-run's id (derived from its parent's tool call: :mod:`little_dist.subruns.links`).
SUB_RUN_ID_PREFIX: Final = "run_sub_"
#: An outer loop's cycle run (:mod:`little_dist.outer_loop`): the fleet's scheduler leaves it
#: unarchived when it ends, the loop appends its decision first.
CYCLE_RUN_ID_PREFIX: Final = "run_olc_"
#: An orchestrator's ``plan_workflow`` planning run (:mod:`little_dist.subruns.orchestrator`).
PLAN_RUN_ID_PREFIX: Final = "run_plan_"
#: An outer loop's id (not a run id: :func:`~little_dist.outer_loop.validate_outer_loop_id`).
OUTER_LOOP_ID_PREFIX: Final = "ol_"

RUN_ID_PATTERN = re.compile(r"^run_[A-Za-z0-9_-]{1,80}$")
ARTIFACT_ID_PATTERN = re.compile(r"^art_[A-Za-z0-9_-]{1,80}$")
ARTIFACT_REF_PREFIX = "artifact://"


class InvalidIdError(InvalidInputError):
    """A run id, artifact id or artifact ref that does not have the required form."""


def short_id(prefix: str, digest: str) -> str:
    """``prefix`` + the first 16 hex digits of a ``sha256:<hex>`` digest."""
    return prefix + digest[7:23]


def validate_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is ``run_`` + 1-80 of ``[A-Za-z0-9_-]``; raise otherwise."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.fullmatch(run_id):
        raise InvalidIdError(
            f"Invalid run id: {run_id!r} (expected 'run_' followed by 1-80 of A-Z a-z 0-9 _ -)"
        )
    return run_id


def event_id_for(
    run_id: str,
    sequence: int,
    event_type: str,
    payload: Mapping[str, Any],
    occurrence_id: str | None = None,
) -> str:
    """``evt_`` + 16 hex of the digest of ``{runId, sequence, type, occurrenceId?, payload}``.

    ``recordedAt`` is deliberately not hashed: the same fact recorded twice has one id.
    """
    hashed: dict[str, Any] = {
        "runId": run_id,
        "sequence": sequence,
        "type": event_type,
        "payload": payload,
    }
    if occurrence_id is not None:
        hashed["occurrenceId"] = occurrence_id
    return short_id("evt_", sha256_digest(hashed))


def event_id_for_payload_json(
    run_id: str,
    sequence: int,
    event_type: str,
    payload_json: str,
    occurrence_id: str | None = None,
) -> str:
    """:func:`event_id_for`, given the payload as its canonical JSON text instead of a dict.

    Worlds already hold that text (it is what they store), so the payload is not
    canonicalised a second time: the hashed envelope is assembled around it, its keys in
    canonical order (``occurrenceId``, ``payload``, ``runId``, ``sequence``, ``type``).
    ``payload_json`` must be ``canonical_json`` of the payload; the result then equals
    ``event_id_for(run_id, sequence, event_type, payload, occurrence_id)``.
    """
    head = "{" if occurrence_id is None else f'{{"occurrenceId":{json_string(occurrence_id)},'
    number = str(sequence) if type(sequence) is int and 0 <= sequence < 2**53 else None
    text = (
        f'{head}"payload":{payload_json},"runId":{json_string(run_id)}'
        f',"sequence":{number or canonical_json(sequence)},"type":{json_string(event_type)}}}'
    )
    return short_id("evt_", "sha256:" + sha256_hex_text(text))


_encode_ascii_string = json.JSONEncoder(ensure_ascii=True).encode


def json_string(value: str) -> str:
    """``canonical_json(value)`` for a string, without the general serializer for ASCII text."""
    # ASCII text has no surrogates to join or refuse, and its escapes are canonical's.
    if type(value) is str and value.isascii():
        return _encode_ascii_string(value)
    return canonical_json(value)


def artifact_id_for(
    *,
    run_id: str,
    name: str,
    content_type: str,
    encoding: str,
    payload_hash: str,
    step_path: str | None = None,
) -> str:
    """``art_`` + 16 hex of the digest of the artifact's identity (not its creation time)."""
    hashed: dict[str, Any] = {
        "runId": run_id,
        "name": name,
        "contentType": content_type,
        "encoding": encoding,
        "payloadHash": payload_hash,
    }
    if step_path is not None:
        hashed["stepPath"] = step_path
    return short_id("art_", sha256_digest(hashed))


def artifact_ref(artifact_id: str) -> str:
    return ARTIFACT_REF_PREFIX + artifact_id


def artifact_id_from_ref(ref: object) -> str:
    """The artifact id inside an ``artifact://art_...`` ref; raise for anything else."""
    if isinstance(ref, str) and ref.startswith(ARTIFACT_REF_PREFIX):
        artifact_id = ref[len(ARTIFACT_REF_PREFIX) :]
        if ARTIFACT_ID_PATTERN.fullmatch(artifact_id):
            return artifact_id
    raise InvalidIdError(f"Invalid artifact ref: {ref!r}")


def workflow_version_id_for(digest: str) -> str:
    """``wfver_`` + 16 hex of a ``sha256:`` digest (LWIR version ids and compiled ids alike)."""
    return short_id("wfver_", digest)


def step_path_for(
    step_id: str, parent_path: str = "", visit_index: int = 0, *, max_visits: int | None = None
) -> str:
    """The path of one visit of a step: ``parent.step`` plus ``.visit[n]`` for loop steps.

    The visit suffix appears only when the step may be visited more than once
    (``maxVisits > 1``), so single-visit paths stay short and stable.
    """
    base = step_id if parent_path == "" else f"{parent_path}.{step_id}"
    if (max_visits or 1) > 1:
        return f"{base}.visit[{visit_index}]"
    return base
