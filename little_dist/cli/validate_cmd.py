"""``little validate FILE [--json]``: check an LWIR document without running it.

Exit codes: 0 valid, 1 invalid (one ``code path: message`` line per finding), 2 when the file
cannot be validated at all (unreadable, not UTF-8, not JSON, or over a limit on submitted
workflows: ``LITTLE_MAX_JSON_DEPTH``, ``LITTLE_MAX_LWIR_BYTES``, ``LITTLE_MAX_STEPS``, see
:mod:`little_dist.limits`). Every failure is one line on stderr, never a traceback.
``FILE`` may be ``-`` for standard input, and may hold a compiled WorkflowVersion (its
``lwir`` field is validated), as upstream's CLI accepts.

Only the pure core is imported, and only when the command runs, so ``little validate`` starts
in a fraction of a second and never loads litellm, celery, boto3 or redis.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from typing import Any

from little_dist.cli.json_input import read_json
from little_dist.cli.run_problems import UsageProblem, one_line

__all__ = ["register", "run"]

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2


def register(subparsers: Any, name: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help="validate an LWIR workflow file",
        description=(
            "Validate an LWIR JSON document (or a compiled WorkflowVersion with an 'lwir' "
            "field). Exit 0 when valid, 1 with one line per finding when invalid, 2 when the "
            "file cannot be read or parsed."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="LWIR JSON file, or - for standard input")
    parser.add_argument(
        "--json",
        action="store_true",
        help='print {"valid": ..., "findings": [...]} as JSON instead of text',
    )
    parser.add_argument(
        "--upstream",
        action="store_true",
        help="print upstream's output byte for byte: JSON.stringify of validateLwir's result "
        "(every finding; valid only with none), one line",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    _tolerant_stdout()
    from little_dist.limits import InputLimitError
    from little_dist.settings import SettingsError, load_limits

    label = "<stdin>" if args.file == "-" else args.file
    try:
        limits = load_limits()
        document = read_json(
            args.file,
            label,
            limits.max_json_depth,
            max_bytes=limits.max_lwir_bytes,
            setting="LITTLE_MAX_LWIR_BYTES",
        )
        # lwirDocumentFrom: a compiled WorkflowVersion carries its LWIR under "lwir".
        if isinstance(document, dict) and "lwir" in document:
            document = document["lwir"]
        limits.check_lwir(document, label)
    except UsageProblem as exc:
        return _fail(str(exc))
    except SettingsError as exc:
        return _fail("; ".join(exc.problems))
    except InputLimitError as exc:
        return _fail(str(exc))
    try:
        from little_dist.lwir import validate_lwir

        every = validate_lwir(document)
        findings = [f for f in every if f.severity == "error"]
        identity = None if findings else _identity(document)
    except RecursionError:
        return _fail(f"{label}: document is nested too deeply to validate")
    except Exception as exc:  # a validator bug must still not print a traceback
        return _fail(f"{label}: internal error while validating: {type(exc).__name__}: {exc}")
    if args.upstream:
        from little_dist.canonical import js_stringify

        # upstream's `little validate`: writeJsonLine(validateLwir(document))
        _print(js_stringify({"valid": not every, "findings": [f.to_json() for f in every]}))
        return EXIT_INVALID if every else EXIT_VALID
    if args.json:
        report: dict[str, Any] = {
            "valid": not findings,
            "findings": [finding.to_json() for finding in findings],
        }
        if identity is not None:
            report.update(identity)
        _print(json.dumps(report))
    elif findings:
        for finding in findings:
            _print(one_line(f"{finding.code} {finding.path}: {finding.message}"))
        noun = "finding" if len(findings) == 1 else "findings"
        print(f"little validate: {label}: invalid, {len(findings)} {noun}", file=sys.stderr)
    else:
        assert identity is not None
        steps = identity["steps"]
        _print(
            one_line(
                f"valid: {identity['name']} — {steps} step{'' if steps == 1 else 's'}, "
                f"{identity['lwirVersionId']}"
            )
        )
    return EXIT_INVALID if findings else EXIT_VALID


def _identity(document: Any) -> dict[str, Any]:
    """Name, top-level step count and the LWIR's content id of a valid document."""
    from little_dist.canonical import sha256_digest
    from little_dist.ids import workflow_version_id_for

    lwir_hash = sha256_digest(document)
    return {
        "name": document["metadata"]["name"],
        "steps": len(document["steps"]),
        "lwirVersionId": workflow_version_id_for(lwir_hash),
        "lwirHash": lwir_hash,
    }


def _print(text: str) -> None:
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # `little validate ... | head` closed the pipe: not an error. Point stdout at devnull
        # so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _fail(message: str) -> int:
    print(f"little validate: {one_line(message)}", file=sys.stderr)
    return EXIT_UNREADABLE


def _tolerant_stdout() -> None:
    # Names and messages may hold any character; a narrow terminal encoding must not crash.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
