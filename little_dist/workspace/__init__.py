"""Workflows as folders in a project (upstream's ``workspace/``): how ``little run FOLDER``,
``little test`` and ``little init`` / ``little add workflow`` find, load and make them.

A project is a folder with ``little-workflow.json`` (:data:`MANIFEST`), which names its
workflows: ``{"workflows": {"candidate-review": "./workflows/candidate-review"}}``. A
workflow folder holds:

* ``workflow.py``: defines the workflow with ``define_workflow`` (the module's ``workflow``
  attribute, or the only definition it makes);
* ``instructions.md`` (optional): the planner's instructions, when the definition gives none;
* ``tools/NAME.py`` (optional): one tool each, named after its file (the module's ``NAME``
  attribute, a ``@tool`` or a typed function, or the one tool it defines);
* ``skills/NAME/SKILL.md`` (optional): folder skills for its models.

:func:`load_workflow` reads a folder into one definition (the definition's own tools,
skills and instructions first, then the folder's); :func:`resolve_workflow_reference` turns
what a command is given (a folder, or a name in the nearest ``little-workflow.json``) into a
folder; :mod:`.scaffold` makes projects and workflow folders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from little_dist.workspace.reference import MANIFEST, find_manifest, resolve_workflow_reference

if TYPE_CHECKING:
    from little_dist.workspace.loading import WorkflowFolderError, load_workflow

__all__ = [
    "MANIFEST",
    "WorkflowFolderError",
    "find_manifest",
    "load_workflow",
    "resolve_workflow_reference",
]


def __getattr__(name: str) -> Any:
    # The loader imports the authoring layer; the CLI's parser (little init, little add)
    # needs only the scaffold and must start without it.
    if name in ("load_workflow", "WorkflowFolderError"):
        from little_dist.workspace import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'little_dist.workspace' has no attribute {name!r}")
