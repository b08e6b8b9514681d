"""Which memory stores a step sees, where, and how: upstream's mounts and modes (pure, no IO).

Upstream (``memory.ts``) gives a workflow's steps

* ``/mnt/memory/workflow/`` — the workflow's own store (store id ``workflow:<key>``), ``rw``
  unless the workflow's ``memory.workflow`` says ``ro`` or ``none``;
* ``/mnt/memory/org/`` — the organisation's store (``org``), ``ro`` unless ``memory.org`` says
  ``rw`` or ``none``;
* ``/mnt/memory/peer-workflows/<key>/`` — each workflow named in ``memory.attach``, read-only;

an orchestrating session ``/mnt/memory/pipeline/`` (store ``pipeline:<sha256 of the sorted
definition hashes>``, ``rw``; read-only in the sessions of the sub-runs it starts, see
:mod:`little_dist.runtime.inherited`) beside the org store read-only, and
``/mnt/memory/available-workflows/<key>/`` (read-only) for each workflow it may start.
``<key>`` is a workflow id made safe for a path: ASCII lower case, ``/ . : _`` and spaces as
``-``, anything else dropped (:func:`memory_store_key`); two ids with one key are refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError

__all__ = [
    "MEMORY_ROOT",
    "MemoryConfig",
    "MemoryMode",
    "MemoryMountSpec",
    "available_workflow_memory_mounts",
    "memory_config",
    "memory_store_key",
    "orchestrator_memory_mounts",
    "pipeline_key",
    "pipeline_memory_mounts",
    "pipeline_store_id",
    "workflow_memory_mounts",
    "workflow_store_id",
]

MemoryMode = Literal["rw", "ro"]
MEMORY_ROOT: Final = "/mnt/memory"
ORG_STORE: Final = "org"


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    """Upstream's ``MemoryConfig``: the modes of the workflow's and the org's stores
    (``"rw"``, ``"ro"`` or ``"none"``) and the workflows whose memory is attached read-only."""

    workflow: Literal["rw", "ro", "none"] = "rw"
    org: Literal["rw", "ro", "none"] = "ro"
    attach: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class MemoryMountSpec:
    """One store seen at ``mount_path`` (a folder path ending in ``/``) in ``mode``."""

    store_id: str
    mount_path: str
    mode: MemoryMode

    @property
    def target(self) -> str:
        """The mount path without its trailing slash (how the sandbox names a mount)."""
        return self.mount_path.rstrip("/")


def memory_config(value: MemoryConfig | Mapping[str, Any] | None, where: str) -> MemoryConfig:
    """A :class:`MemoryConfig` from upstream's shape (``{"workflow": "rw", "org": "ro",
    "attach": [{"id": ..., "mode": "ro"}]}``); raises :class:`InvalidInputError` naming
    ``where`` for anything else."""
    if value is None:
        return MemoryConfig()
    if isinstance(value, MemoryConfig):
        given: Mapping[str, Any] = {
            "workflow": value.workflow,
            "org": value.org,
            "attach": [{"id": item, "mode": "ro"} for item in value.attach],
        }
    elif isinstance(value, Mapping):
        given = value
    else:
        raise InvalidInputError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = sorted(set(given) - {"workflow", "org", "attach"})
    if unknown:
        raise InvalidInputError(f"{where}: unknown key(s) {', '.join(unknown)}")
    modes: dict[str, Any] = {}
    for key, default in (("workflow", "rw"), ("org", "ro")):
        mode = given.get(key, default)
        if mode not in ("rw", "ro", "none"):
            raise InvalidInputError(f"{where}.{key}: expected 'rw', 'ro' or 'none', got {mode!r}")
        modes[key] = mode
    attach = given.get("attach", [])
    if not isinstance(attach, Sequence) or isinstance(attach, str):
        raise InvalidInputError(f"{where}.attach: expected a list of {{id, mode: 'ro'}}")
    ids: list[str] = []
    for index, item in enumerate(attach):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
            raise InvalidInputError(f"{where}.attach[{index}]: expected {{id, mode: 'ro'}}")
        if item.get("mode", "ro") != "ro" or set(item) - {"id", "mode"}:
            raise InvalidInputError(f"{where}.attach[{index}]: only mode 'ro' is allowed")
        ids.append(item["id"])
    _unique_keys(ids, "attached workflow")
    return MemoryConfig(workflow=modes["workflow"], org=modes["org"], attach=tuple(ids))


def memory_store_key(workflow_id: str) -> str:
    """A workflow id as upstream keys its memory (see the module docstring)."""
    lowered = "".join(c.lower() if "A" <= c <= "Z" else c for c in workflow_id)
    out: list[str] = []
    for char in lowered:
        if char in "/.:_" or char.isspace():
            out.append("-")
        elif ("a" <= char <= "z") or ("0" <= char <= "9") or char == "-":
            out.append(char)
    key = "-".join(part for part in "".join(out).split("-") if part)
    if not key:
        raise InvalidInputError(
            f"memory store id {workflow_id!r} must contain at least one ASCII letter or number"
        )
    return key


def workflow_store_id(workflow_id: str) -> str:
    """The store id of a workflow's memory: ``workflow:<key>``."""
    return f"workflow:{memory_store_key(workflow_id)}"


def workflow_memory_mounts(workflow_id: str, config: MemoryConfig) -> list[MemoryMountSpec]:
    """What a workflow's steps see (upstream's ``workflowMemoryMounts``)."""
    mounts: list[MemoryMountSpec] = []
    if config.workflow != "none":
        mounts.append(
            MemoryMountSpec(
                workflow_store_id(workflow_id), "/mnt/memory/workflow/", config.workflow
            )
        )
    if config.org != "none":
        mounts.append(MemoryMountSpec(ORG_STORE, "/mnt/memory/org/", config.org))
    for key in sorted(_unique_keys(config.attach, "attached workflow")):
        mounts.append(
            MemoryMountSpec(f"workflow:{key}", f"/mnt/memory/peer-workflows/{key}/", "ro")
        )
    return mounts


def pipeline_key(definition_hashes: Iterable[str]) -> str:
    """Upstream's ``pipelineKeyForWorkflowDefinitions``: the digest of the sorted hashes."""
    return sha256_digest(sorted(definition_hashes))


def pipeline_store_id(definition_hashes: Iterable[str]) -> str:
    """The store id of the pipeline of workflows with ``definition_hashes``."""
    return f"pipeline:{pipeline_key(definition_hashes)}"


def pipeline_memory_mounts(
    definition_hashes: Iterable[str], *, mode: MemoryMode = "rw", include_org: bool = True
) -> list[MemoryMountSpec]:
    """An orchestrating session's pipeline store, and the org store read-only."""
    mounts = [MemoryMountSpec(pipeline_store_id(definition_hashes), "/mnt/memory/pipeline/", mode)]
    if include_org:
        mounts.append(MemoryMountSpec(ORG_STORE, "/mnt/memory/org/", "ro"))
    return mounts


def available_workflow_memory_mounts(workflow_ids: Iterable[str]) -> list[MemoryMountSpec]:
    """The memory of each workflow an orchestrator may start, read-only, sorted by key."""
    keys = sorted(_unique_keys(list(workflow_ids), "available workflow"))
    return [
        MemoryMountSpec(f"workflow:{key}", f"/mnt/memory/available-workflows/{key}/", "ro")
        for key in keys
    ]


def orchestrator_memory_mounts(
    workflows: Iterable[tuple[str, str]],
) -> list[MemoryMountSpec]:
    """What an orchestrating session over ``workflows`` (``(id, definition hash)`` pairs)
    sees, as upstream mounts it: their pipeline store ``rw`` (keyed by the definition
    hashes, so the next orchestration of the same workflows finds it), the org store
    read-only, and each workflow's own store read-only under ``available-workflows/``."""
    pairs = list(workflows)
    return [
        *pipeline_memory_mounts(definition_hash for _, definition_hash in pairs),
        *available_workflow_memory_mounts(workflow_id for workflow_id, _ in pairs),
    ]


def _unique_keys(ids: Sequence[str], label: str) -> list[str]:
    seen: set[str] = set()
    keys = []
    for workflow_id in ids:
        key = memory_store_key(workflow_id)
        if key in seen:
            raise InvalidInputError(f"duplicate {label} memory key: {key}")
        seen.add(key)
        keys.append(key)
    return keys
