"""``little events RUN_ID``: print (and follow) a run's event log.

``--type GLOB`` keeps the events whose type matches; when none does, stderr says so and
names the types the log holds (a glob is case-sensitive: ``step*`` matches nothing), and
the exit status is still 0. ``--caller model|code`` keeps the events of tool calls (and their
permission decisions) that a model made, or code (a ``tool.call`` step, a ``code.run``
program), as upstream's ``caller`` field says.

Sub-runs (:mod:`little_dist.subruns`): a child's ``RunStarted`` line names its parent run
(``parent=run_...``), a parent's ``little.subrun.*`` lines name the child (``child=run_...``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from typing import Any

from little_dist.cli.common import add_world_options, open_world_for_reading, require_run
from little_dist.events import RUN_END_EVENT_TYPES

TERMINAL_TYPES = RUN_END_EVENT_TYPES


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="print a run's events", description="Print a run's events in order."
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument(
        "--type",
        dest="type_pattern",
        metavar="PATTERN",
        default=None,
        help="only events whose type matches this glob (e.g. 'Step*', 'harness.model.*')",
    )
    parser.add_argument(
        "--caller",
        choices=("model", "code"),
        default=None,
        help="only tool-call events (and permission decisions) made by a model, or by code",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep printing new events until the run completes or fails",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --follow: stop after this long without a new event",
    )
    parser.add_argument("--json", action="store_true", help="newline-delimited JSON")
    add_world_options(parser)
    return parser


def _line(event: Any) -> str:
    payload = event.payload
    where = payload.get("stepPath") or payload.get("branchPath") or ""
    head = f"{event.sequence:>6}  {event.recorded_at}  {event.type:<32}"
    links = [
        f"  {label}={linked}"
        for key, label in (("parentRunId", "parent"), ("childRunId", "child"))
        if isinstance(linked := payload.get(key), str)
        and (key == "childRunId" or event.type == "RunStarted")
    ]
    if not links:
        return f"{head} {where}".rstrip()
    # Without a step, the links start in the step's column rather than against the type.
    return f"{head} {where}{''.join(links)}" if where else f"{head} {''.join(links).lstrip()}"


def run(args: argparse.Namespace) -> int:
    world = open_world_for_reading(args)
    try:
        require_run(world, args.run_id)
        pattern = args.type_pattern
        caller = args.caller
        if args.follow:
            events = world.follow(args.run_id, timeout=args.timeout)
        else:
            events = iter(world.list_events(args.run_id))
        out = sys.stdout
        matched = 0
        seen: dict[str, None] = {}  # the log's types, in order, for the "no match" line
        for event in events:
            seen[event.type] = None
            if (pattern is None or fnmatch.fnmatchcase(event.type, pattern)) and (
                caller is None or event.payload.get("caller") == caller
            ):
                matched += 1
                if args.json:
                    out.write(json.dumps(event.to_json(), ensure_ascii=False) + "\n")
                else:
                    out.write(_line(event) + "\n")
                out.flush()
            if args.follow and event.type in TERMINAL_TYPES:
                break
    finally:
        world.close()
    if pattern is not None and not matched:
        print(
            f"little events: no event of run {args.run_id} has a type matching {pattern!r} "
            f"(its types: {', '.join(seen)})",
            file=sys.stderr,
        )
    return 0
