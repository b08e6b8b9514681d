"""Loading skills from the file system, and upstream's precedence between their sources.

A skill is a folder holding ``SKILL.md`` (and any files beside it: references, scripts,
examples) or a single ``.md`` file (upstream's single-file shorthand). Its files are read
once, when the workflow is defined, into the :class:`~little_dist.harness.types.SkillDescriptor`
(relative path -> bytes, with their content hash): the run uses what was read then, whatever
happens to the folder afterwards. Only regular files are read (a symlink is skipped, as
upstream's directory walk skips it, and so is anything else that is not a regular file); at
most :data:`MAX_SKILL_FILES` files and :data:`MAX_SKILL_BYTES` bytes per skill, each file read
with what is left of that bound (:mod:`little_dist.bounded_read`), never more.

The folder's name (a file's name without ``.md``) must be the skill's front-matter ``name``:
upstream's documented rule, checked here so that the folder a reader opens is the skill the
model is told about.

Sources and precedence (upstream's ``resolveSkills``):

1. **workflow** skills, declared with :func:`~little_dist.skill` (folder, file or inline
   text); a name declared twice is an error;
2. **org** skills: every folder or ``.md`` file in ``org_skills`` (a folder); a name twice
   is an error; a workflow skill of the same name wins (logged as a warning: upstream's
   ``workflow_overrides_org_skill``);
3. **discovered** skills: the entries of each ``discover`` folder name (``.agents/skills``)
   in the base folder and each parent up to the git root (a folder holding ``.git``) or the
   file system root; the nearest wins a name; entries that are not valid skills are skipped
   (those folders may hold other things), but an unsafe name is an error. They fill in only
   names no workflow or org skill has.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from little_dist.bounded_read import ReadRefusedError, ReadTooLargeError, read_file
from little_dist.canonical import sha256_digest
from little_dist.skills.descriptor import SkillDescriptor
from little_dist.skills.frontmatter import SkillError, SkillNameError, parse_front_matter

__all__ = [
    "MAX_SKILL_BYTES",
    "MAX_SKILL_FILES",
    "choose_skills",
    "discover_skills",
    "load_skill",
    "org_skills",
]

MAX_SKILL_FILES: Final = 1000
MAX_SKILL_BYTES: Final = 16 * 1024 * 1024
SKILL_FILE: Final = "SKILL.md"

_log = logging.getLogger("little_dist.skills")


def _read_tree(root: Path) -> list[tuple[str, bytes]]:
    files: list[tuple[str, bytes]] = []
    total = 0
    pending = [root]
    too_much = SkillError(
        f"skill folder {root}: more than {MAX_SKILL_FILES} files or {MAX_SKILL_BYTES} bytes"
    )
    while pending:
        folder = pending.pop()
        for entry in sorted(folder.iterdir(), key=lambda item: item.name):
            if entry.is_symlink():
                continue
            if entry.is_dir():
                pending.append(entry)
            elif entry.is_file():
                try:
                    data = read_file(entry, MAX_SKILL_BYTES - total)
                except ReadTooLargeError:
                    raise too_much from None
                except ReadRefusedError as error:  # (replaced meanwhile by a FIFO, say)
                    raise SkillError(f"skill folder {root}: {error}") from None
                total += len(data)
                files.append((entry.relative_to(root).as_posix(), data))
                if len(files) > MAX_SKILL_FILES:
                    raise too_much
    return sorted(files)


def _read_single(path: Path) -> bytes:
    try:
        return read_file(path, MAX_SKILL_BYTES)
    except ReadTooLargeError:
        raise SkillError(f"skill file {path}: more than {MAX_SKILL_BYTES} bytes") from None
    except ReadRefusedError as error:
        raise SkillError(str(error)) from None


def content_hash(files: Iterable[tuple[str, bytes]]) -> str:
    """Digest of the skill's files: each relative path with its bytes' sha256."""
    return sha256_digest(
        [[path, "sha256:" + hashlib.sha256(data).hexdigest()] for path, data in sorted(files)]
    )


def load_skill(source: Path, origin: str = "workflow") -> SkillDescriptor:
    """The skill in folder or ``.md`` file ``source`` (:class:`SkillError` naming the file
    when it is not one)."""
    path = Path(source)
    if path.is_dir():
        body_path = path / SKILL_FILE
        if not body_path.is_file():
            raise SkillError(f"skill folder {path}: it must contain {SKILL_FILE}")
        files = _read_tree(path)
        expected = path.resolve().name
    elif path.is_file() and path.suffix == ".md":
        body_path = path
        files = [(SKILL_FILE, _read_single(path))]
        expected = path.stem
    elif path.exists():
        raise SkillError(f"skill source {path}: must be a folder or a .md file")
    else:
        raise SkillError(f"skill source {path}: does not exist")
    data = dict(files)[SKILL_FILE]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SkillError(f"{body_path}: not UTF-8 text") from error
    front = parse_front_matter(text, str(body_path))
    if front.name != expected:
        raise SkillError(
            f"{body_path}: the front matter names the skill {front.name!r} but its "
            f"{'folder' if path.is_dir() else 'file'} is {expected!r} (they must match)"
        )
    return SkillDescriptor(
        name=front.name,
        description=front.description,
        allowed_tools=front.allowed_tools,
        files=tuple(files),
        content_hash=content_hash(files),
        frontmatter_hash=front.frontmatter_hash,
        origin=origin,
        source=str(path.resolve()),
    )


def _entries(folder: Path) -> list[Path]:
    return [
        entry
        for entry in sorted(folder.iterdir(), key=lambda item: item.name)
        if not entry.name.startswith(".")
        and (entry.is_dir() or (entry.is_file() and entry.suffix == ".md"))
    ]


def org_skills(folder: Path | None) -> list[SkillDescriptor]:
    """Every skill in the org skills folder (none when it does not exist)."""
    if folder is None or not Path(folder).is_dir():
        return []
    return [load_skill(entry, "org") for entry in _entries(Path(folder))]


def discover_skills(base: Path, names: Sequence[str]) -> list[SkillDescriptor]:
    """Skills in the ``names`` folders of ``base`` and its parents (module docstring)."""
    if not names:
        return []
    found: dict[str, SkillDescriptor] = {}
    current = Path(base).resolve()
    while True:
        for name in names:
            folder = current / name
            if not folder.is_dir():
                continue
            for entry in _entries(folder):
                try:
                    loaded = load_skill(entry, "discovered")
                except SkillNameError:
                    raise  # an unsafe name never reaches a prompt or a mount path
                except SkillError:
                    continue  # not a skill: those folders may hold other things
                found.setdefault(loaded.name, loaded)
        if (current / ".git").exists() or current.parent == current:
            return list(found.values())
        current = current.parent


def _unique(skills: Sequence[SkillDescriptor], what: str) -> None:
    seen: set[str] = set()
    for item in skills:
        if item.name in seen:
            raise SkillError(f"skill name {item.name!r} declared twice in {what}")
        seen.add(item.name)


def choose_skills(
    workflow: Sequence[SkillDescriptor],
    org: Sequence[SkillDescriptor] = (),
    discovered: Sequence[SkillDescriptor] = (),
) -> tuple[SkillDescriptor, ...]:
    """The skills a workflow's roles get, by upstream's precedence (module docstring)."""
    _unique(workflow, "the workflow's skills")
    _unique(org, "the org skills")
    names = {item.name for item in workflow}
    for item in org:
        if item.name in names:
            _log.warning(
                "Skill %r from workflow overrides org-level skill of same name.", item.name
            )
    chosen = [*workflow, *(item for item in org if item.name not in names)]
    taken = {item.name for item in chosen}
    chosen.extend(item for item in discovered if item.name not in taken)
    return tuple(chosen)
