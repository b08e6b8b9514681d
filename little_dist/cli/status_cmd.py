"""``little status RUN_ID``: a fleet run at a glance (``--json`` for machines).

Prints the run's status, workflow version, event count, cost, output or error, and each
step's status. Exit 0 when the run exists (whatever its status), 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from little_dist.cli.submit_cmd import add_fleet_options, fleet_client

__all__ = ["register", "run"]


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help="show a fleet run's status", description="Show a run's status and steps."
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    add_fleet_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    with fleet_client(args) as client:
        view = client.status(args.run_id)
    out = sys.stdout
    if args.json:
        out.write(json.dumps(view.to_json(), ensure_ascii=False, indent=2) + "\n")
        return 0
    status = view.status
    if view.planning:
        status += " (planning)"
    elif view.cancel_requested and view.status not in ("completed", "failed"):
        status += " (cancel requested)"
    out.write(f"run       {view.run_id}\n")
    out.write(f"status    {status}\n")
    out.write(f"version   {view.workflow_version_id or '-'}\n")
    out.write(f"events    {view.event_count}\n")
    cost = "-" if view.cost_usd is None else f"${view.cost_usd:.6f}"
    out.write(f"cost      {cost}\n")
    if view.error is not None:
        error = view.error if isinstance(view.error, dict) else {"message": str(view.error)}
        cause = error.get("causeCode") or "-"
        out.write(f"error     {cause}: {error.get('message', '')}\n")
    elif view.has_output:
        out.write(f"output    {json.dumps(view.output, ensure_ascii=False)}\n")
    for path, step_status in view.steps.items():
        out.write(f"  {step_status:<10} {path}\n")
    return 0
