"""Why ``little run`` stops before running: a usage problem (exit 2) or an invalid
workflow or input (exit 1), each with one-line messages."""

from __future__ import annotations

from collections.abc import Iterable

from little_dist.redaction import redact

__all__ = ["InvalidWorkflowOrInput", "UsageProblem", "one_line"]


class UsageProblem(Exception):
    """The command cannot start; the message is the one-line reason (exit 2)."""


class InvalidWorkflowOrInput(Exception):
    """The workflow or the input is invalid; ``lines`` are the findings (exit 1)."""

    def __init__(self, summary: str, lines: Iterable[str] = ()) -> None:
        super().__init__(summary)
        self.lines = list(lines)


def one_line(text: str) -> str:
    """``text`` on one line, without credentials (it is an error message to print)."""
    return " ".join(redact(text).split())
