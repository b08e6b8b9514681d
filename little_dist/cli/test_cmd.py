"""``little test WORKFLOW --input FILE|JSON [--expected FILE] [--timeout DURATION]``: run a
workflow in this process and check what it gave (upstream's ``little test``; ``--timeout``
is upstream's run timeout, as ``little run --run-timeout``).

``WORKFLOW`` is what ``little run`` takes (a workflow folder, its name in
``little-workflow.json``, an LWIR file or ``module:attribute``). The run must complete
(the engine checks the output against the workflow's output schema before it records the
run's end) and, when there is an expected output, give exactly it: ``--expected FILE``, else
``NAME.expected.json`` beside an input file ``NAME.json`` (``input.example.json`` ->
``input.example.expected.json``).

Prints one JSON line: ``{"workflow", "workflowVersionId", "runId", "status", "output",
"expected"}`` (``expected``: ``"ok"``, ``"none"`` or which file it differs from; ``error``
instead of ``output`` for a failed run). Exit 0 when the run completed and gave what was
expected, 1 otherwise, 2 on usage errors (as ``little run``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["register", "run"]


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    from little_dist.cli.common import add_world_options

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help="run a workflow and check its output",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "workflow", metavar="WORKFLOW", help="workflow folder or name, LWIR file, module:attr"
    )
    parser.add_argument("--input", metavar="FILE|JSON", required=True, help="the run input")
    parser.add_argument(
        "--expected", metavar="FILE", default=None, help="the output the run must give"
    )
    parser.add_argument(
        "--timeout",
        dest="run_timeout",
        metavar="DURATION",
        default=None,
        help="upstream's run timeout ('10m', '2h', or milliseconds): past it the run fails "
        "with causeCode timeout, and so does the test",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    add_world_options(parser)
    parser.set_defaults(
        run_id=None,
        app=[],
        json=False,
        max_workers=8,
        budget_usd=None,
        lease_ttl=None,
        max_branches=None,
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.cli.json_input import read_json
    from little_dist.cli.run_cmd import run_to_state

    expected_path = _expected_path(args)
    expected: Any = None
    if expected_path is not None:
        try:
            expected = read_json(str(expected_path), str(expected_path), 64, max_bytes=1 << 24)
        except Exception as exc:  # (read_json says what is wrong with the file)
            print(f"little test: {exc}", file=sys.stderr)
            return 2
    code, state = run_to_state(args)
    if state is None:
        return code
    summary: dict[str, Any] = {
        "workflow": args.workflow,
        "workflowVersionId": state.workflow_version_id,
        "runId": state.run_id,
        "status": state.status,
    }
    if state.status != "completed":
        summary["error"] = state.error
        _print(summary)
        return 1
    summary["output"] = state.output
    if expected_path is None:
        summary["expected"] = "none"
    elif expected == state.output:
        summary["expected"] = "ok"
    else:
        summary["expected"] = f"differs from {expected_path}"
    _print(summary)
    return 0 if summary["expected"] in ("ok", "none") else 1


def _expected_path(args: argparse.Namespace) -> Path | None:
    if args.expected is not None:
        return Path(args.expected)
    given = Path(args.input)
    if given.suffix == ".json" and given.is_file():
        beside = given.with_name(f"{given.stem}.expected.json")
        if beside.is_file():
            return beside
    return None


def _print(summary: dict[str, Any]) -> None:
    print(json.dumps(summary, ensure_ascii=False, default=str))
