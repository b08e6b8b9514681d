"""The front matter of a ``SKILL.md``: upstream's small line parser, not a YAML library.

A skill file starts with ``---`` on its first line and the front matter ends at the next
line that starts with ``---``. Inside, upstream reads ``key: value`` lines (a value in
matching single or double quotes loses them) and ``key:`` followed by ``- item`` lines (a
list); comments and other lines are skipped. ``name`` and ``description`` are required and
non-empty; ``model`` and ``allowed-tools`` are optional. ``allowed-tools`` is a list, or one
string, which (unlike upstream, which keeps it whole) is split on commas and white space, as
the Agent Skills format writes it (``allowed-tools: lookup, search``).

``frontmatter_hash`` is upstream's: ``sha256_digest({"frontmatter": <raw text between the
markers>})``. Pure: no IO.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final

from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError

__all__ = ["FrontMatter", "SkillError", "SkillNameError", "check_skill_name", "parse_front_matter"]

_KEY_VALUE: Final = re.compile(r"^([A-Za-z0-9_-]+):(?:\s*(.*))?$")
_LIST_ITEM: Final = re.compile(r"^\s*-\s*(.+?)\s*$")
#: Upstream's ``WORKFLOW_SKILL_NAME_PATTERN``: the name is a folder name and a mount path.
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_RESERVED: Final = frozenset(
    {
        "CON",
        "PRN",
        "AUX",
        "NUL",
        *(f"COM{n}" for n in range(1, 10)),
        *(f"LPT{n}" for n in range(1, 10)),
    }
)


class SkillError(InvalidInputError):
    """A skill that cannot be loaded as given (missing ``SKILL.md``, bad front matter, a
    name that is unsafe or does not match its folder); the message names the file."""


class SkillNameError(SkillError):
    """A skill name that is unsafe in a prompt or a mount path."""


@dataclass(frozen=True)
class FrontMatter:
    """What a ``SKILL.md`` declares about itself."""

    name: str
    description: str
    model: str | None
    allowed_tools: tuple[str, ...]
    frontmatter_hash: str


def _scalar(value: str) -> str:
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1].strip()
    return text


def _fields(raw: str) -> dict[str, str | list[str]]:
    fields: dict[str, str | list[str]] = {}
    lines = raw.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _KEY_VALUE.match(line)
        if match is None:
            continue
        key, value = match.group(1), (match.group(2) or "").strip()
        if value:
            fields[key] = _scalar(value)
            continue
        items: list[str] = []
        while index < len(lines):
            item = _LIST_ITEM.match(lines[index])
            if item is None:
                break
            items.append(_scalar(item.group(1)))
            index += 1
        fields[key] = items if items else ""
    return fields


def _leading(text: str) -> str | None:
    newline = "\r\n" if text.startswith("---\r\n") else "\n"
    if not text.startswith("---" + newline):
        return None
    start = 3 + len(newline)
    end = text.find(newline + "---", start)
    return None if end == -1 else text[start:end]


def check_skill_name(name: str, where: str) -> str:
    """``name`` if it is a safe skill name (upstream's rules), else :class:`SkillError`."""
    if (
        not _NAME.fullmatch(name)
        or name.endswith(".")
        or unicodedata.normalize("NFC", name) != name
        or name.split(".")[0].upper() in _RESERVED
    ):
        raise SkillNameError(
            f"{where}: invalid skill name {name!r} (letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 128 characters)"
        )
    return name


def parse_front_matter(text: str, where: str) -> FrontMatter:
    """The front matter of skill file ``where`` (its path, for messages) holding ``text``."""
    raw = _leading(text)
    if raw is None:
        raise SkillError(f"{where}: a skill file must start with front matter between --- lines")
    fields = _fields(raw)
    values: dict[str, str] = {}
    for key in ("name", "description"):
        value = fields.get(key)
        if not isinstance(value, str) or not value.strip():
            raise SkillError(f"{where}: the front matter must give a non-empty {key!r}")
        values[key] = value.strip()
    model = fields.get("model")
    tools = fields.get("allowed-tools")
    if isinstance(tools, str):
        tools = [part for part in re.split(r"[,\s]+", tools) if part]
    return FrontMatter(
        name=check_skill_name(values["name"], where),
        description=values["description"],
        model=model.strip() if isinstance(model, str) and model.strip() else None,
        allowed_tools=tuple(item.strip() for item in tools or () if item.strip()),
        frontmatter_hash=sha256_digest({"frontmatter": raw}),
    )
