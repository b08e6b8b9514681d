"""``little outer-loop WORKFLOW --input JSON --max-cycles N``: plan and run a workflow in
cycles until its supervisor says ``done`` (upstream's ``runOuterLoop``, see
:mod:`little_dist.outer_loop`).

``WORKFLOW`` is ``module:attribute`` naming a workflow made with ``define_workflow`` (each
cycle is planned, so it has a planner model), or the id of one defined in an ``--app``
module. The supervisor is a model: ``--supervisor-model`` (default: the workflow's planner
model). The loop's id is printed on stderr first (``outer loop ol_...``); ``--outer-loop-id``
resumes that loop after a crash or a kill (a finished cycle is not run again, a recorded
decision is not asked again) or reads back a finished one. ``little report ol_...`` prices
its cycles and supervisor calls.

In this process by default, on the world ``--world`` / ``--data-dir`` name (as ``little run``).
With ``--fleet``, each cycle is a fleet run (planned by a planner worker, run by the workers
whose ``--app`` defines the workflow) on the fleet ``--world`` / ``LITTLE_WORLD`` names; this
process only asks the supervisor and keeps the loop's manifest.

The loop's final output is printed as JSON on stdout (``--json``: a summary with the loop id,
status, cycles and priced totals). Exit codes: 0 the supervisor said ``done``; 1 the loop
failed (``outer_loop_exhausted`` after ``--max-cycles`` cycles without ``done``, a failed cycle,
a loop resumed with another ``--max-cycles`` or workflow) or its input is invalid; 2 usage
errors (a module or attribute that cannot be imported, input that is not JSON, a bad id).
Nothing is written before the workflow and the input are known to be usable.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from little_dist.cli.run_problems import UsageProblem, one_line

__all__ = ["register", "run"]

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    from little_dist.cli.common import add_world_options
    from little_dist.cli.run_cmd import _positive_float, _positive_int

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help="plan and run a workflow in cycles under a supervisor",
        description=(
            "Plan and run a workflow (module:attribute, or an --app workflow id) in cycles "
            "until its supervisor model says done. Prints the final output as JSON. Exit 0 "
            "when done, 1 when the loop failed, 2 on usage errors."
        ),
    )
    parser.add_argument("workflow", metavar="WORKFLOW", help="module:attribute or workflow id")
    parser.add_argument(
        "--input",
        metavar="FILE|JSON",
        default=None,
        help="each cycle's input: a JSON file, '-' for standard input, or inline JSON",
    )
    parser.add_argument(
        "--max-cycles",
        type=_positive_int,
        required=True,
        metavar="N",
        help="cycles at most (upstream's maxOuterCycles)",
    )
    parser.add_argument(
        "--outer-loop-id", metavar="ID", default=None, help="ol_... id to use, resume or read back"
    )
    parser.add_argument(
        "--supervisor-model",
        metavar="MODEL",
        default=None,
        help="the supervisor's litellm model (default: the workflow's planner model)",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=[],
        help="module that defines the workflow, its tools and model slots (repeatable)",
    )
    parser.add_argument(
        "--fleet", action="store_true", help="run each cycle on the fleet --world names"
    )
    parser.add_argument(
        "--cycle-timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="with --fleet: how long to wait for one cycle's run (default: no limit)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    add_world_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        workflow = _workflow(args)
        loop_input = _input(args)
        loop_id = _loop_id(args.outer_loop_id)
        if args.fleet and args.data_dir:
            raise UsageProblem("--fleet runs on the fleet's world: give --world, not --data-dir")
        if args.cycle_timeout is not None and not args.fleet:
            raise UsageProblem("--cycle-timeout is for --fleet")
    except UsageProblem as exc:
        return _fail(str(exc), EXIT_USAGE)
    from little_dist.authoring import RunFailedError
    from little_dist.authoring.errors import InputValidationError
    from little_dist.cli.run_cmd import _install_scripted_model
    from little_dist.outer_loop import OuterLoopError, run_outer_loop

    _install_scripted_model()
    # Validate before anything is written: a bad input names its field, and the loop's id
    # is only announced for a loop that will start.
    try:
        workflow.validate_input(loop_input)
    except InputValidationError as exc:
        return _fail(_input_problem(exc), EXIT_FAILED)
    if not args.quiet:
        print(f"outer loop {loop_id}", file=sys.stderr, flush=True)
    client = None
    world = None
    options: dict[str, Any] = {"supervise": _supervisor(args, workflow)}
    try:
        if args.fleet:
            from little_dist.cli.submit_cmd import fleet_client

            client = fleet_client(args, app_modules=args.app)
            options.update(client=client, cycle_timeout=args.cycle_timeout)
            world = client.world
        else:
            from little_dist.cli.common import open_world_for_writing

            world = open_world_for_writing(args)
            options["world"] = world
            if not args.quiet:
                options["progress"] = _CycleProgress().update
        try:
            result = run_outer_loop(
                workflow,
                loop_input,
                max_outer_cycles=args.max_cycles,
                outer_loop_id=loop_id,
                **{key: value for key, value in options.items() if value is not None},
            )
        except OuterLoopError as exc:
            return _fail(f"{loop_id}: {exc} ({exc.cause_code})", EXIT_FAILED)
        except RunFailedError as exc:
            return _fail(f"{loop_id}: {exc}", EXIT_FAILED)
        except InputValidationError as exc:
            return _fail(_input_problem(exc), EXIT_FAILED)
        summary = _summary(world, loop_id, result) if args.json else None
    finally:
        if client is not None:
            client.close()
        elif world is not None:
            world.close()
    print(json.dumps(summary if summary is not None else result.output, ensure_ascii=False))
    return EXIT_DONE


def _workflow(args: argparse.Namespace) -> Any:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.cli.app_modules import import_app_module, resolve_attribute

    ref: str = args.workflow
    module_name, colon, attribute = ref.partition(":")
    if colon:
        if not module_name or not attribute:
            raise UsageProblem(f"workflow {ref!r}: expected module:attribute")
        module = import_app_module(module_name)
        try:
            value = resolve_attribute(module, attribute)
        except AttributeError:
            raise UsageProblem(f"module {module_name!r} has no attribute {attribute!r}") from None
        if not isinstance(value, WorkflowDefinition):
            raise UsageProblem(
                f"{ref} is a {type(value).__name__}, not a workflow made with define_workflow"
            )
        return value
    found: dict[str, Any] = {}
    for name in args.app:
        for value in vars(import_app_module(name)).values():
            if isinstance(value, WorkflowDefinition):
                found.setdefault(value.id, value)
    if ref not in found:
        where = ", ".join(sorted(found)) or "none; give --app MODULE"
        raise UsageProblem(f"unknown workflow {ref!r} (the --app modules define: {where})")
    return found[ref]


def _input(args: argparse.Namespace) -> Any:
    from little_dist.cli.json_input import read_input
    from little_dist.settings import SettingsError, load_limits

    try:
        limits = load_limits()
    except SettingsError as exc:
        raise UsageProblem("; ".join(exc.problems)) from None
    value = (
        read_input(args.input, limits.max_json_depth, limits.max_input_bytes)
        if args.input is not None
        else {}
    )
    limits.check_input(value)
    return value


def _loop_id(given: str | None) -> str:
    from little_dist.errors import InvalidInputError
    from little_dist.ids import OUTER_LOOP_ID_PREFIX
    from little_dist.outer_loop import validate_outer_loop_id

    try:
        return validate_outer_loop_id(given or OUTER_LOOP_ID_PREFIX + uuid.uuid4().hex)
    except InvalidInputError as exc:
        raise UsageProblem(f"--outer-loop-id: {exc}") from None


def _supervisor(args: argparse.Namespace, workflow: Any) -> Any:
    if args.supervisor_model is None:
        return None  # the loop's default: a model supervisor on the planner's model
    from little_dist.authoring import model
    from little_dist.outer_loop import ModelSupervisor

    slot = model(args.supervisor_model)
    return ModelSupervisor(slot.resolved("supervisor"), system=workflow.system)


def _input_problem(exc: Any) -> str:
    problems = "; ".join(f"{where}: {what}" for where, what in exc.problems)
    return f"input does not match the workflow's input: {problems}"


def _summary(world: Any, loop_id: str, result: Any) -> dict[str, Any]:
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.outer_loop import outer_loop_report
    from little_dist.outer_loop.report import outer_loop_report_to_json

    report = outer_loop_report_to_json(
        outer_loop_report(world, loop_id, pricing_fallback=litellm_price_fallback)
    )
    return {
        "outerLoopId": loop_id,
        "status": report["status"],
        "runId": result.run_id,
        "output": result.output,
        "cycles": report["cycles"],
        "total": report["total"],
    }


class _CycleProgress:
    """One line per cycle's run (``cycle run RUN_ID``) and its status changes, on stderr."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.last = ""

    def update(self, state: Any) -> None:
        if state.run_id != self.run_id:
            self.run_id = state.run_id
            print(f"cycle run {state.run_id}", file=sys.stderr, flush=True)
        line = f"[{state.status}]"
        if line != self.last:
            self.last = line
            print(line, file=sys.stderr, flush=True)


def _fail(message: str, code: int) -> int:
    print(f"little outer-loop: {one_line(message)}", file=sys.stderr)
    return code
