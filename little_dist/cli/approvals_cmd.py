"""``little approvals list|approve|reject``: decide the tool calls that wait for a person.

An ``ask`` permission rule that no approver function answers holds its tool call until a
person decides (:mod:`little_dist.approvals`): on the fleet the step is suspended meanwhile,
in process (``little run``) the run waits. ``list`` shows the pending approvals of the runs
still going (``--json``: every field), oldest first; ``approve ID`` lets the call run,
``reject ID`` fails it as a rule's deny does. Both record who (``--by``, default the OS
user), why (``--reason``) and, as the event's time, when, in the run's log; the first
decision stands. Works on any world (``--world``/``--data-dir``, default
``$LITTLE_WORLD``): on the fleet's, ``list`` walks the active runs only.

Exit 0 on success, 1 for an approval id that names no approval, one decided already or
whose run has ended, 2 usage errors.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from little_dist.cli.common import add_world_options, open_world_for_reading, world_spec

__all__ = ["register", "run"]


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="list, approve and reject tool calls waiting for a person",
        description="Decide the tool calls an 'ask' permission rule holds.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the approvals waiting for a decision")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    approve = actions.add_parser("approve", help="let the held call run")
    reject = actions.add_parser("reject", help="fail the held call as a deny rule would")
    for action in (approve, reject):
        action.add_argument("approval_id", metavar="ID", help="as `little approvals list` shows")
        action.add_argument("--reason", default=None, help="why (recorded in the run's log)")
        action.add_argument(
            "--by", default=None, metavar="WHO", help="who decides (default: the OS user)"
        )
        action.add_argument("--json", action="store_true", help="print the decided approval")
    for action in (listing, approve, reject):
        add_world_options(action)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.approvals import decide_approval, list_approvals

    world = open_world_for_reading(args)
    try:
        if args.action == "list":
            pending = list_approvals(world, run_ids=_active_runs(args))
            if args.json:
                print(json.dumps([a.to_json() for a in pending], ensure_ascii=False, indent=2))
            else:
                _table(pending)
            return 0
        decided = decide_approval(
            world,
            args.approval_id,
            allow=args.action == "approve",
            by=args.by or _os_user(),
            via="cli",
            reason=args.reason,
        )
    finally:
        world.close()
    if args.json:
        print(json.dumps(decided.to_json(), ensure_ascii=False, indent=2))
    else:
        word = "approved" if decided.decision == "allow" else "rejected"
        print(f"approval {decided.approval_id} {word} by {decided.decided_by}")
    return 0


def _active_runs(args: argparse.Namespace) -> list[str] | None:
    """The fleet's active runs when the world is the fleet's (Redis), else ``None``: every
    run of the world."""
    spec = world_spec(args)
    if not spec.startswith(("redis://", "rediss://")):
        return None
    from little_dist.cli.submit_cmd import fleet_settings
    from little_dist.fleet.sweeper import ActiveRuns
    from little_dist.fleet.worker_slots import fleet_redis
    from little_dist.world.fleet_keys import active_runs_key

    settings = fleet_settings(argparse.Namespace(world=spec))
    redis = fleet_redis(settings)
    if redis is None:
        return None
    try:
        return ActiveRuns(redis, active_runs_key(settings.signal_stream)).members()
    finally:
        redis.close()


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        return "unknown"


def _table(pending: list[Any]) -> None:
    if not pending:
        print("no approvals waiting", file=sys.stderr)
        return
    for approval in pending:
        args = json.dumps(approval.args, ensure_ascii=False, sort_keys=True)
        if len(args) > 80:
            args = args[:77] + "..."
        deadline = "" if approval.deadline_at is None else f"  on timeout: {approval.on_timeout}"
        print(
            f"{approval.approval_id}  {approval.step_path}  {approval.tool_name} {args}  "
            f"asked {approval.requested_at}{deadline}"
        )
