"""Reading ``little run``'s JSON: a file, standard input (``-``) or inline JSON, with a
one-line reason for anything unreadable (no NaN/Infinity: they are not JSON).

A value nested deeper than ``max_depth`` (``LITTLE_MAX_JSON_DEPTH``) raises
:class:`~little_dist.limits.InputLimitError` naming the limit, the parser's own recursion
limit included.

Files and standard input are read with a bound (:mod:`little_dist.bounded_read`): at most
:data:`FILE_SLACK` times the limit on the JSON they hold (``LITTLE_MAX_INPUT_BYTES`` for an
input, ``LITTLE_MAX_LWIR_BYTES`` for a workflow), room for whitespace and escapes; the JSON
itself is checked against the limit once parsed. More is an :class:`InputLimitError` naming
the bound; a path that is not a regular file (a FIFO, a device such as ``/dev/zero``, a
directory) is a :class:`UsageProblem`, unread.
"""

from __future__ import annotations

import json
import os
from typing import Any, Final

from little_dist.bounded_read import ReadRefusedError, ReadTooLargeError, read_file, read_stdin
from little_dist.cli.run_problems import UsageProblem, one_line
from little_dist.limits import (
    DEFAULT_MAX_INPUT_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    InputLimitError,
    loads_bounded,
)

__all__ = ["FILE_SLACK", "read_bounded", "read_input", "read_json"]

#: How many times the limit on its JSON a file (or standard input) may be, to be read.
FILE_SLACK: Final = 4
INPUT_SETTING: Final = "LITTLE_MAX_INPUT_BYTES"


def read_input(
    value: str | None,
    max_depth: int = DEFAULT_MAX_JSON_DEPTH,
    max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
) -> Any:
    """``--input``: a JSON file, ``-`` (standard input) or inline JSON; ``{}`` when not given.
    ``max_bytes`` is ``LITTLE_MAX_INPUT_BYTES`` (the file's bound, see the module docstring)."""
    if value is None:
        return {}
    if value == "-" or os.path.exists(value):
        label = "<stdin>" if value == "-" else value
        return read_json(value, label, max_depth, max_bytes=max_bytes, setting=INPUT_SETTING)
    stripped = value.strip()
    if not (stripped[:1] in ("{", "[", '"', "-") or stripped[:1].isdigit()) and stripped not in (
        "true",
        "false",
        "null",
    ):
        raise UsageProblem(f"--input: cannot read {value}: no such file (nor is it inline JSON)")
    try:
        return loads_bounded(value, max_depth, "--input", parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise UsageProblem(
            f"--input: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise UsageProblem(f"--input: invalid JSON: {one_line(str(exc))}") from None


def read_json(
    path: str,
    label: str,
    max_depth: int = DEFAULT_MAX_JSON_DEPTH,
    *,
    max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    setting: str = INPUT_SETTING,
) -> Any:
    """The JSON in file ``path`` (``-``: standard input), named ``label`` in messages; read
    up to :data:`FILE_SLACK` times ``max_bytes``, the limit ``setting`` sets."""
    raw = read_bounded(path, label, max_bytes, setting)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageProblem(
            f"{label}: not UTF-8 text (invalid byte at offset {exc.start})"
        ) from None
    if not text.strip():
        raise UsageProblem(f"{label}: invalid JSON: the file is empty")
    try:
        return loads_bounded(text, max_depth, label, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise UsageProblem(
            f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:
        raise UsageProblem(f"{label}: invalid JSON: {one_line(str(exc))}") from None


def read_bounded(path: str, label: str, max_bytes: int, setting: str) -> bytes:
    """The bytes of file ``path`` (``-``: standard input) holding JSON whose limit is
    ``max_bytes`` (set by ``setting``): :class:`InputLimitError` past :data:`FILE_SLACK`
    times that, :class:`UsageProblem` for a path that cannot be read or is not a file."""
    bound = FILE_SLACK * max_bytes
    why = f"{FILE_SLACK} × {setting}={max_bytes:,}"
    try:
        if path == "-":
            return read_stdin(bound, label=label, why=why)
        return read_file(
            path, bound, label=label, why=why, stream_hint="give - to read standard input"
        )
    except ReadTooLargeError as exc:
        raise InputLimitError(str(exc), setting) from None
    except ReadRefusedError as exc:
        raise UsageProblem(str(exc)) from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
