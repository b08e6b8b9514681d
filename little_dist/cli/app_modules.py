"""What ``little run --app MODULE`` (and the workflow's own module) provides: tools, model
slots, harnesses and skills, as one :class:`~little_dist.runtime.Capabilities`.

The conventions are the same as :func:`little_dist.fleet.app_registry.load_registry`'s for the
fleet, but ``little run`` keeps this implementation on purpose: reusing ``load_registry``
would change what it does. The registry raises ``AppImportError`` with other messages
("cannot import app module ...") where ``little run`` reports a usage error (exit 2); it
drops a module that provides nothing where ``little run`` keeps an empty part first in the
merge (so the merged default harness, system prompt and turn limit can differ); it checks
``WORKFLOWS``, which ``little run`` ignores; and it merges skills into a tuple, not a list.
Sharing one loader means settling those differences first (a change for the lead, not a
refactoring).
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any

from little_dist.cli.run_problems import UsageProblem, one_line

__all__ = ["capabilities_of", "import_app_module", "merge_capabilities", "resolve_attribute"]


def import_app_module(name: str) -> ModuleType:
    # Like `python -m`, resolve modules from the current directory too (the `little` entry
    # point does not put it on sys.path).
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise UsageProblem(f"cannot import module {name!r}: no such module") from None
        raise UsageProblem(f"cannot import module {name!r}: {exc}") from None
    except Exception as exc:  # the module itself raised while importing
        raise UsageProblem(
            f"cannot import module {name!r}: {type(exc).__name__}: {one_line(str(exc))}"
        ) from None


def resolve_attribute(module: ModuleType, dotted: str) -> Any:
    value: Any = module
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def capabilities_of(module: ModuleType) -> Any:
    """The Capabilities a module provides (see the module docstring for the conventions)."""
    from little_dist.runtime import Capabilities
    from little_dist.tools import Tool, ToolRegistry

    found = getattr(module, "capabilities", None)
    if callable(found) and not isinstance(found, Capabilities):
        found = found()
    if isinstance(found, Capabilities):
        return found
    if found is not None:
        raise UsageProblem(
            f"{module.__name__}.capabilities is a {type(found).__name__}, not Capabilities"
        )
    tools = getattr(module, "tools", None)
    if tools is None:
        tools = [value for value in vars(module).values() if isinstance(value, Tool)]
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    return Capabilities(
        tools=registry,
        models=dict(getattr(module, "models", None) or {}),
        harnesses=dict(getattr(module, "harnesses", None) or {}),
        skills=tuple(getattr(module, "skills", None) or ()),
    )


def merge_capabilities(parts: list[Any]) -> Any:
    """One Capabilities from several (see
    :func:`little_dist.runtime.capabilities.merge_capabilities`)."""
    from little_dist.runtime.capabilities import merge_capabilities as merge

    return merge(parts)
