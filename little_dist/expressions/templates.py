"""Template strings: text with ``{{ ... }}`` placeholders, compiled once into a
:class:`Template` (text, one whole expression, embedded expressions, or malformed)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from little_dist.expressions.jsvalues import JS_WHITESPACE
from little_dist.expressions.nodes import Expression
from little_dist.expressions.parser import CACHE_MAX_LENGTH, parse_expression

__all__ = ["Placeholder", "Template", "parse_template"]


@dataclass(frozen=True, slots=True)
class Placeholder:
    """One ``{{ body }}`` inside a template; ``offset`` is where its ``{{`` starts."""

    expression: Expression
    offset: int


@dataclass(frozen=True, slots=True)
class Template:
    """A compiled template string.

    ``kind`` is ``"text"`` (no delimiters: the string itself), ``"whole"`` (exactly one
    expression and only whitespace around it: the typed value of ``pieces[0]``),
    ``"embedded"`` (text and placeholders joined as a string) or ``"malformed"`` (unequal
    ``{{``/``}}`` counts; ``message`` says so).
    """

    kind: str
    pieces: tuple[str | Placeholder, ...] = ()
    message: str = ""


_WS_CLASS = f"[{JS_WHITESPACE}]"
# Upstream: /^\s*\{\{\s*([^{}]+?)\s*\}\}\s*$/u and /\{\{\s*([^{}]+?)\s*\}\}/gu. The bodies are
# trimmed afterwards, so matching the whole brace-free run is equivalent and cannot backtrack.
_WHOLE = re.compile(rf"\A{_WS_CLASS}*\{{\{{([^{{}}]+)\}}\}}{_WS_CLASS}*\Z")
_EMBEDDED = re.compile(r"\{\{([^{}]+)\}\}")


def parse_template(template: str) -> Template:
    """Compile a template string once (cached); evaluation then only walks the result."""
    if len(template) > CACHE_MAX_LENGTH:
        return _compile_template(template)
    return _compile_template_cached(template)


def _compile_template(template: str) -> Template:
    whole = _WHOLE.match(template)
    if whole is not None:
        return Template(
            "whole", (Placeholder(parse_expression(whole.group(1)), whole.start(1) - 2),)
        )
    if "{{" not in template and "}}" not in template:
        return Template("text", (template,))
    if template.count("{{") != template.count("}}"):
        return Template("malformed", message=f"Malformed embedded expression: {template}")
    pieces: list[str | Placeholder] = []
    last = 0
    for match in _EMBEDDED.finditer(template):
        if match.start() > last:
            pieces.append(template[last : match.start()])
        pieces.append(Placeholder(parse_expression(match.group(1)), match.start()))
        last = match.end()
    if last < len(template):
        pieces.append(template[last:])
    return Template("embedded", tuple(pieces))


_compile_template_cached = lru_cache(maxsize=4096)(_compile_template)
