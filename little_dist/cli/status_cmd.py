"""``little status RUN_ID``: a fleet run at a glance (``--json`` for machines).

Prints the run's status, workflow version, event count, cost (and its dollar budget, what it
spent and what its calls in flight hold, when it has one), output or, for a failed run,
why it failed (cause code, message, and the step it failed in), and each step's status (a
step that was in flight when the run ended is ``interrupted``: its log took nothing of it
after the end). Exit 0 for a run that completed or has not ended, 1 for a failed (or
cancelled) run, as ``little run``, and for a run that does not exist.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from little_dist.cli.common import outcome_word
from little_dist.cli.submit_cmd import add_fleet_options, fleet_client
from little_dist.run_state import RUN_ENDED

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
    from little_dist.fleet.run_waits import waiting_line

    with fleet_client(args) as client:
        view = client.status(args.run_id)
    out = sys.stdout
    code = 1 if view.status == "failed" else 0
    if args.json:
        out.write(json.dumps(view.to_json(), ensure_ascii=False, indent=2) + "\n")
        return code
    status = outcome_word(view.status, view.error)
    if view.planning:
        status += " (planning)"
    elif view.cancel_requested and view.status not in RUN_ENDED:
        status += " (cancel requested)"
    elif view.waiting:
        status += " (waiting for approval)"
    out.write(f"run       {view.run_id}\n")
    out.write(f"status    {status}\n")
    out.write(f"version   {view.workflow_version_id or '-'}\n")
    out.write(f"events    {view.event_count}\n")
    cost = "-" if view.cost_usd is None else f"${view.cost_usd:.6f}"
    out.write(f"cost      {cost}\n")
    if view.budget_usd is not None:
        out.write(
            f"budget    ${view.budget_usd:.6f} (spent ${view.spent_usd:.6f}, "
            f"reserved ${view.reserved_usd:.6f}"
            + (f", sub-runs ${view.sub_runs_usd:.6f}" if view.sub_runs_usd else "")
            + ")\n"
        )
    if view.deadline is not None:
        out.write(f"deadline  {view.deadline} ({view.deadline_cause})\n")
    if view.failure is not None:
        out.write(f"error     {view.failure.cause or '-'}: {view.failure.message}\n")
        if view.failure.step is not None:
            out.write(f"in step   {view.failure.step}\n")
    elif view.error is not None:
        out.write(f"error     {view.error}\n")
    elif view.has_output:
        out.write(f"output    {json.dumps(view.output, ensure_ascii=False)}\n")
    if view.late_calls:
        out.write(
            f"late      {view.late_calls} model call(s) finished after the end; in the cost\n"
        )
    for wait in view.waiting:
        out.write(f"waiting   {waiting_line(wait)}\n")
        answer = wait["answer"]
        out.write(f"  answer  {answer['approve']}\n          {answer['reject']}\n")
    for path, step_status in view.steps.items():
        out.write(f"  {step_status:<10} {path}\n")
    return code
