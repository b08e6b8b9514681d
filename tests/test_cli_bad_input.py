"""Bad input to the ``little`` CLI, as a shell gives it: every failure is one line on stderr
naming what is wrong and where, a non-zero exit, no traceback, and nothing stored.

* Arguments that are not UTF-8 (``$'\\xff'``: Python hands them over surrogate-escaped), for
  every value-taking argument of every subcommand.
* Files and streams read with a bound: ``/dev/zero``, a FIFO or a directory where a file is
  expected; standard input (``-``) that never ends.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from little_dist.cli import build_parser

ROOT = Path(__file__).parent.parent
#: ``$'x\\xff'`` as Python receives it on the command line.
NOT_UTF8 = os.fsdecode(b"x\xff")


def little(
    args: list[str], tmp_path: Path, *, stdin: int | bytes | None = None, memory: int | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m little_dist.cli ARGS`` in ``tmp_path``, with a world there that does not
    exist yet (``LITTLE_WORLD``) and a Redis no one listens on; under ``prlimit --as`` when
    ``memory`` is given (an unbounded read then fails differently: MemoryError)."""
    env = {
        **os.environ,
        "LITTLE_WORLD": str(tmp_path / "world"),
        "LITTLE_REDIS_URL": "redis://127.0.0.1:1/0",
        "LITTLE_BROKER_CONNECTION_MAX_RETRIES": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    prefix = [] if memory is None else ["prlimit", f"--as={memory}", "--"]
    argv = [*prefix, sys.executable, "-m", "little_dist.cli", *args]
    return subprocess.run(
        [os.fsencode(a) for a in argv],
        input=stdin if isinstance(stdin, bytes) else None,
        stdin=stdin if isinstance(stdin, int) else None,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )


def one_line_error(result: subprocess.CompletedProcess[bytes], code: int = 2) -> str:
    """The one line ``result`` printed on stderr, after checking it failed with ``code`` and
    printed no traceback and nothing on stdout."""
    stderr = result.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, stderr
    assert result.returncode == code, (result.returncode, stderr)
    assert result.stdout == b"", result.stdout
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# --- arguments that are not UTF-8 ---------------------------------------------------------------


def _value_arguments() -> Iterator[tuple[list[str], argparse.Action, list[argparse.Action]]]:
    """``(command path, action, the command's actions)`` for every argument that takes a
    value, of every subcommand."""
    pending: list[tuple[list[str], argparse.ArgumentParser]] = [([], build_parser())]
    while pending:
        path, parser = pending.pop()
        actions = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
        for action in actions:
            if isinstance(action, argparse._SubParsersAction):
                pending += [([*path, name], sub) for name, sub in action.choices.items()]
            elif path and action.nargs != 0:
                yield path, action, actions


def _placeholder(action: argparse.Action) -> str:
    if action.choices is not None:
        return str(next(iter(action.choices)))
    return "1" if action.type is not None else "x"


def _argv(path: list[str], tested: argparse.Action, actions: list[argparse.Action]) -> list[str]:
    """The command line of ``path`` with every required argument, ``tested`` set to
    :data:`NOT_UTF8`."""
    argv = list(path)
    for action in actions:
        if isinstance(action, argparse._SubParsersAction) or action.nargs == 0:
            continue
        value = NOT_UTF8 if action is tested else _placeholder(action)
        if action.option_strings:
            if action is tested or action.required:
                argv += [action.option_strings[0], value]
        elif action is tested or action.nargs not in ("?",):
            argv.append(value)
    return argv


def _name(action: argparse.Action) -> str:
    if action.option_strings:
        return max(action.option_strings, key=len)
    return str(action.metavar or action.dest)


ARGUMENTS = sorted(
    (
        pytest.param(
            _argv(path, action, actions), _name(action), id=f"{' '.join(path)} {_name(action)}"
        )
        for path, action, actions in _value_arguments()
    ),
    key=lambda param: str(param.id),
)


def test_every_subcommand_has_its_arguments_tried() -> None:
    commands = {tuple(param.values[0][:2]) for param in ARGUMENTS}  # type: ignore[index]
    assert ("validate", NOT_UTF8) in commands and ("memory", "put") in commands
    assert len({param.values[0][0] for param in ARGUMENTS}) >= 14  # type: ignore[index]


@pytest.mark.parametrize(("argv", "name"), ARGUMENTS)
def test_an_argument_that_is_not_utf8_is_a_one_line_error_naming_it(
    tmp_path: Path, argv: list[str], name: str
) -> None:
    line = one_line_error(little(argv, tmp_path))
    assert line.startswith(f"little {argv[0]}"), line
    assert name in line, line
    assert not (tmp_path / "world").exists()  # nothing stored, not even an empty world
