"""Ordering helpers that reproduce JavaScript's, so rows come out in upstream's order.

Upstream sorts report rows with ``a.localeCompare(b)``: ICU's root collation, which is not
code-point order. Punctuation sorts before digits and digits before letters, letters
compare without regard to case or accents first, and only then does lower case come
before upper case (``"a" < "A" < "b"``). :func:`locale_sort_key` implements those three
levels for the characters step paths are made of; it is an approximation of full UCA for
exotic scripts, exact for ASCII.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

__all__ = ["js_property_order", "locale_sort_key"]

# CLDR root order of the ASCII whitespace, punctuation and symbols (all before digits).
_ASCII_SYMBOL_ORDER = "\t\n\x0b\x0c\r _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$"
_SYMBOL_RANK = {char: rank for rank, char in enumerate(_ASCII_SYMBOL_ORDER)}

_Weight = tuple[int, int | str]


def _primary(char: str) -> _Weight | None:
    rank = _SYMBOL_RANK.get(char)
    if rank is not None:
        return (1, rank)
    if char.isdecimal():
        return (2, unicodedata.decimal(char))
    if char.isalpha():
        return (3, char.casefold())
    if unicodedata.category(char) == "Cc":
        return None  # other control characters are ignorable in ICU
    return (1, len(_ASCII_SYMBOL_ORDER) + ord(char))


def locale_sort_key(text: str) -> tuple[tuple[_Weight, ...], tuple[int, ...], tuple[int, ...]]:
    """A sort key that orders strings as ``String.prototype.localeCompare`` does."""
    primary: list[_Weight] = []
    secondary: list[int] = []
    tertiary: list[int] = []
    for char in unicodedata.normalize("NFD", text):
        if unicodedata.combining(char):
            # An accent modifies the previous letter: a secondary difference only.
            if secondary:
                secondary[-1] += 1
            continue
        weight = _primary(char)
        if weight is None:
            continue
        primary.append(weight)
        secondary.append(0)
        tertiary.append(1 if char.isupper() else 0)
    return (tuple(primary), tuple(secondary), tuple(tertiary))


_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def _is_array_index(key: str) -> bool:
    return _ARRAY_INDEX.fullmatch(key) is not None and int(key) < 2**32 - 1


def js_property_order(keys: Iterable[str]) -> list[str]:
    """Keys in the order a JS object lists them: array-index keys ascending, then insertion.

    Upstream folds per-step totals in ``Object.values(state.steps)`` order, and float sums
    depend on the order they are added in.
    """
    ordered = list(keys)
    indexes = sorted((key for key in ordered if _is_array_index(key)), key=int)
    return indexes + [key for key in ordered if not _is_array_index(key)]
