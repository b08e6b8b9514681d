"""``little eval run`` without a SET: every eval set of the project it is started in.

Ours (upstream keeps eval sets in its world only and has no project layout for them): a
workflow folder may hold ``evals/NAME.evalset.json`` (a bundle) with ``evals/NAME.items.json``
(its item bodies) beside it; each is run against its folder's workflow, in the order of the
project file's workflows, and the exit code is the worst of theirs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["project_sets", "run_project_sets"]


def project_sets(cwd: Path) -> list[tuple[Path, Path | None, Path]]:
    """``(bundle, items or None, workflow folder)`` of every eval set of the project at or
    above ``cwd``; :class:`~little_dist.errors.InvalidInputError` when there is no project."""
    from little_dist.errors import InvalidInputError
    from little_dist.workspace import MANIFEST, find_manifest, resolve_workflow_reference
    from little_dist.workspace.reference import read_manifest

    manifest = find_manifest(cwd)
    if manifest is None:
        raise InvalidInputError(
            f"no SET given and no {MANIFEST} in {cwd.resolve()} or above it: name an eval set "
            "file (or evset_ id) and --workflow"
        )
    found = []
    for name in read_manifest(manifest).get("workflows", {}):
        folder = resolve_workflow_reference(name, manifest.parent)
        for bundle in sorted((folder / "evals").glob("*.evalset.json")):
            items = bundle.with_name(bundle.name.removesuffix(".evalset.json") + ".items.json")
            found.append((bundle, items if items.is_file() else None, folder))
    return found


def run_project_sets(args: argparse.Namespace, run_one: Callable[[argparse.Namespace], int]) -> int:
    from little_dist.errors import InvalidInputError

    try:
        found = project_sets(Path.cwd())
    except InvalidInputError as exc:
        print(f"little eval run: {exc}", file=sys.stderr)
        return 2
    if not found:
        print(
            "little eval run: this project's workflows have no evals/*.evalset.json",
            file=sys.stderr,
        )
        return 1
    worst = 0
    for bundle, items, folder in found:
        one = argparse.Namespace(**vars(args))
        one.set = str(bundle)
        one.items = args.items if items is None else str(items)
        one.workflow = args.workflow or str(folder)
        worst = max(worst, run_one(one))
    return worst
