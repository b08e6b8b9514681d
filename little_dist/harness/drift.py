"""Capability drift: a resumed session must run with the capabilities it started with.

Every harness session records its capability manifest and ``manifestHash`` in
``harness.session.started`` (see :mod:`.registry`). The manifest is a flat mapping of
*sections* to values, nearly all of them digests: ``allowedToolsHash`` (each offered tool's
name, input schema and description), ``skillsHash`` (each skill's name, description and the
content hash of its files), ``modelSlotId`` and ``modelHash`` (the litellm model and settings
behind the slot), ``bashCapabilitiesHash``, ``stepConfigHash``, ``harnessId``, ... Whatever
another part of the engine adds to the manifest (an MCP server's tool list hash, memory
mounts) is compared the same way, section by section, without a change here.

When a session of a step starts again — a retried attempt on another worker, an in-process
resume — :func:`check_manifest_drift` compares its manifest with the one the step's first
session of the same scope recorded (upstream's ``checkHarnessManifestDrift``: the scope is
the role and the step path; here also whether the session is the default harness a custom
one delegated to, which records its own session). Equal hashes: nothing to do. Different:
:class:`CapabilityDriftError`, causeCode ``capability_drift`` (terminal, never retried), its
message listing upstream's diff lines (``$.allowedToolsHash: "sha256:..." -> "sha256:..."``);
the registry records ``little.harness.capability_drift`` with the changed sections before
the step fails. The model is never called with other tools, models or skills than those its
recorded turns were made with.

Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.event_types.engine import CAPABILITY_DRIFT_EVENT
from little_dist.harness.errors import HarnessError

__all__ = [
    "CAPABILITY_DRIFT",
    "CAPABILITY_DRIFT_EVENT",
    "CapabilityDriftError",
    "changed_sections",
    "check_manifest_drift",
    "manifest_diff",
]

#: Upstream's causeCode of a step whose session's capabilities changed.
CAPABILITY_DRIFT: Final = "capability_drift"


class CapabilityDriftError(HarnessError):
    """A resumed session's capability manifest differs from the recorded one (upstream's
    ``CapabilityDriftError``). ``diff``: upstream's lines; ``changes``: the changed sections
    as ``{section, recorded, current}``."""

    cause_code = CAPABILITY_DRIFT
    retriable = False

    def __init__(
        self,
        message: str,
        *,
        recorded_hash: str,
        current_hash: str,
        diff: list[str],
        changes: list[dict[str, Any]],
    ) -> None:
        super().__init__(message)
        self.recorded_hash = recorded_hash
        self.current_hash = current_hash
        self.diff = diff
        self.changes = changes

    def event_payload(self) -> dict[str, Any]:
        """The payload of :data:`CAPABILITY_DRIFT_EVENT` (without the step fields)."""
        return {
            "recordedManifestHash": self.recorded_hash,
            "manifestHash": self.current_hash,
            "changes": self.changes,
            "diff": self.diff,
        }


def _flatten(value: Any, path: str, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        if not value:
            out[path] = "{}"
        for key in sorted(value):
            _flatten(value[key], f"{path}.{key}", out)
    elif isinstance(value, list | tuple):
        if not value:
            out[path] = "[]"
        for index, item in enumerate(value):
            _flatten(item, f"{path}[{index}]", out)
    else:
        out[path] = "undefined" if value is None else canonical_json(value)


def manifest_diff(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Upstream's ``manifestDiff``: one ``"$.path: old -> new"`` line per leaf that differs
    (``undefined`` for a side that lacks it), sorted by path."""
    left: dict[str, str] = {}
    right: dict[str, str] = {}
    _flatten(dict(recorded), "$", left)
    _flatten(dict(current), "$", right)
    lines = []
    for key in sorted(set(left) | set(right)):
        old, new = left.get(key, "undefined"), right.get(key, "undefined")
        if old != new:
            lines.append(f"{key}: {old} -> {new}")
    return lines


def changed_sections(
    recorded: Mapping[str, Any], current: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The top-level sections that differ: ``{section, recorded, current}`` (a side that lacks
    the section has ``None``), sorted by section."""
    changes = []
    for section in sorted(set(recorded) | set(current)):
        old, new = recorded.get(section), current.get(section)
        if canonical_json(old) != canonical_json(new):
            changes.append({"section": section, "recorded": old, "current": new})
    return changes


def check_manifest_drift(
    recorded: Mapping[str, Any] | None,
    recorded_hash: str | None,
    current: Mapping[str, Any],
    *,
    where: str,
) -> None:
    """Raise :class:`CapabilityDriftError` when ``current`` differs from the ``recorded``
    manifest (``None``: nothing recorded yet, nothing to compare). ``where`` names the
    session in the message (``run R step S``)."""
    if recorded is None:
        return
    current_hash = sha256_digest(dict(current))
    if recorded_hash is None:
        recorded_hash = sha256_digest(dict(recorded))
    if current_hash == recorded_hash:
        return
    diff = manifest_diff(recorded, current)
    changes = changed_sections(recorded, current)
    names = ", ".join(change["section"] for change in changes) or "the manifest"
    lines = "\n".join(f"- {line}" for line in diff)
    raise CapabilityDriftError(
        f"CapabilityDriftError: {where} manifest changed since the session started "
        f"({names}):\n{lines}",
        recorded_hash=recorded_hash,
        current_hash=current_hash,
        diff=diff,
        changes=changes,
    )
