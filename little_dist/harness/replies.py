"""The JSON value in a model's reply: one reader for every caller that asks a model for JSON.

An ``ai.generate`` step's structured output
(:func:`~little_dist.harness.output_modes.parse_output`), the planner's LWIR draft
(:mod:`little_dist.planner.harnesses`) and the outer loop's supervisor decision
(:mod:`little_dist.outer_loop.supervisor`) all read a reply the same way: models wrap JSON
in code fences or in a sentence however they are told, and a reply that is not JSON is
handed back as text for the caller's validation to report (never an exception: a reply
nested too deeply to parse is text too).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["json_in_reply"]

# A whole reply in one code fence: "```json\n...\n```", "```\n...\n```", "```json {...}```".
_FENCE = re.compile(
    r"^\s*```(?:[A-Za-z0-9_-]*[ \t]*\n|json\b)?\s*(?P<body>.*?)\s*```\s*$", re.DOTALL
)


def json_in_reply(text: str) -> Any:
    """The JSON value ``text`` carries: the whole reply (or the body of the one code fence
    it is), else the outermost ``{...}`` or ``[...]`` inside surrounding prose; ``text``
    unchanged when none of these parses."""
    for candidate in _candidates(text):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):  # (a reply nested too deeply is not an answer)
            continue
    return text


def _candidates(text: str) -> list[str]:
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group("body").strip()
    candidates = [stripped]
    for open_char, close_char in (("{", "}"), ("[", "]")):
        start, end = stripped.find(open_char), stripped.rfind(close_char)
        if 0 <= start < end and (start, end) != (0, len(stripped) - 1):
            candidates.append(stripped[start : end + 1])
    return candidates
