"""Make a project (``little init``) and add a workflow folder to one (``little add workflow``),
as upstream's ``workflow-scaffold`` does: nothing that exists is overwritten without
``force``, and every path stays inside the project. ``init`` also writes a starter eval set
for its workflow (ours: :mod:`.starter_evals`)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from little_dist.errors import InvalidInputError
from little_dist.workspace.reference import MANIFEST, read_manifest
from little_dist.workspace.templates import INPUT_EXAMPLE, files_for_workflow, gitignore

__all__ = ["DEFAULT_PROJECT", "DEFAULT_WORKFLOW", "add_workflow", "init_project"]

#: The folder ``little init`` makes without a name, and its first workflow.
DEFAULT_PROJECT = "little-workflow-project"
DEFAULT_WORKFLOW = "candidate-review"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def init_project(
    root: str | os.PathLike[str],
    *,
    workflow_name: str = DEFAULT_WORKFLOW,
    here: bool = False,
    force: bool = False,
) -> list[Path]:
    """A project in ``root`` with one starter workflow; the files written. Without ``here``,
    ``root`` must not exist yet or be empty; the project's own files that exist already
    (``.gitignore``, ``input.example.json``) are kept unless ``force``."""
    project = Path(root)
    _check_name(workflow_name)
    occupied = project.exists() and (not project.is_dir() or any(project.iterdir()))
    if occupied and not here and not force:
        raise InvalidInputError(
            f"{project} already exists and is not empty: choose another name, use --here "
            "inside it, or --force"
        )
    _check_workflow(project, workflow_name, "workflows", force)
    project.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, text in (
        (".gitignore", gitignore()),
        ("input.example.json", json.dumps(INPUT_EXAMPLE, indent=2) + "\n"),
    ):
        path = project / name
        if force or not path.exists():
            path.write_text(text, encoding="utf-8")
            written.append(path)
    made = _write_workflow(project, workflow_name, "workflows")
    from little_dist.workspace.starter_evals import starter_eval_files

    folder = project.resolve() / "workflows" / workflow_name
    for relative, text in starter_eval_files(workflow_name).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        made.append(path)
    return [*made, *written]


def add_workflow(
    root: str | os.PathLike[str],
    name: str,
    *,
    directory: str = "workflows",
    force: bool = False,
) -> list[Path]:
    """A new workflow folder ``directory/name`` in the project at ``root``, named in its
    ``little-workflow.json`` (made when missing); the files written."""
    project = Path(root)
    _check_name(name)
    _check_workflow(project, name, directory, force)
    return _write_workflow(project, name, directory)


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidInputError(
            f"workflow name {name!r}: lowercase letters, digits and '-', starting with a letter "
            "or digit (at most 63)"
        )


def _check_workflow(project: Path, name: str, directory: str, force: bool) -> None:
    """Check that the workflow can be written (nothing is written yet): its folder inside the
    project, not there already, and its name free in the manifest (or all of it ``force``)."""
    if os.path.isabs(directory):
        raise InvalidInputError(f"--dir {directory!r}: must be a path inside the project")
    root = project.resolve()
    folder = (root / directory / name).resolve()
    if root not in folder.parents:
        raise InvalidInputError(f"--dir {directory!r}: {folder} escapes the project {root}")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())) and not force:
        raise InvalidInputError(f"{folder} already exists (--force to overwrite its files)")
    manifest_path = root / MANIFEST
    if manifest_path.is_file():
        registered = read_manifest(manifest_path).get("workflows", {}).get(name)
        wanted = _relative(folder, root)
        if registered is not None and registered != wanted and not force:
            raise InvalidInputError(
                f"workflow {name!r} is already registered in {manifest_path} at {registered!r} "
                "(--force to point it here)"
            )


def _write_workflow(project: Path, name: str, directory: str) -> list[Path]:
    root = project.resolve()
    folder = root / directory / name
    made: list[Path] = []
    for relative, text in files_for_workflow(name).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        made.append(path)
    manifest_path = root / MANIFEST
    manifest = read_manifest(manifest_path) if manifest_path.is_file() else {}
    workflows = dict(manifest.get("workflows", {}))
    workflows[name] = _relative(folder, root)
    manifest["workflows"] = workflows
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return [*made, manifest_path]


def _relative(folder: Path, root: Path) -> str:
    return "./" + folder.relative_to(root).as_posix()
