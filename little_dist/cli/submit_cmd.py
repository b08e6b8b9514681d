"""``little submit WORKFLOW --input JSON|FILE``: start a run on the fleet.

``WORKFLOW`` is an LWIR JSON file (or a compiled WorkflowVersion's JSON, submitted as it is,
not compiled again; one locked with ``inputBinding: "required"`` refuses an input whose digest
is not its ``lock.inputHash``, exit 1), ``module:attribute`` naming a workflow object (a
workflow made with ``define_workflow``, an LWIR dict or a compiled WorkflowVersion), a
workflow folder (a path
with a ``/``, or ``.`` for a project with one workflow; see :mod:`little_dist.workspace`), or
the id of a workflow
defined in the ``--app`` module (default ``LITTLE_APP``); an id the local app does not know
is sent to the planner workers, whose app must define it. A document that names a tool,
model slot or harness its workflow (in the ``--app`` module) does not register is refused
with one line naming the step and the capability, before anything is stored.

Prints the run id. With ``--wait``, follows the run until it ends and prints its output as
JSON (``--json``: the run's status summary instead); exit 1 when the run failed.
The world and queues come from the fleet settings (``LITTLE_WORLD``, ``LITTLE_*``);
``--world`` overrides ``LITTLE_WORLD``.

Exit codes: 0 submitted (or, with ``--wait``, completed); 1 the run failed, or the workflow
or its input is invalid or over a limit (``LITTLE_MAX_*``, see :mod:`little_dist.limits`);
2 usage errors (a file that cannot be read, input that is not JSON,
a module that cannot be imported).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.cli.common import budget_dollars
from little_dist.cli.locked_versions import input_binding_problem, is_locked_version
from little_dist.errors import InvalidInputError
from little_dist.redaction import redact

if TYPE_CHECKING:
    from little_dist.fleet.client import Client
    from little_dist.settings import Settings

__all__ = ["add_fleet_options", "fleet_client", "fleet_settings", "register", "run"]

EXIT_USAGE = 2


class _Usage(Exception):
    """A usage error: printed as one line, exit 2."""


def add_fleet_options(parser: argparse.ArgumentParser) -> None:
    """``--world SPEC``: overrides ``LITTLE_WORLD`` for this command."""
    parser.add_argument(
        "--world",
        metavar="SPEC",
        default=None,
        help="the fleet's world, a redis:// URL (default: $LITTLE_WORLD)",
    )


def fleet_settings(args: argparse.Namespace) -> Settings:
    """The fleet settings from the environment, with ``--world`` applied."""
    from little_dist.settings import load_settings

    world = getattr(args, "world", None)
    if world:
        return load_settings({**os.environ, "LITTLE_WORLD": world})
    return load_settings()


def fleet_client(args: argparse.Namespace, *, app_modules: list[str] | None = None) -> Client:
    """A :class:`~little_dist.fleet.client.Client` on the fleet the options name."""
    from little_dist.fleet.client import Client

    registry = None
    if app_modules:
        from little_dist.fleet.app_registry import load_registry

        registry = load_registry(app_modules)
    return Client(fleet_settings(args), registry=registry)


def register(sub: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help="start a run on the fleet",
        description="Submit a run to the fleet and print its run id.",
    )
    parser.add_argument(
        "workflow", metavar="WORKFLOW", help="LWIR file, module:attribute, or workflow id"
    )
    parser.add_argument(
        "--input",
        metavar="JSON|FILE",
        default=None,
        help="the run input: a JSON file, '-' for standard input, or inline JSON (default {})",
    )
    parser.add_argument("--run-id", metavar="ID", default=None, help="run id to use")
    parser.add_argument(
        "--budget-usd",
        type=budget_dollars,
        default=None,
        metavar="DOLLARS",
        help="the run's dollar ceiling: a model call that could pass it is not sent",
    )
    parser.add_argument(
        "--deadline",
        metavar="WHEN",
        default=None,
        help="when the run must end at the latest: a duration from now ('10m') or an ISO 8601 "
        "time with its zone; past it the run fails with causeCode deadline_exceeded",
    )
    parser.add_argument(
        "--max-attempts",
        type=int,
        default=None,
        metavar="N",
        help="attempts of a step that declares no retry of its own (upstream's maxAttempts)",
    )
    parser.add_argument(
        "--callback-url",
        metavar="URL",
        default=None,
        help="an http(s) URL the fleet POSTs the run's end to, signed with "
        "LITTLE_CALLBACK_SECRET (webhook-* headers), retried with backoff",
    )
    parser.add_argument("--wait", action="store_true", help="wait for the run and print it")
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="with --wait: give up"
    )
    parser.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=None,
        help="module defining workflows by id (repeatable; default $LITTLE_APP)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    add_fleet_options(parser)
    return parser


def _read_json_text(raw: bytes | str, label: str) -> Any:
    # A value nested deeper than LITTLE_MAX_JSON_DEPTH raises InputLimitError (exit 1); the
    # client checks the rest of the limits.
    from little_dist.limits import loads_bounded
    from little_dist.settings import load_limits

    try:
        return loads_bounded(raw, load_limits().max_json_depth, label)
    except json.JSONDecodeError as exc:
        raise _Usage(
            f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise _Usage(f"{label}: invalid JSON: {exc}") from None


def _read_file(path: str, label: str, setting: str) -> bytes:
    # Bounded, and only a regular file (see little_dist.cli.json_input): over the bound is
    # an InputLimitError (exit 1), a path that is not a file a usage error.
    from little_dist.cli.json_input import read_bounded
    from little_dist.cli.run_problems import UsageProblem
    from little_dist.settings import load_limits

    limits = load_limits()
    limit = limits.max_input_bytes if setting == "LITTLE_MAX_INPUT_BYTES" else limits.max_lwir_bytes
    try:
        return read_bounded(path, label, limit, setting)
    except UsageProblem as exc:
        raise _Usage(str(exc)) from None


def read_input(value: str | None) -> Any:
    """``--input``: a file, ``-`` (stdin) or inline JSON; ``{}`` when not given."""
    if value is None:
        return {}
    if value == "-" or os.path.exists(value):
        label = "--input <stdin>" if value == "-" else f"--input {value}"
        return _read_json_text(_read_file(value, label, "LITTLE_MAX_INPUT_BYTES"), label)
    stripped = value.strip()
    looks_json = stripped[:1] in ("{", "[", '"', "-") or stripped[:1].isdigit()
    if not looks_json and stripped not in ("true", "false", "null"):
        raise _Usage(f"--input: cannot read {value}: no such file (nor is it inline JSON)")
    return _read_json_text(value, "--input")


def _import_object(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise _Usage(f"cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise _Usage(f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise _Usage(f"module {module_name!r} has no attribute {attribute!r}")
        value = getattr(value, part)
    return value


def resolve_workflow(spec: str) -> Any:
    """What ``WORKFLOW`` names: a dict (LWIR), a definition, a version, or an id (str)."""
    if os.path.isdir(spec) and (os.sep in spec or spec in (".", "..")):
        return _folder_workflow(spec)  # a workflow folder, or a one-workflow project
    # A path to anything but a folder named like an id is read as a file (and refused unless
    # it is a regular one: a FIFO or /dev/zero is not a workflow id either).
    as_path = os.path.exists(spec) and (not os.path.isdir(spec) or os.sep in spec)
    if as_path or spec.endswith((".json", ".lwir")):
        document = _read_json_text(_read_file(spec, spec, "LITTLE_MAX_LWIR_BYTES"), spec)
        if not isinstance(document, Mapping):
            raise _Usage(f"{spec}: expected an LWIR JSON object")
        if is_locked_version(document):
            return _locked_version(document, spec)
        return document.get("lwir", document)
    if ":" in spec:
        value = _import_object(spec)
        if isinstance(value, Mapping) and "lwir" in value:
            return value["lwir"]
        return value
    return spec


def _locked_version(document: Mapping[str, Any], spec: str) -> Any:
    """A compiled WorkflowVersion file is submitted as it is (its hashes checked), not
    compiled again, as ``little run`` runs one."""
    from little_dist.compiler import WorkflowVersion, WorkflowVersionMismatchError

    try:
        return WorkflowVersion.from_json(document)
    except WorkflowVersionMismatchError as exc:
        raise InvalidInputError(f"{spec}: {exc}") from None


def check_lock(workflow: Any, run_input: Any, spec: str) -> None:
    """A version locked to its input (``inputBinding: "required"``) refuses another one."""
    from little_dist.compiler import WorkflowVersion

    if isinstance(workflow, WorkflowVersion):
        problem = input_binding_problem(workflow.lock, run_input)
        if problem is not None:
            details = f" ({'; '.join(problem[1:])})" if problem[1:] else ""
            raise InvalidInputError(f"{spec}: {problem[0]}{details}")


def _folder_workflow(spec: str) -> Any:
    from little_dist.workspace import load_workflow, resolve_workflow_reference

    try:
        return load_workflow(resolve_workflow_reference(spec))
    except InvalidInputError as exc:
        raise _Usage(str(exc)) from None


def _print_outcome(client: Client, run_id: str, *, as_json: bool, timeout: float | None) -> int:
    state = client.wait(run_id, timeout=timeout)
    view = client.status(run_id)
    if as_json:
        print(json.dumps(view.to_json(), ensure_ascii=False, indent=2))
    elif state.status == "completed":
        print(json.dumps(state.output, ensure_ascii=False, indent=2))
    if state.status != "completed":
        error = state.error if isinstance(state.error, Mapping) else {}
        cause = error.get("causeCode") or "failed"
        message = error.get("message") or "the run failed"
        print(f"little submit: run {run_id} failed ({cause}): {redact(message)}", file=sys.stderr)
        return 1
    return 0


def _check_callback(url: str | None) -> None:
    """A bad ``--callback-url`` is a usage error, said before anything is read or sent."""
    if url is None:
        return
    from little_dist.errors import InvalidInputError
    from little_dist.fleet.callback_urls import check_callback_url

    try:
        check_callback_url(url, "--callback-url")
    except InvalidInputError as exc:
        raise _Usage(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    try:
        run_input = read_input(args.input)
        workflow = resolve_workflow(args.workflow)
        _check_callback(args.callback_url)
    except _Usage as exc:
        print(f"little submit: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    check_lock(workflow, run_input, args.workflow)
    settings = fleet_settings(args)
    modules = args.app if args.app else ([settings.app] if settings.app else [])
    from little_dist.fleet.app_registry import AppImportError, load_registry
    from little_dist.fleet.client import Client

    try:
        # Also for a document: it is checked against the capabilities its workflow registers
        # before anything is stored (without an app, the workers check it when it runs).
        registry = load_registry(modules) if modules or isinstance(workflow, str) else None
    except AppImportError as exc:
        print(f"little submit: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    with Client(settings, registry=registry) as client:
        run_id = client.submit(
            workflow,
            run_input,
            run_id=args.run_id,
            budget_usd=args.budget_usd,
            deadline=args.deadline,
            max_attempts=args.max_attempts,
            callback_url=args.callback_url,
        )
        if not args.wait:
            if args.json:
                print(json.dumps({"runId": run_id}))
            else:
                print(run_id)
            return 0
        print(f"little submit: run {run_id} submitted; waiting", file=sys.stderr, flush=True)
        return _print_outcome(client, run_id, as_json=args.json, timeout=args.timeout)
