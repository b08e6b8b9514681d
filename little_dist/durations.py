"""Durations as people write them (``'30s'``, ``'10m'``, ``'1h30m'``, ``'1500ms'``), in ms.

Shared by a run's ``timeout`` (:mod:`little_dist.run_limits`) and a permission rule's
approval ``timeout`` (:mod:`little_dist.permissions`), which live in sibling layers: the
parser sits below both so that they read the same strings alike. Pure.
"""

from __future__ import annotations

import math
import re
from typing import Final

from little_dist.errors import InvalidInputError

__all__ = ["duration_ms", "is_duration"]

_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART: Final = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_WHOLE: Final = re.compile(r"\s*(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d)\s*)+")


def duration_ms(text: str, where: str, name: str) -> int:
    """A duration string (``'10m'``, ``'2h'``, ``'1h30m'``, ``'45s'``, ``'1500ms'``) in ms."""
    if not _WHOLE.fullmatch(text):
        raise InvalidInputError(
            f"{where}: {name} must be a duration such as '30s', '10m' or '2h', got {text!r}"
        )
    total = sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(text))
    if total <= 0:
        raise InvalidInputError(f"{where}: {name} must be longer than zero, got {text!r}")
    return math.ceil(total)


def is_duration(text: str) -> bool:
    """Whether ``text`` reads as a duration (:func:`duration_ms` would take it)."""
    return _WHOLE.fullmatch(text) is not None
