"""What ``--app MODULE`` gives a fleet worker: workflows and the capabilities of their runs.

A worker runs steps of any run in the world, so for each run it must find the tools, model
slots, harnesses and skills the run's workflow was defined with. The app module provides
them:

* **workflows** — an explicit ``WORKFLOWS = [...]`` list (or tuple) of
  :class:`~little_dist.authoring.WorkflowDefinition`, else every ``WorkflowDefinition`` that
  is a top-level attribute of the module; with each, the workflows its tools run as
  sub-runs (their ``sub_run_workflows``: workflow tools (``as_tool``), an
  ``orchestrator_workflow``'s tools). A run whose LWIR ``metadata.name`` is a
  workflow's id runs with that workflow's :meth:`~WorkflowDefinition.capabilities`: the
  document selects among them and may not name any other
  (:meth:`AppRegistry.check_version`, :mod:`little_dist.runtime.grants`).
* **app-wide capabilities** for runs of plain LWIR (no definition with that name), with the
  same conventions as ``little run --app``: a ``capabilities`` attribute (a
  :class:`~little_dist.runtime.Capabilities` or a function returning one), else
  ``tools``/``models``/``harnesses``/``skills`` attributes, else every
  :class:`~little_dist.tools.Tool` defined at the module's top level. With none of these an
  LWIR run gets no tools and passes its model slots to litellm as written.

``MODULE`` may be ``package.module`` or ``package.module:attribute`` (the attribute then
names one workflow or a list of them), or a folder: a workflow folder (its ``workflow.py``,
tools and skills, :func:`~little_dist.workspace.load_workflow`) or a project folder (every
workflow its ``little-workflow.json`` names). Several may be given; the first one that
defines a workflow id wins.

One workflow per id in a module: a run sent by id (``little.submit_run``) must take the
path ``little submit module:attribute`` takes, so a module whose top-level names (or whose
``WORKFLOWS``, or the workflows their tools run as sub-runs) hold two different
definitions with one id (a fixed plan and a planned one, say) is refused with
:class:`AppImportError`, naming both: list the one to serve in ``WORKFLOWS``, or name it
``module:attribute``. The same definition reached twice (a child workflow both defined at
the top level and run by a parent's tool) is one workflow.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from little_dist.authoring import WorkflowDefinition
from little_dist.compiler import WorkflowVersion
from little_dist.errors import InvalidInputError
from little_dist.runtime import Capabilities, check_grants
from little_dist.runtime.capabilities import merge_capabilities
from little_dist.tools import Tool, ToolRegistry

__all__ = ["AppImportError", "AppRegistry", "load_registry", "workflow_name_of"]


class AppImportError(InvalidInputError):
    """The ``--app`` module cannot be imported or does not hold what it should."""


def workflow_name_of(version: WorkflowVersion) -> str | None:
    """The LWIR ``metadata.name`` of ``version`` (the workflow id it was planned for)."""
    metadata = version.lwir.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True)
class AppRegistry:
    """Workflows by id and the app-wide capabilities (see the module docstring)."""

    workflows: Mapping[str, WorkflowDefinition] = field(default_factory=dict)
    default: Capabilities = field(default_factory=Capabilities)
    modules: tuple[str, ...] = ()
    _capabilities: dict[str, Capabilities] = field(default_factory=dict, repr=False)

    def get(self, workflow_id: str) -> WorkflowDefinition | None:
        """The workflow defined with ``workflow_id``, if the app has it."""
        return self.workflows.get(workflow_id)

    def capabilities_for_workflow(self, workflow_id: str | None) -> Capabilities:
        """The capabilities of runs of ``workflow_id``; the app-wide ones if unknown."""
        if workflow_id is None:
            return self.default
        found = self._capabilities.get(workflow_id)
        if found is not None:
            return found
        definition = self.workflows.get(workflow_id)
        if definition is None:
            return self.default
        # Built once per workflow: Capabilities caches its harness registry.
        capabilities = definition.capabilities()
        self._capabilities[workflow_id] = capabilities
        return capabilities

    def capabilities_for(self, version: WorkflowVersion) -> Capabilities:
        """The capabilities of a run of ``version`` (by its LWIR ``metadata.name``)."""
        return self.capabilities_for_workflow(workflow_name_of(version))

    def owner_of(self, workflow_id: str | None) -> str:
        """Who registers the capabilities of runs of ``workflow_id``, for messages."""
        if workflow_id is not None and workflow_id in self.workflows:
            return f"workflow {workflow_id!r}"
        return "the app"

    def check_version(self, version: WorkflowVersion) -> None:
        """Raise :class:`~little_dist.runtime.CapabilityError` (one line naming the step and
        the capability) when ``version`` names a tool, model slot or harness that the
        capabilities of its runs do not provide."""
        name = workflow_name_of(version)
        check_grants(version, self.capabilities_for_workflow(name), self.owner_of(name))


def _import(name: str) -> ModuleType:
    # Like `python -m`, resolve app modules from the current directory too.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise AppImportError(f"cannot import app module {name!r}: no such module") from None
        raise AppImportError(f"cannot import app module {name!r}: {exc}") from exc
    except Exception as exc:  # the module itself raised while importing
        raise AppImportError(
            f"cannot import app module {name!r}: {type(exc).__name__}: {exc}"
        ) from exc


#: A workflow found in an app module and where: ``(where, definition)``.
_Found = tuple[str, WorkflowDefinition]


def _workflows_in(value: Any, where: str) -> list[_Found]:
    if isinstance(value, WorkflowDefinition):
        return [(where, value)]
    if isinstance(value, list | tuple):
        found: list[_Found] = []
        for index, item in enumerate(value):
            if not isinstance(item, WorkflowDefinition):
                raise AppImportError(
                    f"{where}[{index}] is a {type(item).__name__}, not a workflow made with "
                    "define_workflow()"
                )
            found.append((f"{where}[{index}]", item))
        return found
    raise AppImportError(
        f"{where} is a {type(value).__name__}, not a workflow made with define_workflow() "
        "or a list of them"
    )


def _module_capabilities(module: ModuleType) -> Capabilities | None:
    found = getattr(module, "capabilities", None)
    if callable(found) and not isinstance(found, Capabilities):
        found = found()
    if isinstance(found, Capabilities):
        return found
    if found is not None:
        raise AppImportError(
            f"{module.__name__}.capabilities is a {type(found).__name__}, not Capabilities"
        )
    tools = getattr(module, "tools", None)
    if tools is None:
        tools = [value for value in vars(module).values() if isinstance(value, Tool)]
    models = getattr(module, "models", None)
    harnesses = getattr(module, "harnesses", None)
    skills = getattr(module, "skills", None)
    if not tools and not models and not harnesses and not skills:
        return None
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    return Capabilities(
        tools=registry,
        models=dict(models or {}),
        harnesses=dict(harnesses or {}),
        skills=tuple(skills or ()),
    )


def _with_tool_workflows(found: list[_Found], module: str) -> list[WorkflowDefinition]:
    """``found`` and, after each, the workflows its tools run as sub-runs (a tool's
    ``sub_run_workflows``: a workflow tool's (``as_tool``), an orchestrator's three tools'),
    and theirs: a worker runs those sub-runs' steps too (see :mod:`little_dist.subruns`).
    Two different definitions with one id are refused (see the module docstring)."""
    seen: dict[str, _Found] = {}
    pending = list(found)
    while pending:
        where, definition = pending.pop(0)
        known = seen.get(definition.id)
        if known is not None:
            if known[1] is not definition:
                raise AppImportError(_duplicate(module, definition.id, known[0], where))
            continue
        seen[definition.id] = (where, definition)
        for item in definition.tools:
            more = getattr(item, "sub_run_workflows", ())
            pending += [
                (f"a workflow tool of {where}", wf)
                for wf in more
                if isinstance(wf, WorkflowDefinition)
            ]
    return [definition for _, definition in seen.values()]


def _duplicate(module: str, workflow_id: str, first: str, second: str) -> str:
    return (
        f"app module {module!r} defines workflow {workflow_id!r} twice ({first} and {second}): "
        "a run sent by that id could take either; serve one: list it in WORKFLOWS = [...] "
        f"or name it, --app {module.partition(':')[0]}:ATTRIBUTE"
    )


def _folder_workflows(name: str) -> list[tuple[str, WorkflowDefinition]] | None:
    """The workflows of ``name`` when it is a workflow folder (a ``workflow.py``) or a project
    folder (a ``little-workflow.json``: every workflow it names); ``None`` for a module."""
    from little_dist.workspace import MANIFEST, load_workflow, resolve_workflow_reference
    from little_dist.workspace.reference import read_manifest

    if not os.path.isdir(name):
        return None
    try:
        if os.path.isfile(os.path.join(name, "workflow.py")):
            return [(name, load_workflow(name))]
        manifest = os.path.join(name, MANIFEST)
        if not os.path.isfile(manifest):
            return None
        listed = sorted(read_manifest(Path(manifest)).get("workflows", {}))
        return [
            (f"{name}:{each}", load_workflow(resolve_workflow_reference(each, name)))
            for each in listed
        ]
    except InvalidInputError as exc:
        raise AppImportError(f"app {name!r}: {exc}") from None


def load_registry(modules: str | Iterable[str] | None) -> AppRegistry:
    """Import the app module(s) and collect their workflows and capabilities.

    ``None`` or nothing gives an empty registry (LWIR runs with no tools). Raises
    :class:`AppImportError` with a one-line reason when a module cannot be used.
    """
    if modules is None:
        names: list[str] = []
    elif isinstance(modules, str):
        names = [part.strip() for part in modules.split(",") if part.strip()]
    else:
        names = [name for name in modules if name]
    workflows: dict[str, WorkflowDefinition] = {}
    parts: list[Capabilities] = []
    for name in names:
        in_folder = _folder_workflows(name)
        if in_folder is not None:  # a workflow folder, or a project: its workflows
            for definition in _with_tool_workflows(in_folder, name):
                workflows.setdefault(definition.id, definition)
            continue
        module_name, _, attribute = name.partition(":")
        module = _import(module_name)
        if attribute:
            try:
                value: Any = module
                for part in attribute.split("."):
                    value = getattr(value, part)
            except AttributeError:
                raise AppImportError(
                    f"app module {module_name!r} has no attribute {attribute!r}"
                ) from None
            found = _workflows_in(value, name)
        elif hasattr(module, "WORKFLOWS"):
            found = _workflows_in(module.WORKFLOWS, f"{module_name}.WORKFLOWS")
        else:
            found = [
                (key, value)
                for key, value in vars(module).items()
                if isinstance(value, WorkflowDefinition)
            ]
        for definition in _with_tool_workflows(found, name):
            workflows.setdefault(definition.id, definition)
        capabilities = _module_capabilities(module)
        if capabilities is not None:
            parts.append(capabilities)
    return AppRegistry(workflows=workflows, default=merge_capabilities(parts), modules=tuple(names))
