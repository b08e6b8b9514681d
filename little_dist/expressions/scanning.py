"""Cutting expression text apart as upstream's evaluator does: quote- and bracket-aware
top-level splits, the first top-level comparison, matching parentheses, quoted literals."""

from __future__ import annotations

import re

from little_dist.expressions.jsvalues import JS_WHITESPACE
from little_dist.expressions.nodes import COMPARISON_OPERATORS

__all__ = ["close_paren", "find_comparison", "read_quoted", "split_top_level", "trim"]


def trim(text: str) -> str:
    """JavaScript ``String#trim``."""
    return text.strip(JS_WHITESPACE)


_QUOTED = {
    '"': re.compile(r'"((?:\\[\s\S]|[^"\\])*)"'),
    "'": re.compile(r"'((?:\\[\s\S]|[^'\\])*)'"),
}
_BACKSLASH = re.compile(r"\\([\s\S])")
_COMPARISON_CHARS = frozenset("=!<>")


def read_quoted(text: str, index: int) -> tuple[str, int] | None:
    """A quoted literal starting at ``index``: (value, index after the closing quote)."""
    pattern = _QUOTED.get(text[index : index + 1])
    if pattern is None:
        return None
    match = pattern.match(text, index)
    if match is None:
        return None
    body = match.group(1)
    if "\\" in body:
        body = _BACKSLASH.sub(lambda escaped: escaped.group(1), body)
    return body, match.end()


def split_top_level(text: str, token: str) -> list[str]:
    """Upstream's splitTopLevelByToken: cut at ``token`` outside quotes and brackets; the text
    stays whole when brackets close more than they open."""
    if token not in text:
        return [text]
    parts: list[str] = []
    start = depth = index = 0
    quote = ""
    length = len(text)
    while index < length:
        char = text[index]
        if quote:
            if char == "\\" and index + 1 < length:
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char == '"' or char == "'":
            quote = char
        elif char == "(" or char == "[":
            depth += 1
        elif char == ")" or char == "]":
            depth -= 1
            if depth < 0:
                return [text]
        elif depth == 0 and text.startswith(token, index):
            parts.append(text[start:index])
            index += len(token)
            start = index
            continue
        index += 1
    if not parts:
        return [text]
    parts.append(text[start:])
    return parts


def find_comparison(text: str) -> tuple[int, str] | None:
    """The first top-level comparison operator: (index, operator)."""
    if _COMPARISON_CHARS.isdisjoint(text):
        return None
    depth = index = 0
    quote = ""
    length = len(text)
    while index < length:
        char = text[index]
        if quote:
            if char == "\\" and index + 1 < length:
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char == '"' or char == "'":
            quote = char
        elif char == "(" or char == "[":
            depth += 1
        elif char == ")" or char == "]":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and char in _COMPARISON_CHARS:
            for operator in COMPARISON_OPERATORS:
                if text.startswith(operator, index):
                    return index, operator
        index += 1
    return None


def close_paren(text: str, open_index: int) -> int | None:
    """Index of the ``)`` matching the ``(`` at ``open_index`` (quote-aware, ignores ``[]``)."""
    depth = 0
    quote = ""
    index = open_index
    length = len(text)
    while index < length:
        char = text[index]
        if quote:
            if char == "\\" and index + 1 < length:
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char == '"' or char == "'":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
            if depth < 0:
                return None
        index += 1
    return None
