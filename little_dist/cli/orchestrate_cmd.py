"""``little orchestrate --model MODEL --app MODULE [WORKFLOW ...] --goal TEXT|--input JSON``:
an orchestrator model composes the available workflows, in this process.

The orchestrator (:func:`~little_dist.subruns.run_orchestration`) is offered upstream's
``plan_workflow`` / ``run_workflow`` / ``start_workflow`` over the available workflows and
runs them as sub-runs of its own run, on the world named by ``--world`` / ``--data-dir``
(as the other commands). The available workflows are those of the ``--app`` modules (as
``little worker --app`` finds them: a ``WORKFLOWS`` list, else every workflow made with
``define_workflow`` at the module's top level) and the ``module:attribute`` references
given as arguments; ``--workflow ID`` (repeatable) keeps only those ids.

The orchestrator's input is ``--input`` (a JSON object; a file, ``-`` for standard input, or
inline JSON), with ``--goal TEXT`` added as its ``goal`` field (a non-object input goes
under ``input``). Its answer is printed on stdout as JSON (``--json``: a summary with the
run id, status, usage and the sub-runs). ``--bash`` gives the orchestrator the sandboxed
bash tool, and sub-run outputs then come to it as files (``outputPath``).

Exit codes (as ``little run``): 0 the orchestrator completed; 1 its run failed (one-line
reason) or its input is invalid; 2 usage errors: a module or attribute that cannot be
imported, an unknown workflow id, input that is not JSON. Nothing is written to the world
before the workflows and the input are known to be usable.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from little_dist.cli.run_problems import UsageProblem, one_line

__all__ = ["register", "run"]

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    from little_dist.cli.common import add_world_options
    from little_dist.cli.run_cmd import _positive_int
    from little_dist.subruns.orchestrator import DEFAULT_MAX_CONCURRENT_SUB_RUNS

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help="let an orchestrator model compose workflows as sub-runs",
        description=(
            "Give an orchestrator model the available workflows (from --app modules and "
            "module:attribute references) and a goal; it plans and runs them as sub-runs. "
            "Prints its answer as JSON. Exit 0 when it completed, 1 when it failed, 2 on "
            "usage errors."
        ),
    )
    parser.add_argument(
        "workflows", nargs="*", metavar="WORKFLOW", help="module:attribute of a workflow"
    )
    parser.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=[],
        help="module whose workflows are available (repeatable)",
    )
    parser.add_argument(
        "--workflow",
        metavar="ID",
        action="append",
        default=[],
        dest="only",
        help="offer only this workflow id (repeatable)",
    )
    parser.add_argument(
        "--model", metavar="MODEL", required=True, help="the orchestrator's litellm model"
    )
    parser.add_argument("--goal", metavar="TEXT", default=None, help="what to achieve")
    parser.add_argument(
        "--input",
        metavar="FILE|JSON",
        default=None,
        help="the orchestrator's input: a JSON file, '-' for standard input, or inline JSON",
    )
    parser.add_argument("--system", metavar="TEXT", default=None, help="extra instructions")
    parser.add_argument(
        "--run-id", metavar="ID", default=None, help="run id to use, resume or read back"
    )
    parser.add_argument(
        "--max-concurrent-sub-runs",
        type=_positive_int,
        default=DEFAULT_MAX_CONCURRENT_SUB_RUNS,
        metavar="N",
        help=f"sub-runs running at once (default {DEFAULT_MAX_CONCURRENT_SUB_RUNS})",
    )
    parser.add_argument(
        "--bash", action="store_true", help="give the orchestrator the sandboxed bash tool"
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    add_world_options(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        workflows = _workflows(args)
        orchestrator_input = _input(args)
        if args.run_id is not None:
            from little_dist.ids import InvalidIdError, validate_run_id

            try:
                validate_run_id(args.run_id)
            except InvalidIdError as exc:
                raise UsageProblem(f"--run-id: {exc}") from None
    except UsageProblem as exc:
        return _fail(str(exc), EXIT_USAGE)
    from little_dist.authoring import RunFailedError
    from little_dist.authoring.errors import InputValidationError
    from little_dist.cli.common import open_world_for_writing
    from little_dist.cli.run_cmd import _install_scripted_model
    from little_dist.subruns import run_orchestration

    _install_scripted_model()
    world = open_world_for_writing(args)
    try:
        result = run_orchestration(
            workflows,
            orchestrator_input,
            model=args.model,
            system=args.system,
            world=world,
            run_id=args.run_id,
            max_concurrent_sub_runs=args.max_concurrent_sub_runs,
            bash={} if args.bash else None,
        )
        summary = _summary(world, result) if args.json else None
    except RunFailedError as exc:
        return _fail(str(exc), EXIT_FAILED)
    except InputValidationError as exc:
        problems = "; ".join(f"{where}: {what}" for where, what in exc.problems)
        return _fail(f"input does not match the orchestrator's input: {problems}", EXIT_FAILED)
    finally:
        world.close()
    print(json.dumps(summary if summary is not None else result.output, ensure_ascii=False))
    return EXIT_COMPLETED


def _workflows(args: argparse.Namespace) -> list[Any]:
    from little_dist.authoring import WorkflowDefinition
    from little_dist.cli.app_modules import import_app_module, resolve_attribute

    found: dict[str, Any] = {}
    for name in args.app:
        module = import_app_module(name)
        listed = getattr(module, "WORKFLOWS", None)
        values = list(listed) if listed is not None else list(vars(module).values())
        for value in values:
            if isinstance(value, WorkflowDefinition):
                found.setdefault(value.id, value)
            elif listed is not None:
                raise UsageProblem(
                    f"{name}.WORKFLOWS holds a {type(value).__name__}, not a workflow"
                )
    for ref in args.workflows:
        module_name, colon, attribute = ref.partition(":")
        if not colon or not module_name or not attribute:
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
        found.setdefault(value.id, value)
    if not found:
        raise UsageProblem("no workflows: give --app MODULE or module:attribute references")
    for wanted in args.only:
        if wanted not in found:
            raise UsageProblem(
                f"--workflow: unknown workflow {wanted!r} (available: {', '.join(sorted(found))})"
            )
    return [found[key] for key in sorted(found) if not args.only or key in args.only]


def _input(args: argparse.Namespace) -> dict[str, Any]:
    from little_dist.cli.json_input import read_input
    from little_dist.settings import SettingsError, load_limits

    try:
        limits = load_limits()
    except SettingsError as exc:
        raise UsageProblem("; ".join(exc.problems)) from None
    value = (
        read_input(args.input, limits.max_json_depth, limits.max_input_bytes)
        if args.input is not None
        else None
    )
    given: dict[str, Any] = (
        dict(value) if isinstance(value, dict) else ({} if value is None else {"input": value})
    )
    if args.goal is not None:
        given["goal"] = args.goal
    limits.check_input(given)
    return given


def _summary(world: Any, result: Any) -> dict[str, Any]:
    from little_dist.subruns import sub_run_rollup

    rollup = sub_run_rollup(world.list_events, result.run_id)
    summary: dict[str, Any] = {
        "runId": result.run_id,
        "status": result.status,
        "output": result.output,
        "usage": result.usage.model_dump(by_alias=True),
    }
    if rollup is not None:
        summary["subRuns"] = [
            {"runId": row.run_id, "workflowId": row.workflow_id, "status": row.status}
            for row in rollup.rows
        ]
        summary["totalUsage"] = rollup.total.model_dump(by_alias=True)
    return summary


def _fail(message: str, code: int) -> int:
    print(f"little orchestrate: {one_line(message)}", file=sys.stderr)
    return code
