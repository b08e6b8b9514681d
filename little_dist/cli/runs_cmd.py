"""``little runs``: the runs a world holds, newest first, one line each.

Columns: run id, workflow, status (``running``, ``completed``, ``failed``, ``cancelled``),
start, duration and cost. ``--status`` and ``--workflow`` (a glob, e.g. ``'support.*'``)
filter, ``--limit`` (default 20, 0 for all) keeps the newest, ``--json`` prints a JSON
array. Works on any world (``--data-dir``/``--world``, default ``$LITTLE_WORLD``): a
LocalWorld lists every run; the fleet's lists the runs in Redis (live, not archived yet)
and the archives in S3 (``archives/RUN_ID.ndjson``; an archived run is read from there).

Cheap on purpose (:func:`~little_dist.fleet.run_listing.list_runs`, which ``GET /v1/runs``
shares): each run costs its first and last events, and only the runs shown are read
further, for their cost. Runs sort by their first event's ``recordedAt``, then run id.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from little_dist.cli.common import add_world_options, open_world_for_reading

__all__ = ["register", "run"]

DEFAULT_LIMIT = 20


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    from little_dist.report.runs import STATUSES

    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="list runs, newest first",
        description="List the runs of a world, newest first: id, workflow, status, start, "
        "duration and cost.",
    )
    parser.add_argument("--status", choices=STATUSES, default=None, help="only runs with it")
    parser.add_argument(
        "--workflow",
        metavar="GLOB",
        default=None,
        help="only runs of workflows whose id matches (e.g. 'support.*')",
    )
    parser.add_argument(
        "--limit",
        type=_count,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"at most N runs, the newest (default {DEFAULT_LIMIT}; 0: all)",
    )
    parser.add_argument("--json", action="store_true", help="a JSON array of runs")
    add_world_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.fleet.run_listing import list_runs
    from little_dist.litellm_prices import litellm_price_fallback

    world = open_world_for_reading(args)
    try:
        shown = list_runs(
            world,
            status=args.status,
            workflow=args.workflow,
            limit=args.limit,
            pricing_fallback=litellm_price_fallback,
        )
    finally:
        world.close()
    if args.json:
        print(json.dumps([summary.to_json() for summary in shown], ensure_ascii=False, indent=2))
    else:
        _table(shown)
    return 0


def _table(rows: list[Any]) -> None:
    from little_dist.pricing import format_cost
    from little_dist.report.table import format_duration

    if not rows:
        print("no runs", file=sys.stderr)
        return
    header = ("RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "COST (USD)")
    body = [
        (
            row.run_id,
            row.workflow or "-",
            row.status,
            row.started_at,
            format_duration(row.duration_ms),
            format_cost(row.cost_usd),
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    for line in [header, *body]:
        # Text left-aligned, the duration and the cost right-aligned.
        cells = [
            cell.rjust(w) if i >= 4 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {text!r}")
    return value
