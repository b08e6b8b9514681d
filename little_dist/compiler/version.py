"""The compiled WorkflowVersion and ``compile_lwir``: validate, hash, lock.

``compile_lwir`` is the last stage of the pipeline WorkflowDefinitionSnapshot -> LWIR ->
WorkflowVersion: it validates the LWIR, takes its canonical form and hash, binds it to a
:class:`~little_dist.compiler.request.CompileRequest` through the lock hash chain, and
returns an immutable :class:`WorkflowVersion` whose ``id``/``hash`` equal upstream's for the
same LWIR and request. ``WorkflowVersion.from_json`` reads a stored version back and refuses
one whose hashes do not recompute.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from little_dist.canonical import canonical_json, sha256_hex_text
from little_dist.compiler.lock import (
    CANONICALIZER,
    compiled_version_identity,
    compiler_validation_hash,
    lock_seed_from,
    lwir_version_id_for_hash,
)
from little_dist.compiler.request import CompileRequest
from little_dist.errors import InvalidInputError
from little_dist.lwir import Finding, LwirValidationError
from little_dist.lwir._js import js_parse
from little_dist.lwir.validate import validated_clone

__all__ = [
    "LwirInvalidError",
    "WorkflowVersion",
    "WorkflowVersionMismatchError",
    "compile_lwir",
    "register_lwir",
]


class LwirInvalidError(LwirValidationError):
    """``compile_lwir`` was given an LWIR with error findings; ``findings`` lists them all."""


class WorkflowVersionMismatchError(InvalidInputError):
    """A stored WorkflowVersion whose ids, hashes or lock do not recompute from its content."""


@dataclass(frozen=True, eq=False)
class WorkflowVersion:
    """A compiled, content-addressed workflow version (immutable).

    ``id``/``hash`` identify the LWIR *and* its lock; ``lwir_version_id``/``lwir_hash``
    identify the LWIR alone. ``lwir`` is the document in canonical key order and ``lock``
    carries upstream's field names; treat both as read-only (``to_json()`` returns copies).
    Two versions are equal when their hashes are.
    """

    id: str
    hash: str
    lwir_version_id: str
    lwir_hash: str
    canonical_json: str
    lwir: Mapping[str, Any]
    lock: Mapping[str, Any]
    canonicalizer: str = CANONICALIZER

    @property
    def validation_hash(self) -> str:
        """The lock's ``validationHash``: this LWIR passed validation bound to its request."""
        value: str = self.lock["validationHash"]
        return value

    @property
    def input_hash(self) -> str:
        """The lock's ``inputHash``: the digest of the input this version was compiled for."""
        value: str = self.lock["inputHash"]
        return value

    def to_json(self) -> dict[str, Any]:
        """Upstream's JSON shape of a compiled WorkflowVersion (a fresh copy, safe to keep)."""
        return {
            "id": self.id,
            "hash": self.hash,
            "canonicalizer": self.canonicalizer,
            "canonicalJson": self.canonical_json,
            # The LWIR is JSON.parse of its canonical form: parsing that text again is the
            # same fresh copy, ten times faster than a deep copy of a large document.
            "lwir": js_parse(self.canonical_json),
            "lwirVersionId": self.lwir_version_id,
            "lwirHash": self.lwir_hash,
            "lock": copy.deepcopy(dict(self.lock)),
        }

    @classmethod
    def from_json(cls, data: Any, *, validate: bool = True) -> WorkflowVersion:
        """Read a stored compiled WorkflowVersion, checking that every hash recomputes.

        Raises :class:`WorkflowVersionMismatchError` when the document is not a compiled
        version or was altered, and :class:`LwirInvalidError` (with ``validate``) when its
        LWIR no longer validates.
        """
        _require_fields(data)
        if validate:
            canonical, lwir_hash, _, lwir = register_lwir(data["lwir"])
        else:
            canonical = canonical_json(data["lwir"])
            lwir_hash = "sha256:" + sha256_hex_text(canonical)
            lwir = json.loads(canonical)
        return cls._checked(data, canonical, lwir_hash, lwir, copy.deepcopy(dict(data["lock"])))

    @classmethod
    def sharing_lwir(cls, data: Any, *, of: WorkflowVersion) -> WorkflowVersion:
        """:meth:`from_json` of a version whose LWIR is ``of``'s (a checked version joined
        from the same shared part: ``data["lwir"]`` is not read): ``of``'s parsed LWIR,
        canonical JSON and hash are used as they are, not printed, hashed and parsed again,
        and the lock is copied one level deep; both are read-only, so versions sharing them
        is safe. Every id and hash of the lock is still checked."""
        _require_fields({**data, "lwir": of.lwir})
        return cls._checked(data, of.canonical_json, of.lwir_hash, of.lwir, dict(data["lock"]))

    @classmethod
    def _checked(
        cls,
        data: Any,
        canonical: str,
        lwir_hash: str,
        lwir: Mapping[str, Any],
        lock_copy: dict[str, Any],
    ) -> WorkflowVersion:
        """The version ``data`` describes once its ids and hashes recompute from
        ``canonical`` (its LWIR, hashed to ``lwir_hash`` and parsed to ``lwir``)."""
        lock: Mapping[str, Any] = data["lock"]
        try:
            seed = lock_seed_from(lock)
        except KeyError as exc:
            raise WorkflowVersionMismatchError(
                f"WorkflowVersion lock is missing {exc.args[0]!r}."
            ) from None
        version_hash, version_id = compiled_version_identity(
            seed,
            lwir_version_id=lwir_version_id_for_hash(lwir_hash),
            lwir_hash=lwir_hash,
            canonicalizer=data["canonicalizer"],
        )
        expected = {
            "lwirHash": lwir_hash,
            "lwirVersionId": lwir_version_id_for_hash(lwir_hash),
            "hash": version_hash,
            "id": version_id,
        }
        for key, value in expected.items():
            if data[key] != value:
                raise WorkflowVersionMismatchError(
                    f"WorkflowVersion {key} {data[key]!r} does not match its content ({value!r})."
                )
        validation_hash = compiler_validation_hash(
            lwir_version_id=lwir_version_id_for_hash(lwir_hash),
            lwir_hash=lwir_hash,
            request_id=seed["requestId"],
            request_hash=seed["requestHash"],
            input_hash=seed["inputHash"],
            planned_input_structure_hash=seed["plannedInputStructureHash"],
            workflow_definition_hash=seed["workflowDefinitionHash"],
            input_schema_hash=seed["inputSchemaHash"],
            requested_output_hash=seed["requestedOutputHash"],
            capability_manifest_hash=seed["capabilityManifestHash"],
            canonicalizer=data["canonicalizer"],
        )
        for key, value in (
            ("lwirHash", lwir_hash),
            ("lwirVersionId", lwir_version_id_for_hash(lwir_hash)),
            ("validationHash", validation_hash),
            ("workflowVersionHash", version_hash),
            ("workflowVersionId", version_id),
        ):
            if lock.get(key) != value:
                raise WorkflowVersionMismatchError(
                    f"WorkflowVersion lock {key} {lock.get(key)!r} does not match ({value!r})."
                )
        stored = data.get("canonicalJson")
        if stored is not None and stored != canonical:
            raise WorkflowVersionMismatchError(
                "WorkflowVersion canonicalJson does not match its lwir."
            )
        return cls(
            id=version_id,
            hash=version_hash,
            lwir_version_id=lwir_version_id_for_hash(lwir_hash),
            lwir_hash=lwir_hash,
            canonical_json=canonical,
            lwir=lwir,
            lock=lock_copy,
            canonicalizer=data["canonicalizer"],
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkflowVersion):
            return NotImplemented
        return self.hash == other.hash

    def __hash__(self) -> int:
        return hash(self.hash)

    def __repr__(self) -> str:
        return f"WorkflowVersion(id={self.id!r}, lwir_version_id={self.lwir_version_id!r})"


def register_lwir(doc: Any) -> tuple[str, str, str, dict[str, Any]]:
    """``(canonical_json, lwir_hash, lwir_version_id, lwir)`` of a valid LWIR document.

    ``lwir`` is the document as JavaScript's ``JSON.parse`` of its canonical form gives it
    (a fresh copy). Validates first and raises :class:`LwirInvalidError` when there is any
    error finding.
    """
    findings, clone = validated_clone(doc)
    _raise_for_findings(findings)
    canonical = canonical_json(clone)
    lwir_hash = "sha256:" + sha256_hex_text(canonical)
    return canonical, lwir_hash, lwir_version_id_for_hash(lwir_hash), clone


def compile_lwir(
    doc: Any, *, input: Any = None, request: CompileRequest | None = None
) -> WorkflowVersion:
    """Validate ``doc`` and compile it into a locked :class:`WorkflowVersion`.

    Without ``request``, the LWIR is locked with upstream's direct-LWIR recipe for the run
    ``input`` (``None`` is the JSON ``null`` input), so the result's ``id`` equals what
    upstream's ``little run`` prints for the same files. With ``request`` (the planner path)
    the lock binds the request's hashes instead and ``input`` is ignored.
    """
    canonical, lwir_hash, lwir_version_id, lwir = register_lwir(doc)
    if request is None:
        request = CompileRequest.for_direct_lwir(lwir, lwir_hash, input)
    validation_hash = request.validation_hash(lwir_version_id=lwir_version_id, lwir_hash=lwir_hash)
    seed = request.lock_seed(
        lwir_version_id=lwir_version_id, lwir_hash=lwir_hash, validation_hash=validation_hash
    )
    version_hash, version_id = compiled_version_identity(
        seed, lwir_version_id=lwir_version_id, lwir_hash=lwir_hash
    )
    # A private copy: the caller's request objects can change later, the lock cannot.
    lock = json.loads(
        json.dumps({"workflowVersionId": version_id, "workflowVersionHash": version_hash, **seed})
    )
    return WorkflowVersion(
        id=version_id,
        hash=version_hash,
        lwir_version_id=lwir_version_id,
        lwir_hash=lwir_hash,
        canonical_json=canonical,
        lwir=lwir,
        lock=lock,
    )


def _raise_for_findings(findings: Sequence[Finding]) -> None:
    errors = [finding for finding in findings if finding.severity == "error"]
    if errors:
        raise LwirInvalidError(errors)


def _require_fields(data: Any) -> None:
    """Refuse a stored version that is not an object with the fields a version has."""
    if not isinstance(data, Mapping):
        raise WorkflowVersionMismatchError("A WorkflowVersion must be a JSON object.")
    for key, kind in (
        ("id", str),
        ("hash", str),
        ("canonicalizer", str),
        ("lwir", Mapping),
        ("lwirVersionId", str),
        ("lwirHash", str),
        ("lock", Mapping),
    ):
        if not isinstance(data.get(key), kind):
            raise WorkflowVersionMismatchError(
                f"WorkflowVersion field {key!r} is missing or not a {kind.__name__}."
            )
