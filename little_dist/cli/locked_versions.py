"""Compiled WorkflowVersion documents on the command line, as upstream's ``cli-core.ts`` reads
them: one is run as it is, not compiled again (``isLockedWorkflowVersion``), and a version
locked with ``inputBinding: "required"`` runs only on the input whose digest its lock holds
(``assertLockedWorkflowVersionInputMatches``). ``little run`` and ``little submit`` use both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["input_binding_problem", "is_locked_version"]

_TEXT_FIELDS = ("id", "hash", "canonicalizer", "canonicalJson", "lwirVersionId", "lwirHash")


def is_locked_version(document: Any) -> bool:
    """Whether ``document`` is a compiled WorkflowVersion's JSON (ids, hashes, canonical form,
    LWIR and lock), upstream's ``isLockedWorkflowVersion``."""
    return (
        isinstance(document, Mapping)
        and all(isinstance(document.get(key), str) for key in _TEXT_FIELDS)
        and isinstance(document.get("lwir"), Mapping)
        and isinstance(document.get("lock"), Mapping)
    )


def input_binding_problem(lock: Mapping[str, Any], run_input: Any) -> list[str] | None:
    """``None`` when ``lock`` lets the version run on ``run_input``, else upstream's message
    and the lines that explain it."""
    if lock.get("inputBinding") != "required":
        return None
    from little_dist.canonical import sha256_digest

    locked = lock.get("inputHash")
    if not isinstance(locked, str):
        return ["WorkflowVersion lock is missing inputHash."]
    given = sha256_digest(run_input)
    if locked == given:
        return None
    return [
        "WorkflowVersion inputHash does not match --input.",
        f"lock.inputHash {locked}",
        f"--input digest {given}",
        'the version was compiled for another input (its lock has inputBinding "required")',
    ]
