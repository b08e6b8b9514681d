"""Reading ``little run``'s JSON: a file, standard input (``-``) or inline JSON, with a
one-line reason for anything unreadable (no NaN/Infinity: they are not JSON)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from little_dist.cli.run_problems import UsageProblem, one_line

__all__ = ["read_input", "read_json"]


def read_input(value: str | None) -> Any:
    if value is None:
        return {}
    if value == "-" or os.path.exists(value):
        return read_json(value, "<stdin>" if value == "-" else value)
    stripped = value.strip()
    if not (stripped[:1] in ("{", "[", '"', "-") or stripped[:1].isdigit()) and stripped not in (
        "true",
        "false",
        "null",
    ):
        raise UsageProblem(f"--input: cannot read {value}: no such file (nor is it inline JSON)")
    try:
        return json.loads(value, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise UsageProblem(
            f"--input: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise UsageProblem("--input: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise UsageProblem(f"--input: invalid JSON: {one_line(str(exc))}") from None


def read_json(path: str, label: str) -> Any:
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
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise UsageProblem(
            f"{label}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise UsageProblem(f"{label}: invalid JSON: nested too deeply") from None
    except ValueError as exc:
        raise UsageProblem(f"{label}: invalid JSON: {one_line(str(exc))}") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
