"""little-dist: the distributed Python engine for little-workflow workflows.

The public front door::

    from little_dist import as_tool, define_workflow, model, run_workflow, skill, tool

Names are loaded on first use, so ``import little_dist.canonical`` (or any other pure-core
module) does not drag in the authoring layer.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

__version__ = "0.1.0"

if _typing.TYPE_CHECKING:
    from little_dist.api import define_workflow, run_workflow
    from little_dist.authoring import (
        InputValidationError,
        ModelSlot,
        RunFailedError,
        RunResult,
        WorkflowDefinition,
        model,
        skill,
    )
    from little_dist.errors import InvalidInputError, LittleError
    from little_dist.fleet.client import Client
    from little_dist.outer_loop import run_outer_loop
    from little_dist.run_limits import CancelToken
    from little_dist.subruns import as_tool
    from little_dist.tools import Tool, tool

__all__ = [
    "CancelToken",
    "Client",
    "InputValidationError",
    "InvalidInputError",
    "LittleError",
    "ModelSlot",
    "RunFailedError",
    "RunResult",
    "Tool",
    "WorkflowDefinition",
    "__version__",
    "as_tool",
    "define_workflow",
    "load_workflow",
    "model",
    "run_outer_loop",
    "run_workflow",
    "skill",
    "tool",
]

_WHERE = {
    "CancelToken": "little_dist.run_limits",
    "Client": "little_dist.fleet.client",
    "InputValidationError": "little_dist.authoring",
    "ModelSlot": "little_dist.authoring",
    "RunFailedError": "little_dist.authoring",
    "RunResult": "little_dist.authoring",
    "WorkflowDefinition": "little_dist.authoring",
    "define_workflow": "little_dist.api",
    "load_workflow": "little_dist.workspace",
    "model": "little_dist.authoring",
    "run_workflow": "little_dist.api",
    "skill": "little_dist.authoring",
    "InvalidInputError": "little_dist.errors",
    "LittleError": "little_dist.errors",
    "Tool": "little_dist.tools",
    "as_tool": "little_dist.subruns",
    "run_outer_loop": "little_dist.outer_loop",
    "tool": "little_dist.tools",
}


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'little_dist' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


del annotations
