"""``little schedules create|list|delete``: the fleet's schedules.

``create WORKFLOW (--cron EXPR | --every SECONDS) [--time-zone ZONE] [--catch-up once|skip]
[--input JSON|FILE] [--callback-url URL] [--app MODULE]`` stores a schedule and prints its
id: the schedulers (``little scheduler``) start a run of WORKFLOW (an id the fleet's app
defines) at every tick, once however many run (see :mod:`little_dist.fleet.schedules`). With
an app (``--app`` or ``LITTLE_APP``) the workflow id and the input are checked against it
first. ``list`` shows each schedule's id, when, zone, catch-up policy, next tick and
workflow (``--json``: everything); ``delete ID`` removes one (its runs stay). The schedules
live in the fleet's Redis (``LITTLE_WORLD``, ``--world``).

Exit 0 on success, 1 for a bad cron expression, time zone, interval, URL or input, or a
schedule id that does not exist, 2 usage errors; one line each, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from little_dist.cli.submit_cmd import add_fleet_options, fleet_settings

__all__ = ["register", "run"]


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="make, list and delete schedules (runs started by cron or interval)",
        description="Schedules: the schedulers start a run of a workflow at every tick.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="make a schedule and print its id")
    create.add_argument("workflow", metavar="WORKFLOW", help="a workflow id the app defines")
    when = create.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="five cron fields, or e.g. '@hourly'")
    when.add_argument("--every", type=int, metavar="SECONDS", help="an interval in seconds")
    create.add_argument(
        "--time-zone", default="UTC", metavar="ZONE", help="an IANA time zone (default UTC)"
    )
    create.add_argument(
        "--catch-up",
        default="once",
        choices=("once", "skip"),
        help="ticks missed while the fleet was down: start the newest once, or none",
    )
    create.add_argument(
        "--input", metavar="JSON|FILE", default=None, help="every run's input (default {})"
    )
    create.add_argument("--callback-url", metavar="URL", default=None, help="POST each end here")
    create.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=None,
        help="module defining the workflow, to check it (default $LITTLE_APP)",
    )
    create.add_argument("--json", action="store_true", help="print the schedule as JSON")
    listing = actions.add_parser("list", help="list the schedules")
    listing.add_argument("--json", action="store_true", help="print JSON")
    delete = actions.add_parser("delete", help="delete a schedule (its runs stay)")
    delete.add_argument("schedule_id", metavar="ID")
    for action in (create, listing, delete):
        add_fleet_options(action)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.fleet.schedule_store import ScheduleStore
    from little_dist.http.fleet_access import open_redis

    settings = fleet_settings(args)
    schedule = _made(args, settings) if args.action == "create" else None
    if schedule is None and args.action == "create":
        return 2
    redis = open_redis(settings)
    try:
        store = ScheduleStore(redis, settings.signal_stream)
        if schedule is not None:
            store.create(schedule)
            print(json.dumps(schedule.to_json()) if args.json else schedule.id)
            return 0
        if args.action == "list":
            return _list(store, as_json=args.json)
        if not store.delete(args.schedule_id):
            print(f"little schedules: no schedule {args.schedule_id}", file=sys.stderr)
            return 1
        print(f"deleted {args.schedule_id}")
        return 0
    finally:
        redis.close()


def _made(args: argparse.Namespace, settings: Any) -> Any:
    """The schedule ``create`` makes, checked; ``None`` after a usage error (printed)."""
    from little_dist.cli.submit_cmd import _Usage, read_input
    from little_dist.errors import InvalidInputError
    from little_dist.fleet.app_registry import load_registry
    from little_dist.fleet.schedule_specs import Schedule

    try:
        run_input = read_input(args.input)
    except _Usage as exc:
        print(f"little schedules: {exc}", file=sys.stderr)
        return None
    modules = args.app if args.app else ([settings.app] if settings.app else [])
    if modules:
        registry = load_registry(modules)
        workflow = registry.get(args.workflow)
        if workflow is None:
            known = ", ".join(sorted(registry.workflows)[:20]) or "none"
            raise InvalidInputError(
                f"unknown workflow {args.workflow!r} (the app defines: {known})"
            )
        run_input = workflow.validate_input(run_input, limits=settings.limits)
    return Schedule.made(
        workflow=args.workflow,
        now=time.time(),
        input=run_input,
        cron=args.cron,
        every_seconds=args.every,
        time_zone=args.time_zone,
        catch_up=args.catch_up,
        callback_url=args.callback_url,
    )


def _list(store: Any, *, as_json: bool) -> int:
    from little_dist.fleet.schedule_specs import schedule_view

    views = [schedule_view(stored.schedule, stored.last_tick) for stored in store.list()]
    if as_json:
        print(json.dumps(views, indent=2))
        return 0
    for view in views:
        when = view.get("cron") or f"every {view['everySeconds']}s"
        print(
            f"{view['id']}  {when:<20}  {view['timeZone']:<16}  {view['catchUp']:<4}  "
            f"next {view['nextTick']}  {view['workflow']}"
        )
    return 0
