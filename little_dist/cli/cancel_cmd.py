"""``little cancel RUN_ID``: ask a fleet run to stop.

Records ``little.run.cancel_requested``; the run then fails with causeCode ``cancelled``
(nothing new starts; a step already running is told to stop: its model call in flight is
abandoned, its sandboxed command killed, and whatever it records after the run's end is
refused, its model usage kept in the run's late record). ``--wait`` follows the run until
it has ended and prints ``run RUN_ID cancelled`` (or how it ended, if it ended first).
Exit 0 when the cancel was recorded, 1 when the run had already ended or does not exist.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from little_dist.cli.common import outcome_word
from little_dist.cli.submit_cmd import add_fleet_options, fleet_client

__all__ = ["register", "run"]


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="cancel a fleet run", description="Ask a run to stop."
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--reason", default=None, help="recorded with the cancel request")
    parser.add_argument("--wait", action="store_true", help="wait until the run has ended")
    parser.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="with --wait (default 60)"
    )
    add_fleet_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    with fleet_client(args) as client:
        if not client.cancel(args.run_id, reason=args.reason):
            view = client.status(args.run_id)
            status = outcome_word(view.status, view.error)
            print(f"little cancel: run {args.run_id} already ended ({status})", file=sys.stderr)
            return 1
        if args.wait:
            state = client.wait(args.run_id, timeout=args.timeout)
            # A run that ends because of this cancel says so; one that failed or completed
            # on its own before the cancel took effect says that.
            print(f"run {args.run_id} {outcome_word(state.status, state.error)}")
        else:
            print(f"cancel requested for run {args.run_id}")
    return 0
