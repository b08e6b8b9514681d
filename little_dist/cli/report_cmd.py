"""``little report RUN_ID``: attempts, tokens, dollars and time per step.

The table and the JSON carry our additions: ATTEMPTS/DURATION (``attempts``/``durationMs``
and the attempt ``timeline`` in JSON), the steps in run order, words for upstream's signs,
and why a failed run failed (a ``Cause:`` line; ``failure`` in JSON; a box in the HTML),
and a budgeted run's dollar budget, spent and reserved (a ``Budget:`` line; ``budget`` in
JSON);
``--upstream`` prints upstream's table and JSON byte for byte instead. Model calls that
finished after the run had ended (its late record, see ``World.late_events``) are a row of
their own and in the total, in every form. Prices come from the bundled registry, then
litellm's local cost map for models the registry lacks (``--registry-only`` turns that off,
as upstream prices).

A run that started sub-runs (:mod:`little_dist.subruns`) gets, in our forms, a ``SUB-RUNS``
section after the table (each descendant run with its workflow, status, tokens and dollars,
and the total of the whole tree) and ``subRuns`` / ``totalWithSubRuns`` in the JSON.

``little report OUTER_LOOP_ID`` (an ``ol_...`` id): the outer loop's report instead
(:mod:`little_dist.outer_loop.report`): each cycle's run and supervisor decision with their
tokens and dollars, and the loop's totals; table or ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from little_dist.cli.common import add_world_options, open_world_for_reading, require_run
from little_dist.errors import InvalidInputError


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="cost and usage per step",
        description="Per-step attempts, tokens, dollars and duration for a run.",
    )
    parser.add_argument("run_id", metavar="RUN_ID", help="a run id, or an outer loop's id (ol_...)")
    form = parser.add_mutually_exclusive_group()
    form.add_argument(
        "--table",
        action="store_true",
        help="a text table with attempts and duration per step (the default)",
    )
    form.add_argument("--json", action="store_true", help="the report as JSON")
    form.add_argument(
        "--html",
        metavar="FILE",
        default=None,
        help="write a self-contained HTML page with a timeline of the steps",
    )
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="the table or JSON exactly as upstream's little-workflow prints it "
        "(no attempts, duration or timeline)",
    )
    parser.add_argument(
        "--registry-only",
        action="store_true",
        help="price only from the bundled model registry, as upstream does; by default "
        "litellm's local cost map prices the models the registry lacks",
    )
    add_world_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.fleet.run_report import read_run_report, run_report_json
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.report import render_html, render_table

    if args.upstream and args.html:  # a usage error: exit 2, like argparse's own
        print(
            "little report: --upstream applies to the table and --json, not --html", file=sys.stderr
        )
        return 2
    if args.run_id.startswith("ol_"):
        return _loop_report(args)
    ours = not args.upstream
    world = open_world_for_reading(args)
    try:
        require_run(world, args.run_id)
        parts = read_run_report(
            world,
            args.run_id,
            pricing_fallback=None if args.registry_only else litellm_price_fallback,
            ours=ours,
        )
    finally:
        world.close()
    report, budget, rollup = parts.report, parts.budget, parts.rollup
    if args.json:
        json.dump(run_report_json(parts, ours=ours), sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.html:
        target = Path(args.html)
        try:
            target.write_text(render_html(report, budget, parts.waiting), encoding="utf-8")
        except OSError as exc:
            raise InvalidInputError(f"cannot write {target}: {exc.strerror}") from exc
        print(f"wrote {target}")
    else:
        table = render_table(report, detailed=ours)
        sys.stdout.write(table if table.endswith("\n") else table + "\n")
        if budget is not None:
            sys.stdout.write(
                f"Budget: ${budget['budgetUsd']:.6f} · spent ${budget['spentUsd']:.6f} · "
                f"reserved ${budget['reservedUsd']:.6f}"
                + (f" · sub-runs ${budget['subRunsUsd']:.6f}" if "subRunsUsd" in budget else "")
                + "\n"
            )
        if rollup is not None:
            from little_dist.subruns import render_sub_runs

            sys.stdout.write(render_sub_runs(rollup))
    return 0


def _loop_report(args: argparse.Namespace) -> int:
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.outer_loop.manifest import validate_outer_loop_id
    from little_dist.outer_loop.report import (
        outer_loop_report,
        outer_loop_report_to_json,
        render_outer_loop_report,
    )

    if args.upstream or args.html:
        print(
            "little report: an outer loop's report is a table or --json (no --upstream, no --html)",
            file=sys.stderr,
        )
        return 2
    loop_id = validate_outer_loop_id(args.run_id)
    world = open_world_for_reading(args)
    try:
        report = outer_loop_report(
            world,
            loop_id,
            pricing_fallback=None if args.registry_only else litellm_price_fallback,
        )
    finally:
        world.close()
    if args.json:
        json.dump(outer_loop_report_to_json(report), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_outer_loop_report(report))
    return 0
