"""Limits on what a caller submits: input and LWIR bytes, step count, nesting depth.

Checked where input enters (the fleet client and the ``little.submit_run`` task,
``little run`` / ``little submit`` / ``little validate``, :func:`~little_dist.run_workflow`)
before anything is stored, so that an oversized or deeply nested document is one
:class:`InputLimitError` naming the limit, never a ``RecursionError`` deep in a parser or a
validator, nor memory spent on it in every process that reads the run.

Nesting depth counts containers: ``1`` and ``"x"`` are 0 deep, ``[]`` and ``{}`` 1,
``[[1]]`` 2. It is measured without recursion, so a value 100,000 levels deep is refused as
cheaply as any other.

Pure: no IO, no environment. The fleet's values come from :mod:`little_dist.settings`
(``LITTLE_MAX_INPUT_BYTES``, ``LITTLE_MAX_LWIR_BYTES``, ``LITTLE_MAX_STEPS``,
``LITTLE_MAX_JSON_DEPTH``); :class:`InputLimits` holds them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from little_dist.canonical import MAX_DEPTH, canonical_json
from little_dist.errors import InvalidInputError

__all__ = [
    "DEFAULT_MAX_INPUT_BYTES",
    "DEFAULT_MAX_JSON_DEPTH",
    "DEFAULT_MAX_LWIR_BYTES",
    "DEFAULT_MAX_STEPS",
    "MAX_JSON_DEPTH_CEILING",
    "InputLimitError",
    "InputLimits",
    "check_input",
    "check_lwir",
    "count_steps",
    "deeper_than",
    "loads_bounded",
]

#: The run input is stored inline in ``RunStarted`` (and the submission event), read by every
#: process that folds the run and hashed into the version's lock; larger data belongs in an
#: artifact or a URL the workflow fetches.
DEFAULT_MAX_INPUT_BYTES: Final = 1024 * 1024
#: A 1,000-step workflow is about 300 KB of canonical JSON; every worker and scheduler
#: process keeps the compiled versions it runs in memory.
DEFAULT_MAX_LWIR_BYTES: Final = 1024 * 1024
#: Steps of a document, nested ones (a parallel step's) included. ``decide`` walks them on
#: every look at a run; planners write tens.
DEFAULT_MAX_STEPS: Final = 1000
#: Real documents and inputs nest fewer than 20 levels. At 64 every recursive reader (the
#: LWIR validator, jsonschema, canonical JSON: about two stack frames per level) stays far
#: below Python's recursion limit.
DEFAULT_MAX_JSON_DEPTH: Final = 64
#: The most ``LITTLE_MAX_JSON_DEPTH`` may be: the deepest value canonical JSON takes.
MAX_JSON_DEPTH_CEILING: Final = MAX_DEPTH


class InputLimitError(InvalidInputError):
    """Input over one of the limits; ``setting`` names the variable that sets it."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True, slots=True)
class InputLimits:
    """The limits on submitted input and LWIR (see the module docstring)."""

    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    max_lwir_bytes: int = DEFAULT_MAX_LWIR_BYTES
    max_steps: int = DEFAULT_MAX_STEPS
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH

    def check_input(self, value: Any, what: str = "the run input") -> str:
        """:func:`check_input` under these limits."""
        return check_input(value, self, what)

    def check_lwir(self, doc: Any, what: str = "the workflow") -> None:
        """:func:`check_lwir` under these limits."""
        check_lwir(doc, self, what)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (dicts, lists and tuples of anything) nests more than ``limit``
    containers deep. Walks without recursion and stops at the first level over ``limit``,
    so a cycle (infinitely deep) is found too."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    push = stack.append
    pop = stack.pop
    while stack:
        item, depth = pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        below = depth + 1
        for child in children:
            if isinstance(child, dict | list | tuple):
                push((child, below))
    return False


def _too_deep(what: str, limit: int) -> InputLimitError:
    return InputLimitError(
        f"{what} is nested more than {limit} levels deep (LITTLE_MAX_JSON_DEPTH={limit})",
        "LITTLE_MAX_JSON_DEPTH",
    )


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _too_big(what: str, size: int, limit: int, setting: str) -> InputLimitError:
    return InputLimitError(
        f"{what} is {size:,} bytes of JSON, more than {setting}={limit:,}", setting
    )


def check_input(value: Any, limits: InputLimits, what: str = "the run input") -> str:
    """The canonical JSON text of ``value``, after checking its depth, then its size.

    Raises :class:`InputLimitError` naming the limit, or
    :class:`~little_dist.canonical.NonHashableValueError` when ``value`` is not JSON.
    """
    if deeper_than(value, limits.max_json_depth):
        raise _too_deep(what, limits.max_json_depth)
    text = canonical_json(value)
    size = _utf8_size(text)
    if size > limits.max_input_bytes:
        raise _too_big(what, size, limits.max_input_bytes, "LITTLE_MAX_INPUT_BYTES")
    return text


def count_steps(doc: Any) -> int:
    """The steps of an LWIR document, nested ones (a parallel step's ``steps``) included."""
    count = 0
    pending: list[Any] = [doc.get("steps")] if isinstance(doc, Mapping) else []
    while pending:
        steps = pending.pop()
        if not isinstance(steps, list):
            continue
        for step in steps:
            if isinstance(step, Mapping):
                count += 1
                pending.append(step.get("steps"))
    return count


def check_lwir(doc: Any, limits: InputLimits, what: str = "the workflow") -> None:
    """Check an LWIR document (or anything given as one) against ``limits``: its depth, its
    size as JSON, its step count. Whether it is valid LWIR is the validator's business."""
    if deeper_than(doc, limits.max_json_depth):
        raise _too_deep(what, limits.max_json_depth)
    # The size of the JSON text (canonical JSON's, but also for a document that has no
    # canonical form: the validator names what is wrong with it).
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), skipkeys=True, default=repr)
    size = _utf8_size(text)
    if size > limits.max_lwir_bytes:
        raise _too_big(what, size, limits.max_lwir_bytes, "LITTLE_MAX_LWIR_BYTES")
    steps = count_steps(doc)
    if steps > limits.max_steps:
        raise InputLimitError(
            f"{what} has {steps:,} steps, more than LITTLE_MAX_STEPS={limits.max_steps:,}",
            "LITTLE_MAX_STEPS",
        )


def loads_bounded(text: str | bytes, max_depth: int, what: str, **options: Any) -> Any:
    """``json.loads(text, **options)``, refusing a value nested more than ``max_depth`` deep
    with :class:`InputLimitError` (the parser's own ``RecursionError`` included)."""
    try:
        value = json.loads(text, **options)
    except RecursionError:
        raise _too_deep(what, max_depth) from None
    if deeper_than(value, max_depth):
        raise _too_deep(what, max_depth)
    return value
