"""Reading ``little run``'s JSON: a file, standard input (``-``) or inline JSON, with a
one-line reason for anything unreadable (no NaN/Infinity: they are not JSON).

A value nested deeper than ``max_depth`` (``LITTLE_MAX_JSON_DEPTH``) raises
:class:`~little_dist.limits.InputLimitError` naming the limit, the parser's own recursion
limit included."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from little_dist.cli.run_problems import UsageProblem, one_line
from little_dist.limits import DEFAULT_MAX_JSON_DEPTH, loads_bounded

__all__ = ["read_input", "read_json"]


def read_input(value: str | None, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    if value is None:
        return {}
    if value == "-" or os.path.exists(value):
        return read_json(value, "<stdin>" if value == "-" else value, max_depth)
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


def read_json(path: str, label: str, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as handle:
                raw = handle.read()
    except IsADirectoryError:
        raise UsageProblem(f"cannot read {label}: is a directory") from None
    except FileNotFoundError:
        raise UsageProblem(f"cannot read {label}: no such file") from None
    except PermissionError:
        raise UsageProblem(f"cannot read {label}: permission denied") from None
    except OSError as exc:
        raise UsageProblem(f"cannot read {label}: {exc.strerror or exc}") from None
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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
