"""``little replay RUN_ID [--json|--upstream]``: what is complete and what must run again
(``--upstream``: the folded state as upstream's ``little replay`` prints it, byte for byte)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from little_dist.cli.common import add_world_options, open_world_for_reading, require_run


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="show what a resume would skip and what it would run again",
        description="Fold a run's log and list completed steps (with their recorded outputs) "
        "and the steps that must run again.",
    )
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("--json", action="store_true", help="print the replay plan as JSON")
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="print upstream's output byte for byte: JSON.stringify of the run's folded state, "
        "one line",
    )
    add_world_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    from little_dist.replay import replay_run_from_world

    world = open_world_for_reading(args)
    try:
        require_run(world, args.run_id)
        plan = replay_run_from_world(world, args.run_id)
    finally:
        world.close()
    if args.upstream:
        from little_dist.canonical import js_stringify

        # upstream's `little replay`: writeJsonLine(replay.state)
        sys.stdout.write(js_stringify(plan.state.to_json()) + "\n")
        return 0
    if args.json:
        json.dump(plan.to_json(), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
        return 0
    state = plan.state
    print(f"run {plan.run_id}: {state.status} ({len(plan.events)} events)")
    for step in plan.steps:
        action = "run again" if step.should_run else "reuse"
        output = ""
        if step.has_output:
            text = json.dumps(step.output, ensure_ascii=False)
            output = "  output=" + (text if len(text) <= 60 else text[:57] + "...")
        print(f"  {step.status:<10} {action:<10} {step.step_path}{output}")
    print(f"{len(plan.completed_step_paths)} complete, {len(plan.pending_step_paths)} to run")
    return 0
