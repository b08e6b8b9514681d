"""What a workflow reference names: a folder, or a name in the nearest ``little-workflow.json``
(upstream's ``resolveWorkflowReference``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from little_dist.errors import InvalidInputError

__all__ = ["MANIFEST", "find_manifest", "read_manifest", "resolve_workflow_reference"]

#: The project file: which workflows the project has, and where.
MANIFEST = "little-workflow.json"
_MAX_MANIFEST_BYTES = 1 << 20


def find_manifest(start: str | os.PathLike[str]) -> Path | None:
    """The nearest ``little-workflow.json`` in ``start`` or a folder above it."""
    folder = Path(start).resolve()
    for candidate in (folder, *folder.parents):
        found = candidate / MANIFEST
        if found.is_file():
            return found
    return None


def read_manifest(path: Path) -> dict[str, Any]:
    """The project file's JSON object, its ``workflows`` checked: names to relative paths."""
    try:
        with path.open("rb") as handle:
            data = handle.read(_MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > _MAX_MANIFEST_BYTES:
        raise InvalidInputError(f"{path}: larger than {_MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidInputError(f"{path}: not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise InvalidInputError(f"{path}: must be a JSON object")
    workflows = manifest.get("workflows", {})
    if not isinstance(workflows, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in workflows.items()
    ):
        raise InvalidInputError(f"{path}: workflows must be an object of names to folder paths")
    return manifest


def _folder_or_only_workflow(folder: Path) -> Path:
    """``folder``; a project folder (a manifest, no ``workflow.py``) stands for its only
    workflow."""
    manifest = folder / MANIFEST
    if (folder / "workflow.py").is_file() or not manifest.is_file():
        return folder
    names = sorted(read_manifest(manifest).get("workflows", {}))
    if len(names) != 1:
        listed = ", ".join(names) or "none"
        raise InvalidInputError(
            f"{folder} is a project with {len(names)} workflows ({listed}): name one"
        )
    return resolve_workflow_reference(names[0], folder)


def resolve_workflow_reference(reference: str, cwd: str | os.PathLike[str] = ".") -> Path:
    """The workflow folder ``reference`` names: a folder (relative to ``cwd``; a project's
    folder for its only workflow), else a name in the nearest ``little-workflow.json`` at or
    above ``cwd``, whose path must be relative and stay inside the project."""
    base = Path(cwd).resolve()
    direct = base / reference
    if direct.is_dir():
        return _folder_or_only_workflow(direct.resolve())
    manifest_path = find_manifest(base)
    if manifest_path is None:
        raise InvalidInputError(
            f"no folder {reference!r} here, and no {MANIFEST} found in {base} or above it "
            "to name it"
        )
    target: str | None = read_manifest(manifest_path).get("workflows", {}).get(reference)
    if target is None:
        raise InvalidInputError(f"unknown workflow {reference!r} in {manifest_path}")
    if os.path.isabs(target):
        raise InvalidInputError(
            f"workflow {reference!r} in {manifest_path}: {target!r} must be a relative path"
        )
    root = manifest_path.parent
    folder = (root / target).resolve()
    if folder != root and root not in folder.parents:
        raise InvalidInputError(
            f"workflow {reference!r} in {manifest_path}: {target!r} escapes the project folder"
        )
    if not folder.is_dir():
        raise InvalidInputError(
            f"workflow {reference!r} in {manifest_path}: {target!r} is not a folder"
        )
    return folder
