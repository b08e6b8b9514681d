"""``little runs``: the runs a world holds, newest first, one line each.

Columns: run id, workflow, status (``running``, ``completed``, ``failed``, ``cancelled``),
start, duration and cost. ``--status`` and ``--workflow`` (a glob, e.g. ``'support.*'``)
filter, ``--limit`` (default 20, 0 for all) keeps the newest, ``--json`` prints a JSON
array. Works on any world (``--data-dir``/``--world``, default ``$LITTLE_WORLD``): a
LocalWorld lists every run; the fleet's lists the runs in Redis (live, not archived yet)
and the archives in S3 (``archives/RUN_ID.ndjson``; an archived run is read from there).

Cheap on purpose: each run costs its first and last events
(:meth:`~little_dist.world.base.World.first_and_last_events`), which give its workflow,
status, start and end; only the runs shown are read further, for their model calls' usage
(the cost) and, for a run started from a bare LWIR document, its version's name. Runs sort by
their first event's ``recordedAt``.
"""

from __future__ import annotations

import argparse
import fnmatch
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
    from little_dist.events import USAGE_EVENT_TYPES
    from little_dist.fleet.versions import BINDING_FIELD, workflow_name_of_part
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.report.model import calls_usage
    from little_dist.report.runs import RunSummary, summarize_run, workflow_hint
    from little_dist.world.base import VersionNotFoundError

    world = open_world_for_reading(args)
    names: dict[str, str | None] = {}  # version id -> its workflow's name

    def name_of(version_id: str, binding: object) -> str | None:
        if version_id not in names:
            try:
                metadata = world.get_version(version_id).get("lwir", {}).get("metadata", {})
            except VersionNotFoundError:  # a fleet submit stores a shared part and a binding
                metadata = {"name": workflow_name_of_part(world, binding)}
            name = metadata.get("name") if isinstance(metadata, dict) else None
            names[version_id] = name if isinstance(name, str) else version_id
        return names[version_id]

    try:
        found: list[tuple[RunSummary, str | None, object]] = []
        for run_id in world.list_run_ids():
            bounds = world.first_and_last_events(run_id)
            if bounds is None:
                continue
            workflow, version = workflow_hint(bounds[0])
            summary = summarize_run(*bounds, workflow=workflow)
            if args.status is not None and summary.status != args.status:
                continue
            found.append((summary, version, bounds[0].payload.get(BINDING_FIELD)))
        found.sort(key=lambda item: item[0].started_at, reverse=True)
        shown: list[RunSummary] = []
        for summary, version, binding in found:
            if summary.workflow is None and version is not None:
                summary = _with(summary, workflow=name_of(version, binding))
            if args.workflow is not None and not fnmatch.fnmatchcase(
                summary.workflow or "", args.workflow
            ):
                continue
            calls = [
                event
                for event in world.list_events_partly(
                    summary.run_id, after=0, decode=USAGE_EVENT_TYPES
                )
                if event.type in USAGE_EVENT_TYPES
            ]
            # Only an ended run can have a late record (one S3 list call on the fleet).
            late = world.late_events(summary.run_id) if summary.status != "running" else []
            usage = calls_usage([*calls, *late], fallback=litellm_price_fallback)
            shown.append(_with(summary, cost_usd=usage.cost_usd))
            if args.limit and len(shown) >= args.limit:
                break
    finally:
        world.close()
    if args.json:
        print(json.dumps([summary.to_json() for summary in shown], ensure_ascii=False, indent=2))
    else:
        _table(shown)
    return 0


def _with(summary: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(summary, **changes)


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
