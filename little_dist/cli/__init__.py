"""The ``little`` command line.

Each subcommand lives in its own module under ``little_dist.cli`` and exposes
``register(subparsers)`` and ``run(args) -> int``. Modules keep heavy imports (litellm,
celery, boto3) inside ``run`` so that ``little --help`` and ``little validate`` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from little_dist import __version__
from little_dist.errors import LittleError
from little_dist.redaction import install_log_redaction, redact

# Subcommand name -> module under little_dist.cli. A module that does not exist yet is skipped,
# so the CLI grows one subcommand at a time.
SUBCOMMANDS: tuple[tuple[str, str], ...] = (
    ("init", "init_cmd"),
    ("add", "add_cmd"),
    ("validate", "validate_cmd"),
    ("run", "run_cmd"),
    ("test", "test_cmd"),
    ("eval", "eval_cmd"),
    ("events", "events_cmd"),
    ("replay", "replay_cmd"),
    ("report", "report_cmd"),
    ("runs", "runs_cmd"),
    ("worker", "worker_cmd"),
    ("scheduler", "scheduler_cmd"),
    ("submit", "submit_cmd"),
    ("status", "status_cmd"),
    ("cancel", "cancel_cmd"),
    ("memory", "memory_cmd"),
    ("orchestrate", "orchestrate_cmd"),
    ("outer-loop", "outer_loop_cmd"),
    ("serve", "serve_cmd"),
    ("tokens", "tokens_cmd"),
    ("approvals", "approvals_cmd"),
    ("schedules", "schedules_cmd"),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse prints usage and exits 2; keep that, but on one line.
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="little", description="Run little-workflow workflows.")
    parser.add_argument("--version", action="version", version=f"little {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in SUBCOMMANDS:
        try:
            module = importlib.import_module(f"little_dist.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"little_dist.cli.{module_name}":
                raise
            continue
        cmd = module.register(sub, name)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        parser.print_help()
        return 2
    problem = not_utf8_argument(parser, args)
    if problem is not None:
        print(f"little {args.command}: {problem}", file=sys.stderr)
        return 2
    # Log records (the engine's warnings, Celery's and litellm's) lose their credentials;
    # the worker and the scheduler install it again on the handlers they set up.
    install_log_redaction()
    try:
        code: int = run(args)
    except LittleError as exc:
        print(f"little {args.command}: {redact(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"little {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`little events --json | head -1`): stop quietly, and keep
        # Python from complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    return code


def not_utf8_argument(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """What is wrong with the first argument that is not UTF-8 text, if one is not.

    Bytes that are not UTF-8 on the command line (``$'\\xff'``) reach Python as lone
    surrogates, which no file name, id, URL or stored text can hold: refused here, for every
    subcommand, naming the argument (its option, or its metavar), before anything runs.
    """
    names: dict[str, str] = {}
    current: argparse.ArgumentParser | None = parser
    while current is not None:  # down the chosen subcommands: `memory`, then `put`
        chosen: argparse.ArgumentParser | None = None
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
            elif action.option_strings:
                names.setdefault(action.dest, max(action.option_strings, key=len))
            else:
                names.setdefault(action.dest, str(action.metavar or action.dest))
        current = chosen
    for dest, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and not _is_utf8(item):
                return f"argument {names.get(dest, dest)}: not UTF-8 text ({_as_bytes(item)!r})"
    return None


def _as_bytes(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")[:80]  # the bytes the shell gave
    except UnicodeEncodeError:  # (only a caller of main() can pass other lone surrogates)
        return text.encode("utf-8", "backslashreplace")[:80]


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
