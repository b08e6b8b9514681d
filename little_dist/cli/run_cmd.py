"""``little run WORKFLOW --input FILE|JSON``: run a workflow to its end in this process.

``WORKFLOW`` is an LWIR JSON file (or a compiled WorkflowVersion with an ``lwir`` field), or
``module:attribute`` naming a workflow object in an importable module (a dict holding LWIR,
a compiled :class:`~little_dist.compiler.WorkflowVersion`, or a workflow made with
``define_workflow`` — see :mod:`little_dist.cli.run_target`). Tools, model slots and harnesses
come from ``--app MODULE`` (and from the workflow's own module): a ``capabilities``
attribute (a :class:`~little_dist.runtime.Capabilities` or a function returning one), else
``tools``/``models``/``harnesses``/``skills`` attributes, else every
:class:`~little_dist.tools.Tool` defined at the module's top level
(:mod:`little_dist.cli.app_modules`).

``--run-id`` resumes an unfinished run (after a crash or a kill) or reads back a finished one
without running anything. Progress goes to stderr (one updating line on a terminal, one
line per change otherwise; ``--quiet`` for none): ``run RUN_ID`` first (the id to resume
with), then ``[STATUS] N done, N running, N failed · tokens · dollars`` lines, and
``note: ...`` for what the runner tells on the way; only a real problem starts with
``little run:``; the run's output is printed as JSON on
stdout (``--json``: a JSON summary of the run instead).

Exit codes: 0 the run completed; 1 the run failed (one-line reason), or the workflow or its
input is invalid (one line per finding) or over a limit on submitted input (``LITTLE_MAX_*``,
see :mod:`little_dist.limits`); 2 usage errors: a file that cannot be read, input
that is not JSON, a module or attribute that cannot be imported. Nothing is written to the
world before the workflow and the input are known to be valid. 130: interrupted (Ctrl-C):
the run stays open, and the same command with ``--run-id`` resumes it.

``--deadline``, ``--run-timeout`` and ``--max-attempts``: the run's limits (see
:mod:`little_dist.run_limits`), recorded when it starts; a resumed run keeps its own.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from little_dist.cli.common import budget_dollars
from little_dist.cli.run_problems import InvalidWorkflowOrInput, UsageProblem, one_line
from little_dist.cli.run_target import prepare
from little_dist.run_limits import run_limits

__all__ = ["register", "run", "run_to_state"]

EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


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
        "--run-timeout",
        metavar="DURATION",
        default=None,
        help="upstream's run timeout ('10m', '2h', or milliseconds): past it the run fails "
        "with causeCode timeout",
    )
    parser.add_argument(
        "--max-attempts",
        type=_positive_int,
        default=None,
        metavar="N",
        help="attempts of a step that declares no retry of its own (upstream's maxAttempts)",
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
    code, state = run_to_state(args)
    return code if state is None else _report(args, state)


def run_to_state(args: argparse.Namespace) -> tuple[int, Any]:
    """Run what ``args`` name to its end: ``(0, the run's final state)``, or ``(exit code,
    None)`` after saying on stderr why nothing ran (``little test`` runs through this too)."""
    _tolerant_streams()
    try:
        prepared = prepare(args)
    except UsageProblem as exc:
        return _fail(str(exc), EXIT_USAGE, args), None
    except InvalidWorkflowOrInput as exc:
        for line in exc.lines:
            print(one_line(line), file=sys.stderr)
        return _fail(str(exc), EXIT_INVALID, args), None
    resolve, run_input, capabilities = prepared
    # A define_workflow target's own timeout and max attempts; the command line's win.
    own_timeout, own_attempts = getattr(resolve, "workflow_limits", (None, None))
    from little_dist.cli.common import open_world_for_writing
    from little_dist.litellm_prices import litellm_price_fallback
    from little_dist.local_runner import DEFAULT_LEASE_TTL, new_run_id, run_version

    _install_scripted_model()
    from little_dist.errors import InvalidInputError
    from little_dist.observability import disable_tracing, enable_tracing_from_env

    try:  # (the run as a trace when OTEL_EXPORTER_OTLP_ENDPOINT is set)
        enable_tracing_from_env("little-run")
    except InvalidInputError as exc:
        return _fail(str(exc), EXIT_USAGE, args), None
    try:
        limits = run_limits(
            "little run",
            now=time.time(),
            # (``little test`` runs through here too, without these options)
            timeout=_timeout_arg(getattr(args, "run_timeout", None)) or own_timeout,
            deadline=getattr(args, "deadline", None),
            attempts=getattr(args, "max_attempts", None) or own_attempts,
        )
    except InvalidInputError as exc:
        return _fail(str(exc).removeprefix("little run: "), EXIT_USAGE, args), None
    world = open_world_for_writing(args)
    printer = None if args.quiet else _Progress(sys.stderr)
    run_id = args.run_id or new_run_id()
    try:
        if args.budget_usd is not None:
            from little_dist.budgets import budget_event

            world.append(run_id, budget_event(args.budget_usd))
        version = resolve(world, run_id)
        if limits and version is not None:
            # (after planning: a log's first event names its workflow, for `little runs`;
            # a resumed run keeps the limits it started with)
            world.append(run_id, limits.event())
        if version is None:  # the planner failed and recorded RunFailed
            from little_dist.run_state import materialize_run_state

            state = materialize_run_state(
                world.list_events(run_id), run_id=run_id, pricing_fallback=litellm_price_fallback
            )
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
                pricing_fallback=litellm_price_fallback,
            )
    except KeyboardInterrupt:
        # Ctrl-C stops this process driving the run; the run stays open (nothing ends it:
        # an interrupt is not a cancel), and the same run id resumes it.
        if printer is not None:
            printer.finish()
            printer = None
        print(
            f"little run: interrupted; run {run_id} stays open: resume it with the same "
            f"command and --run-id {run_id}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED, None
    finally:
        if printer is not None:
            printer.finish()
        world.close()
        disable_tracing()  # (exports the spans still batched)
    return 0, state


def _timeout_arg(text: str | None) -> str | int | None:
    """``--run-timeout``: a duration, or digits (milliseconds, upstream's unit)."""
    return int(text) if text is not None and text.isdigit() else text


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
            "usage": _rounded_usage(state.usage.model_dump(by_alias=True)),
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


def _rounded_usage(usage: dict[str, Any]) -> dict[str, Any]:
    # Dollars below float noise (0.0002823, not 0.00028230000000000003), as the report's.
    cost = usage.get("costUsd")
    if isinstance(cost, float):
        usage["costUsd"] = round(cost, 10)
    return usage


def _reason(error: Any) -> str:
    if isinstance(error, Mapping):
        message = str(error.get("message") or error.get("name") or "unknown error")
        where = error.get("stepPath")
        cause = error.get("causeCode")
        text = f"{where}: {message}" if isinstance(where, str) else message
        return one_line(f"{text} ({cause})" if isinstance(cause, str) else text)
    return one_line(str(error) if error is not None else "unknown error")


class _Progress:
    """Steps done / running / failed, tokens and dollars, on stderr.

    None of its lines starts like an error (``little run: ...``, ``failed: ...``): the run's
    status is in brackets, and the runner's notices are ``note: ...``.
    """

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last = ""
        self.shown_id = False

    def update(self, state: Any) -> None:
        if not self.shown_id:
            self._line(f"run {state.run_id}", final=True)
            self.shown_id = True
        counts = {"completed": 0, "running": 0, "failed": 0}
        for step in state.steps.values():
            if step.status in counts:
                counts[step.status] += 1
        usage = state.usage
        tokens = int(usage.input_tokens + usage.output_tokens)
        cost = "$—" if usage.cost_usd is None else f"${usage.cost_usd:.4f}"
        line = (
            f"[{state.status}] {counts['completed']} done, {counts['running']} running, "
            f"{counts['failed']} failed · {tokens:,} tokens · {cost}"
        )
        if line != self.last:
            self.last = line
            self._line(line, final=False)

    def notice(self, message: str) -> None:
        self._line(f"note: {one_line(message)}", final=True)

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


def _print(text: str) -> None:
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _fail(message: str, code: int, args: argparse.Namespace) -> int:
    command = getattr(args, "command", None) or "run"
    print(f"little {command}: {one_line(message)}", file=sys.stderr)
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
