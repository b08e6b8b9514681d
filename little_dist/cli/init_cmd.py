"""``little init [NAME] [--here] [--workflow NAME] [--force]``: make a project whose starter
workflow runs at once, offline (upstream's ``little init``).

Writes ``little-workflow.json``, ``workflows/WORKFLOW/`` (``workflow.py``, ``instructions.md``,
``tools/echo.py``, ``evals/``: a starter eval set, ours), ``input.example.json`` and
``.gitignore`` (see :mod:`little_dist.workspace.scaffold`), then says what to type next.
Exit 1 (one line, nothing written) when the folder is taken or a name is invalid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    from little_dist.workspace.scaffold import DEFAULT_PROJECT, DEFAULT_WORKFLOW

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help="make a project with a starter workflow",
        description=(
            "Make a little-workflow project: little-workflow.json and a starter workflow that "
            "runs offline at once (a scripted model), and on a real model with LITTLE_MODEL."
        ),
    )
    parser.add_argument(
        "name", nargs="?", default=None, help=f"the project's folder (default {DEFAULT_PROJECT})"
    )
    parser.add_argument("--here", action="store_true", help="make it in this folder")
    parser.add_argument(
        "--workflow",
        default=DEFAULT_WORKFLOW,
        metavar="NAME",
        help=f"the starter workflow's name (default {DEFAULT_WORKFLOW})",
    )
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.errors import InvalidInputError
    from little_dist.workspace.scaffold import DEFAULT_PROJECT, init_project

    if args.here and args.name is not None:
        print("little init: give a NAME or --here, not both", file=sys.stderr)
        return 2
    root = Path(".") if args.here else Path(args.name or DEFAULT_PROJECT)
    try:
        init_project(root, workflow_name=args.workflow, here=args.here, force=args.force)
    except InvalidInputError as exc:
        print(f"little init: {exc}", file=sys.stderr)
        return 1
    steps = [] if args.here else [f"cd {root}"]
    steps += [
        f"little run {args.workflow} --input input.example.json",
        f"little test {args.workflow} --input input.example.json",
        "little eval run",
    ]
    where = "this folder" if args.here else str(root)
    print(f"Made a project in {where}. Next:\n" + "".join(f"  {s}\n" for s in steps), end="")
    return 0
