"""Running a planned version on another input: upstream's ``WorkflowVersionReusePolicy``
(``workflow-version-reuse.ts``): ``never`` (the default: no reuse), ``exact`` (the very input
it was planned for), ``structure`` (an input of the same structure: same fields and kinds;
an array a top-level parallel step fans out over may change length up to its
``maxBranches``; what the orchestrator's ``run_workflow`` uses) or ``any``.
:func:`check_version_input` raises upstream's errors."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.compiler.lock import concrete_input_structure
from little_dist.errors import InvalidInputError

if TYPE_CHECKING:
    from little_dist.compiler import WorkflowVersion

__all__ = [
    "REUSE_POLICIES",
    "VersionReuseError",
    "check_version_input",
    "input_structure_compatible",
]

REUSE_POLICIES = ("never", "exact", "structure", "any")


class VersionReuseError(InvalidInputError):
    """A version may not run this input under the reuse policy (upstream's message)."""


def check_version_input(version: WorkflowVersion, policy: str, run_input: Any) -> None:
    """Upstream's ``assertWorkflowVersionInputCompatible`` for ``version``'s lock."""
    lock = version.lock
    if policy == "never":
        raise VersionReuseError("WorkflowVersion reuse is disabled.")
    if policy == "exact":
        if sha256_digest(run_input) != lock.get("inputHash"):
            raise VersionReuseError("WorkflowVersion planned input hash does not match run input.")
        return
    if policy == "structure":
        planned = lock.get("plannedInputStructure")
        if not isinstance(planned, Mapping) or not input_structure_compatible(
            planned, run_input, _adaptive_array_paths(version.lwir)
        ):
            raise VersionReuseError(
                "WorkflowVersion planned input structure does not match run input."
            )
        return
    if policy != "any":
        raise VersionReuseError(f'Unknown WorkflowVersion reuse policy "{policy}".')


_ITEMS_FROM_INPUT = re.compile(r"^\{\{\s*input((?:\.[A-Za-z_$][A-Za-z0-9_$-]*)*)\s*\}\}$")


def _adaptive_array_paths(lwir: Mapping[str, Any]) -> list[tuple[tuple[str, ...], int]]:
    """``(input path, maxBranches)`` of each top-level parallel step fanning out over an
    input array (``items: "{{ input.candidates }}"``): those arrays may change length."""
    found: list[tuple[tuple[str, ...], int]] = []
    for step in lwir.get("steps", []):
        if not isinstance(step, Mapping) or step.get("uses") != "parallel":
            continue
        config = step.get("with")
        items = config.get("items") if isinstance(config, Mapping) else None
        match = _ITEMS_FROM_INPUT.match(items) if isinstance(items, str) else None
        if match is None:
            continue
        branches = config.get("maxBranches") if isinstance(config, Mapping) else None
        limit = branches if isinstance(branches, int) and not isinstance(branches, bool) else 0
        path = tuple(part for part in match.group(1).split(".") if part)
        found.append((path, limit))
    return found


def input_structure_compatible(
    planned: Mapping[str, Any],
    run_input: Any,
    adaptive: Sequence[tuple[tuple[str, ...], int]] = (),
) -> bool:
    """Upstream's ``structure`` reuse rule: ``run_input`` has the planned input's structure;
    arrays at an adaptive path may hold any number of items up to its ``maxBranches``."""
    run_structure = concrete_input_structure(run_input)
    if not adaptive:
        return canonical_json(run_structure) == canonical_json(planned)
    return _compatible(planned, run_structure, run_input, adaptive, ())


def _compatible(
    planned: Mapping[str, Any],
    run: Mapping[str, Any],
    run_input: Any,
    adaptive: Sequence[tuple[tuple[str, ...], int]],
    path: tuple[str, ...],
) -> bool:
    if planned.get("kind") != run.get("kind"):
        return False
    kind = planned["kind"]
    if kind == "array":
        same_elements = canonical_json(planned["elements"]) == canonical_json(run["elements"])
        limits = [limit for at, limit in adaptive if at == path]
        if limits:
            length = _array_length_at(run_input, path)
            return length is not None and length <= min(limits) and same_elements
        return planned["length"] == run["length"] and same_elements
    if kind == "object":
        planned_fields, run_fields = planned["fields"], run["fields"]
        if len(planned_fields) != len(run_fields):
            return False
        return all(
            planned_key == run_key
            and _compatible(planned_value, run_value, run_input, adaptive, (*path, planned_key))
            for (planned_key, planned_value), (run_key, run_value) in zip(
                planned_fields, run_fields, strict=True
            )
        )
    return True


def _array_length_at(value: Any, path: tuple[str, ...]) -> int | None:
    for part in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return len(value) if isinstance(value, list) else None
