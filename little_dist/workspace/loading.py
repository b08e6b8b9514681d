"""Load a workflow folder into one definition (upstream's ``loadWorkflow``).

The folder's ``workflow.py`` is imported as a module of a package made for the folder
(``little_workspace_<digest>``, whose path is the folder), so it may import its neighbours
relatively (``from .tools.lookup import lookup``); a tool module it imported itself is the
same module the folder's tools are read from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import re
import sys
import types
from pathlib import Path
from typing import Any

from little_dist.authoring import WorkflowDefinition, skill
from little_dist.errors import InvalidInputError
from little_dist.tools import Tool, ToolRegistry, tool

__all__ = ["WorkflowFolderError", "load_workflow"]

_TOOL_FILE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\.py$")


class WorkflowFolderError(InvalidInputError):
    """A workflow folder that cannot be loaded: the message names the file and why."""


def load_workflow(folder: str | Path) -> WorkflowDefinition:
    """The workflow ``folder`` defines: its ``workflow.py``'s definition, with the folder's
    ``instructions.md`` (when the definition has no ``system``), ``tools/*.py`` and
    ``skills/*/`` added (see :mod:`little_dist.workspace`). Raises
    :class:`WorkflowFolderError` naming the file at fault."""
    where = Path(folder).resolve()
    if not where.is_dir():
        raise WorkflowFolderError(f"{folder}: not a folder")
    entry = where / "workflow.py"
    if not entry.is_file():
        raise WorkflowFolderError(f"{where}: no workflow.py (the file that defines the workflow)")
    package = _package_for(where)
    module = _import(f"{package}.workflow", entry)
    definition = _definition_in(module, entry)
    tools = _merged_tools(definition, _folder_tools(where, package))
    skills = _merged_skills(definition, where / "skills")
    system = definition.system
    if system is None:
        instructions = where / "instructions.md"
        if instructions.is_file():
            text = instructions.read_text(encoding="utf-8").strip()
            system = text or None
    return dataclasses.replace(definition, tools=tools, skills=skills, system=system)


def _package_for(folder: Path) -> str:
    name = "little_workspace_" + hashlib.sha256(str(folder).encode()).hexdigest()[:16]
    if name not in sys.modules:
        package = types.ModuleType(name, f"the workflow folder {folder}")
        package.__path__ = [str(folder)]
        package.__package__ = name
        sys.modules[name] = package
    return name


def _import(name: str, path: Path) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except SyntaxError as exc:
        raise WorkflowFolderError(f"{exc.filename or path}:{exc.lineno}: {exc.msg}") from None
    except InvalidInputError as exc:
        raise WorkflowFolderError(f"{path}: {exc}") from None
    except Exception as exc:
        raise WorkflowFolderError(f"{path}: {type(exc).__name__}: {exc}") from None


def _definition_in(module: types.ModuleType, path: Path) -> WorkflowDefinition:
    named = getattr(module, "workflow", None)
    if isinstance(named, WorkflowDefinition):
        return named
    found = {id(v): v for v in vars(module).values() if isinstance(v, WorkflowDefinition)}
    if len(found) == 1:
        return next(iter(found.values()))
    if not found:
        raise WorkflowFolderError(
            f"{path}: defines no workflow (set `workflow = define_workflow(...)`)"
        )
    raise WorkflowFolderError(
        f"{path}: defines {len(found)} workflows; name the one to run `workflow`"
    )


def _folder_tools(folder: Path, package: str) -> list[Tool]:
    tools_dir = folder / "tools"
    if not tools_dir.is_dir():
        return []
    found: list[Tool] = []
    for path in sorted(tools_dir.iterdir()):
        if not path.is_file() or path.suffix != ".py" or path.name.startswith(("_", "test_")):
            continue
        if not _TOOL_FILE.fullmatch(path.name):
            raise WorkflowFolderError(
                f"{path}: a tool file's name is the tool's name: letters, digits and _ only"
            )
        found.append(_tool_in(_import(f"{package}.tools.{path.stem}", path), path))
    return found


def _tool_in(module: types.ModuleType, path: Path) -> Tool:
    name = path.stem
    value: Any = getattr(module, name, None)
    if value is None:
        defined = [v for v in vars(module).values() if isinstance(v, Tool)]
        if len(defined) != 1:
            raise WorkflowFolderError(
                f"{path}: defines no tool named {name!r} (a @tool function or a typed "
                "function of that name)"
            )
        value = defined[0]
    if not isinstance(value, Tool):
        if not callable(value):
            raise WorkflowFolderError(f"{path}: {name!r} is not a tool or a function")
        try:
            value = tool(value, name=name)
        except InvalidInputError as exc:
            raise WorkflowFolderError(f"{path}: {exc}") from None
    found: Tool = value
    if found.name != name:
        raise WorkflowFolderError(
            f"{path}: defines the tool {found.name!r}; a tool file is named after its tool "
            f"(rename the file {found.name}.py, or the tool {name!r})"
        )
    return found


def _merged_tools(definition: WorkflowDefinition, discovered: list[Tool]) -> ToolRegistry:
    merged = ToolRegistry(list(definition.tools))
    for item in discovered:
        existing = merged.get(item.name)
        if existing is None:
            merged.register(item)
        elif existing is not item and existing.fn is not item.fn:
            raise WorkflowFolderError(
                f"tool {item.name!r}: the workflow defines one and tools/{item.name}.py "
                "another; keep one"
            )
    return merged


def _merged_skills(definition: WorkflowDefinition, skills_dir: Path) -> tuple[Any, ...]:
    if not skills_dir.is_dir():
        return definition.skills
    have = {item.name for item in definition.skills}
    merged = list(definition.skills)
    for path in sorted(skills_dir.iterdir()):
        if not (path / "SKILL.md").is_file():
            continue
        try:
            found = skill(path)
        except InvalidInputError as exc:
            raise WorkflowFolderError(f"{path}: {exc}") from None
        if found.name not in have:
            have.add(found.name)
            merged.append(found)
    return tuple(merged)
