"""Bad input to the ``little`` CLI, as a shell gives it: every failure is one line on stderr
naming what is wrong and where, a non-zero exit, no traceback, and nothing stored.

* Arguments that are not UTF-8 (``$'\\xff'``: Python hands them over surrogate-escaped), for
  every value-taking argument of every subcommand.
* Files and streams read with a bound: ``/dev/zero``, a FIFO or a directory where a file is
  expected; standard input (``-``) that never ends.
"""

from __future__ import annotations

import argparse
import copy
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
    args: list[str],
    tmp_path: Path,
    *,
    stdin: int | bytes | None = None,
    memory: int | None = None,
    more_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m little_dist.cli ARGS`` in ``tmp_path``, with a world there that does not
    exist yet (``LITTLE_WORLD``) and a Redis no one listens on; under ``prlimit --as`` when
    ``memory`` is given (an unbounded read then fails differently: MemoryError)."""
    env = {
        **os.environ,
        **(more_env or {}),
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
                # One of each required group of alternatives (``--cron`` or ``--every``),
                # unless the tested argument is the group's: given as if required.
                chosen = [
                    group._group_actions[0]
                    for group in parser._mutually_exclusive_groups
                    if group.required and action not in group._group_actions
                ]
                yield path, action, [*actions, *(_required(a) for a in chosen)]


def _required(action: argparse.Action) -> argparse.Action:
    """A copy of ``action`` marked required (it stands for its group of alternatives)."""
    required = copy.copy(action)
    required.required = True
    return required


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


# --- files and streams, read with a bound -------------------------------------------------------

#: Address space for a command reading bad input: far less than an unbounded read of
#: ``/dev/zero`` takes (it fails with MemoryError there), far more than a bounded one needs.
MEMORY = 1024**3
ORCHESTRATE = ["orchestrate", "--model", "scripted/boss", "--app", "tests.orchestrate_app"]
OUTER_LOOP = ["outer-loop", "tests.outer_loop_fleet_app:loop_workflow", "--max-cycles", "2"]


def _file_readers(path: str) -> list[tuple[str, list[str], int, int]]:
    """``(id, command line reading path, exit code when it is not a regular file, when it is
    too big)`` for every command that reads a file named on its command line."""
    return [
        ("validate", ["validate", path], 2, 2),
        ("run", ["run", path], 2, 1),
        ("run --input", ["run", "wf.json", "--input", path], 2, 1),
        ("submit", ["submit", path], 2, 1),
        ("submit --input", ["submit", "wf.json", "--input", path], 2, 1),
        ("memory put --from", ["memory", "put", "n.md", "--workflow", "w", "--from", path], 1, 1),
        ("orchestrate --input", [*ORCHESTRATE, "--input", path], 2, 1),
        ("outer-loop --input", [*OUTER_LOOP, "--input", path], 2, 1),
    ]


def _stream_readers() -> list[tuple[str, list[str], int]]:
    """``(id, command line reading standard input, exit code when it is too big)``."""
    return [
        ("validate -", ["validate", "-"], 2),
        ("run -", ["run", "-"], 1),
        ("run --input -", ["run", "wf.json", "--input", "-"], 1),
        ("submit --input -", ["submit", "wf.json", "--input", "-"], 1),
        ("memory put", ["memory", "put", "notes.md", "--workflow", "w"], 1),
        ("orchestrate --input -", [*ORCHESTRATE, "--input", "-"], 1),
        ("outer-loop --input -", [*OUTER_LOOP, "--input", "-"], 1),
    ]


def _with_memory(tmp_path: Path) -> dict[str, object]:
    """A world holding one memory file; what :func:`_stored` says of it now."""
    done = little(["memory", "put", "notes.md", "--workflow", "w"], tmp_path, stdin=b"kept")
    assert done.returncode == 0, done.stderr
    return _stored(tmp_path)


def _stored(tmp_path: Path) -> dict[str, object]:
    from little_dist.memory import memory_store_for
    from little_dist.world.local import LocalWorld

    world = LocalWorld(tmp_path / "world")
    try:
        store = memory_store_for(world)
        entries = store.entries("workflow:w").items()
        return {path: (entry.version, store.read("workflow:w", entry)) for path, entry in entries}
    finally:
        world.close()


def _nothing_stored(argv: list[str], tmp_path: Path, before: dict[str, object] | None) -> None:
    if argv[0] == "memory":
        assert _stored(tmp_path) == before
    else:
        assert not (tmp_path / "world").exists()


NOT_FILES = ["/dev/zero", "a FIFO", "a directory"]


@pytest.mark.parametrize("what", NOT_FILES)
@pytest.mark.parametrize(
    ("argv", "code"),
    [pytest.param(argv, code, id=name) for name, argv, code, _ in _file_readers("PATH")],
)
def test_a_path_that_is_not_a_regular_file_is_refused_unread(
    tmp_path: Path, what: str, argv: list[str], code: int
) -> None:
    path = {"/dev/zero": "/dev/zero", "a FIFO": str(tmp_path / "fifo"), "a directory": "/"}[what]
    if what == "a FIFO":
        os.mkfifo(path)  # nobody writes: opening it to read would wait forever
    before = _with_memory(tmp_path) if argv[0] == "memory" else None
    argv = [path if arg == "PATH" else arg for arg in argv]

    line = one_line_error(little(argv, tmp_path, memory=MEMORY), code)

    said = {
        "/dev/zero": "not a regular file (a character device)",
        "a FIFO": "not a regular file (a FIFO)",
        "a directory": "is a directory",
    }[what]
    if what == "a directory" and argv[0] in ("run", "submit") and argv[1] == path:
        # `little run|submit FOLDER`: a folder is a workflow folder; this one has no workflow.py
        assert f"{path}: no workflow.py" in line, line
    else:
        assert "cannot read " in line and f"{path}: {said}" in line, line
    _nothing_stored(argv, tmp_path, before)


@pytest.mark.parametrize(
    ("argv", "code"),
    [pytest.param(argv, code, id=name) for name, argv, code in _stream_readers()],
)
def test_standard_input_that_never_ends_is_read_only_up_to_the_bound(
    tmp_path: Path, argv: list[str], code: int
) -> None:
    before = _with_memory(tmp_path) if argv[0] == "memory" else None
    with open("/dev/zero", "rb") as zero:
        line = one_line_error(little(argv, tmp_path, stdin=zero.fileno(), memory=MEMORY), code)
    assert "<stdin>: more than " in line and " bytes, too big to read (" in line, line
    _nothing_stored(argv, tmp_path, before)


@pytest.mark.parametrize(
    ("argv", "code"),
    [pytest.param(argv, code, id=name) for name, argv, _, code in _file_readers("PATH")],
)
def test_a_file_over_the_bound_is_refused_from_its_size(
    tmp_path: Path, argv: list[str], code: int
) -> None:
    before = _with_memory(tmp_path) if argv[0] == "memory" else None
    big = tmp_path / "big.json"
    with big.open("wb") as file:  # sparse: 2 GiB of nothing, on no disk
        file.truncate(2 * 1024**3)
    argv = [str(big) if arg == "PATH" else arg for arg in argv]

    line = one_line_error(little(argv, tmp_path, memory=MEMORY), code)

    assert f"{big}: more than " in line and " bytes, too big to read (" in line, line
    _nothing_stored(argv, tmp_path, before)


def test_the_bound_on_a_json_file_comes_from_its_setting(tmp_path: Path) -> None:
    # Room for whitespace and escapes: four times the limit on the JSON itself.
    wide = tmp_path / "wide.json"
    wide.write_text('{"a": "' + "x" * 4100 + '"}')
    more_env = {"LITTLE_MAX_LWIR_BYTES": "1000"}
    line = one_line_error(little(["validate", str(wide)], tmp_path, more_env=more_env))
    assert line == (
        f"little validate: {wide}: more than 4,000 bytes, too big to read "
        "(4 × LITTLE_MAX_LWIR_BYTES=1,000)"
    )
