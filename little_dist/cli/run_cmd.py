"""``little run WORKFLOW --input FILE|JSON``: run a workflow to its end in this process.

``WORKFLOW`` is an LWIR JSON file (or a compiled WorkflowVersion with an ``lwir`` field), or
``module:attribute`` naming a workflow object in an importable module (a dict holding LWIR,
a compiled :class:`~little_dist.compiler.WorkflowVersion`, or a workflow made with
``define_workflow`` — see :func:`_workflow_from_object`). Tools, model slots and harnesses
come from ``--app MODULE`` (and from the workflow's own module): a ``capabilities``
attribute (a :class:`~little_dist.runtime.Capabilities` or a function returning one), else
``tools``/``models``/``harnesses``/``skills`` attributes, else every
:class:`~little_dist.tools.Tool` defined at the module's top level.

``--run-id`` resumes an unfinished run (after a crash or a kill) or reads back a finished one
without running anything. Progress goes to stderr (one updating line on a terminal, one
line per change otherwise; ``--quiet`` for none); the run's output is printed as JSON on
stdout (``--json``: a JSON summary of the run instead).

Exit codes: 0 the run completed; 1 the run failed (one-line reason), or the workflow or its
input is invalid (one line per finding); 2 usage errors: a file that cannot be read, input
that is not JSON, a module or attribute that cannot be imported. Nothing is written to the
world before the workflow and the input are known to be valid.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import IO, Any

__all__ = ["register", "run"]

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_INVALID = 1
EXIT_USAGE = 2

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class _Usage(Exception):
    """The command cannot start; the message is the one-line reason (exit 2)."""


class _Invalid(Exception):
    """The workflow or the input is invalid; ``lines`` are the findings (exit 1)."""

    def __init__(self, summary: str, lines: Iterable[str] = ()) -> None:
        super().__init__(summary)
        self.lines = list(lines)


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    from little_dist.cli.common import add_world_options

    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help="run a workflow in this process",
        description=(
            "Run a workflow (an LWIR JSON file, or module:attribute) to its end in this "
            "process. Prints the run's output as JSON on stdout; progress on stderr. Exit 0 "
            "when the run completed, 1 when it failed or the workflow/input is invalid, 2 on "
            "usage errors."
        ),
    )
    parser.add_argument("workflow", metavar="WORKFLOW", help="LWIR JSON file, or module:attribute")
    parser.add_argument(
        "--input",
        metavar="FILE|JSON",
        default=None,
        help="the run input: a JSON file, '-' for standard input, or inline JSON (default {})",
    )
    parser.add_argument(
        "--run-id", metavar="ID", default=None, help="run id to use, resume or read back"
    )
    add_world_options(parser)
    parser.add_argument(
        "--app",
        metavar="MODULE",
        action="append",
        default=[],
        help="module that provides tools, model slots and harnesses (repeatable)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print a JSON summary of the run on stdout"
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--max-workers", type=_positive_int, default=8, metavar="N", help="parallel attempts"
    )
    parser.add_argument(
        "--lease-ttl",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="lease time-to-live of the runner and its attempts (default 15)",
    )
    parser.add_argument(
        "--max-branches",
        type=_positive_int,
        default=None,
        metavar="N",
        help="engine cap on parallel branches (replaces each step's maxBranches)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    _tolerant_streams()
    try:
        prepared = _prepare(args)
    except _Usage as exc:
        return _fail(str(exc), EXIT_USAGE)
    except _Invalid as exc:
        for line in exc.lines:
            print(_one_line(line), file=sys.stderr)
        return _fail(str(exc), EXIT_INVALID)
    resolve, run_input, capabilities = prepared

    from little_dist.cli.common import open_world_for_writing
    from little_dist.local_runner import DEFAULT_LEASE_TTL, new_run_id, run_version

    _install_scripted_model()
    world = open_world_for_writing(args)
    printer = None if args.quiet else _Progress(sys.stderr)
    run_id = args.run_id or new_run_id()
    try:
        version = resolve(world, run_id)
        if version is None:  # the planner failed and recorded RunFailed
            from little_dist.run_state import materialize_run_state

            state = materialize_run_state(world.list_events(run_id), run_id=run_id)
        else:
            state = run_version(
                world,
                version,
                run_input,
                run_id=run_id,
                capabilities=capabilities,
                max_workers=args.max_workers,
                progress=None if printer is None else printer.update,
                notice=None if printer is None else printer.notice,
                lease_ttl=args.lease_ttl or DEFAULT_LEASE_TTL,
                max_branches_cap=args.max_branches,
            )
    finally:
        if printer is not None:
            printer.finish()
        world.close()
    return _report(args, state)


# -- preparing: everything that can be wrong before the world is touched ----------------------


_Resolver = Callable[[Any, str], Any]


def _prepare(args: argparse.Namespace) -> tuple[_Resolver, Any, Any]:
    """``(resolve(world, run_id) -> WorkflowVersion | None, run input, capabilities)``.

    Everything that can be wrong with the command line, the workflow or the input is found
    here, before a world is opened.
    """
    from little_dist.runtime import Capabilities

    if args.run_id is not None:
        from little_dist.ids import InvalidIdError, validate_run_id

        try:
            validate_run_id(args.run_id)
        except InvalidIdError as exc:
            raise _Usage(f"--run-id: {exc}") from None
    run_input = _read_input(args.input)
    app_parts: list[Capabilities] = [_capabilities_of(_import(name)) for name in args.app]
    target = args.workflow
    resolve: _Resolver
    if _TARGET.match(target) and not os.path.exists(target):
        module_name, _, attribute = target.partition(":")
        module = _import(module_name)
        try:
            obj = _resolve_attribute(module, attribute)
        except AttributeError:
            raise _Usage(f"module {module_name!r} has no attribute {attribute!r}") from None
        resolve, run_input, own = _workflow_from_object(obj, run_input, target)
        app_parts.insert(0, _capabilities_of(module) if own is None else own)
    else:
        document = _read_json(target, target)
        if isinstance(document, dict) and "lwir" in document:
            document = document["lwir"]  # a compiled WorkflowVersion carries its LWIR
        resolve = _fixed(_compile(document, run_input, target), run_input)
    return resolve, run_input, _merge(app_parts)


def _fixed(version: Any, run_input: Any) -> _Resolver:
    _check_input(version, run_input)
    return lambda world, run_id: version


def _compile(document: Any, run_input: Any, label: str) -> Any:
    from little_dist.compiler import LwirInvalidError, compile_lwir

    try:
        return compile_lwir(document, input=run_input)
    except LwirInvalidError as exc:
        findings = [f for f in exc.findings if f.severity == "error"]
        noun = "finding" if len(findings) == 1 else "findings"
        raise _Invalid(
            f"{label}: invalid workflow, {len(findings)} {noun}",
            [f"{f.code} {f.path}: {f.message}" for f in findings],
        ) from None
    except RecursionError:
        raise _Invalid(f"{label}: workflow is nested too deeply") from None


def _check_input(version: Any, run_input: Any) -> None:
    from little_dist.local_runner import RunInputError, check_run_input

    try:
        check_run_input(version, run_input)
    except RunInputError as exc:
        noun = "problem" if len(exc.problems) == 1 else "problems"
        raise _Invalid(
            f"input does not match the workflow's input schema ({len(exc.problems)} {noun})",
            [
                f"input{problem}" if problem.startswith("/") else f"input {problem}"
                for problem in exc.problems
            ],
        ) from None


def _workflow_from_object(obj: Any, run_input: Any, label: str) -> tuple[_Resolver, Any, Any]:
    """``(resolver, run input, Capabilities | None)`` for what ``module:attribute`` names.

    Accepted: a workflow made with ``define_workflow`` (planned, or its ``plan=`` used, as
    :func:`~little_dist.run_workflow` does, and its own tools and models); a compiled
    WorkflowVersion; a dict holding LWIR (or a compiled version's JSON); a function without
    arguments returning one of these.
    """
    from little_dist.authoring import InputValidationError, WorkflowDefinition
    from little_dist.compiler import WorkflowVersion

    if callable(obj) and not isinstance(obj, type | WorkflowDefinition):
        if not _takes_no_arguments(obj):
            raise _Usage(f"{label} is a function that needs arguments, not a workflow")
        try:
            obj = obj()  # a factory: `module:make_workflow`
        except Exception as exc:
            raise _Usage(f"{label}() raised {type(exc).__name__}: {_one_line(str(exc))}") from None
    if isinstance(obj, WorkflowDefinition):
        definition = obj
        try:
            run_input = definition.validate_input(run_input)
        except InputValidationError as exc:
            raise _Invalid(
                f"input does not match the input schema of {definition.id}",
                [f"{where}: {what}" for where, what in exc.problems],
            ) from None
        capabilities = definition.capabilities()

        def resolve(world: Any, run_id: str) -> Any:
            from little_dist.planner import resolve_version

            return resolve_version(world, run_id, definition, run_input, capabilities=capabilities)

        return resolve, run_input, capabilities
    if isinstance(obj, WorkflowVersion):
        return _fixed(obj, run_input), run_input, None
    if isinstance(obj, Mapping):
        document = obj.get("lwir", obj)
        return _fixed(_compile(document, run_input, label), run_input), run_input, None
    raise _Usage(
        f"{label} is a {type(obj).__name__}, not a workflow (expected a workflow made with "
        "define_workflow, LWIR, or a WorkflowVersion)"
    )


def _takes_no_arguments(fn: Callable[..., Any]) -> bool:
    import inspect

    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        for p in signature.parameters.values()
    )


def _import(name: str) -> ModuleType:
    # Like `python -m`, resolve modules from the current directory too (the `little` entry
    # point does not put it on sys.path).
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise _Usage(f"cannot import module {name!r}: no such module") from None
        raise _Usage(f"cannot import module {name!r}: {exc}") from None
    except Exception as exc:  # the module itself raised while importing
        raise _Usage(
            f"cannot import module {name!r}: {type(exc).__name__}: {_one_line(str(exc))}"
        ) from None


def _resolve_attribute(module: ModuleType, dotted: str) -> Any:
    value: Any = module
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _capabilities_of(module: ModuleType) -> Any:
    """The Capabilities a module provides (see the module docstring for the conventions)."""
    from little_dist.runtime import Capabilities
    from little_dist.tools import Tool, ToolRegistry

    found = getattr(module, "capabilities", None)
    if callable(found) and not isinstance(found, Capabilities):
        found = found()
    if isinstance(found, Capabilities):
        return found
    if found is not None:
        raise _Usage(
            f"{module.__name__}.capabilities is a {type(found).__name__}, not Capabilities"
        )
    tools = getattr(module, "tools", None)
    if tools is None:
        tools = [value for value in vars(module).values() if isinstance(value, Tool)]
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    return Capabilities(
        tools=registry,
        models=dict(getattr(module, "models", None) or {}),
        harnesses=dict(getattr(module, "harnesses", None) or {}),
        skills=tuple(getattr(module, "skills", None) or ()),
    )


def _merge(parts: list[Any]) -> Any:
    """One Capabilities from several: tools, models and harnesses united, first one wins."""
    from dataclasses import replace

    from little_dist.runtime import Capabilities
    from little_dist.tools import ToolRegistry

    if not parts:
        return Capabilities()
    if len(parts) == 1:
        return parts[0]
    registry = ToolRegistry()
    models: dict[str, Any] = {}
    harnesses: dict[str, Any] = {}
    skills: list[Any] = []
    for part in parts:
        for item in part.tools:
            if item.name not in registry:
                registry.register(item)
        for key, value in part.models.items():
            models.setdefault(key, value)
        for key, value in part.harnesses.items():
            harnesses.setdefault(key, value)
        skills.extend(part.skills)
    return replace(parts[0], tools=registry, models=models, harnesses=harnesses, skills=skills)


def _read_input(value: str | None) -> Any:
    if value is None:
        return {}
    if value == "-" or os.path.exists(value):
        return _read_json(value, "<stdin>" if value == "-" else value)
    stripped = value.strip()
    if not (stripped[:1] in ("{", "[", '"', "-") or stripped[:1].isdigit()) and stripped not in (
        "true",
        "false",
        "null",
    ):
        raise _Usage(f"--input: cannot read {value}: no such file (nor is it inline JSON)")
    try:
        return json.loads(value, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _Usage(
            f"--input: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise _Usage("--input: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise _Usage(f"--input: invalid JSON: {_one_line(str(exc))}") from None


def _read_json(path: str, label: str) -> Any:
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                raw = handle.read()
    except IsADirectoryError:
        raise _Usage(f"cannot read {label}: is a directory") from None
    except FileNotFoundError:
        raise _Usage(f"cannot read {label}: no such file") from None
    except PermissionError:
        raise _Usage(f"cannot read {label}: permission denied") from None
    except OSError as exc:
        raise _Usage(f"cannot read {label}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _Usage(f"{label}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    if not text.strip():
        raise _Usage(f"{label}: invalid JSON: the file is empty")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _Usage(
            f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise _Usage(f"{label}: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise _Usage(f"{label}: invalid JSON: {_one_line(str(exc))}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _install_scripted_model() -> None:
    # Offline demos and tests point LITTLE_SCRIPTED_MODEL at a script; litellm is imported
    # only then.
    from little_dist.testing.scripted import SCRIPT_ENV_VAR

    if os.environ.get(SCRIPT_ENV_VAR):
        from little_dist.testing import install_from_env

        install_from_env()


# -- reporting ---------------------------------------------------------------------------------


def _report(args: argparse.Namespace, state: Any) -> int:
    if args.json:
        summary: dict[str, Any] = {
            "runId": state.run_id,
            "status": state.status,
            "workflowVersionId": state.workflow_version_id,
            "usage": state.usage.model_dump(by_alias=True),
        }
        if state.has_output:
            summary["output"] = state.output
        if state.output_ref is not None:
            summary["outputRef"] = state.output_ref
        if state.has_error:
            summary["error"] = state.error
        _print(json.dumps(summary, ensure_ascii=False))
    elif state.status == "completed":
        _print(json.dumps(state.output, ensure_ascii=False, indent=2))
    if state.status == "completed":
        return EXIT_COMPLETED
    print(f"little run: {state.run_id} failed: {_reason(state.error)}", file=sys.stderr)
    return EXIT_FAILED


def _reason(error: Any) -> str:
    if isinstance(error, Mapping):
        message = str(error.get("message") or error.get("name") or "unknown error")
        where = error.get("stepPath")
        cause = error.get("causeCode")
        text = f"{where}: {message}" if isinstance(where, str) else message
        return _one_line(f"{text} ({cause})" if isinstance(cause, str) else text)
    return _one_line(str(error) if error is not None else "unknown error")


class _Progress:
    """Steps done / running / failed, tokens and dollars, on stderr."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""
        self.shown_id = False

    def update(self, state: Any) -> None:
        if not self.shown_id:
            self._line(f"little run: {state.run_id}", final=True)
            self.shown_id = True
        counts = {"completed": 0, "running": 0, "failed": 0}
        for step in state.steps.values():
            if step.status in counts:
                counts[step.status] += 1
        usage = state.usage
        tokens = int(usage.input_tokens + usage.output_tokens)
        cost = "$—" if usage.cost_usd is None else f"${usage.cost_usd:.4f}"
        line = (
            f"{state.status}: {counts['completed']} done, {counts['running']} running, "
            f"{counts['failed']} failed · {tokens:,} tokens · {cost}"
        )
        if line != self.last:
            self.last = line
            self._line(line, final=False)

    def notice(self, message: str) -> None:
        self._line(f"little run: {message}", final=True)

    def finish(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()
            self.last = ""

    def _line(self, text: str, *, final: bool) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K" + text + ("\n" if final else ""))
            if final and self.last:
                self.stream.write(self.last)  # keep the status line under the notice
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _print(text: str) -> None:
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _fail(message: str, code: int) -> int:
    print(f"little run: {_one_line(message)}", file=sys.stderr)
    return code


def _tolerant_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value
