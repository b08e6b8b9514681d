"""``little add workflow NAME [--dir DIR] [--force]``: add a starter workflow folder to the
project in this folder (upstream's ``little add workflow``), and name it in
``little-workflow.json`` (made when missing). Exit 1 (one line, nothing written) when the
folder or the name is taken, the name is invalid, or ``--dir`` leaves the project."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help="add a workflow to this project", description=__doc__.split("\n\n")[0]
    )
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)
    workflow = kinds.add_parser("workflow", help="a starter workflow folder")
    workflow.add_argument("workflow_name", metavar="NAME", help="its name (folder and manifest)")
    workflow.add_argument(
        "--dir", default="workflows", help="the folder to put it in (default workflows)"
    )
    workflow.add_argument("--force", action="store_true", help="overwrite files that exist")
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.errors import InvalidInputError
    from little_dist.workspace.scaffold import add_workflow

    try:
        add_workflow(".", args.workflow_name, directory=args.dir, force=args.force)
    except InvalidInputError as exc:
        print(f"little add: {exc}", file=sys.stderr)
        return 1
    print(
        f"Added workflow {args.workflow_name}. Run it: "
        f"little run {args.workflow_name} --input input.example.json"
    )
    return 0
