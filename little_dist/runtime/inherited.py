"""What a sub-run inherits from the session that started it, carried in its own log (pure).

Upstream passes two things from a parent's session down to the sub-runs it starts:

* the parent's permission **denies** (``inheritPermissions`` at its sub-run delegate): a
  sub-run can never call a tool its parent was denied, whatever its own rules allow;
* an orchestration's **pipeline memory store** (``pipelineWorkflowDefinitionHashes``, mode
  ``ro``): the orchestrated sub-runs' sessions see ``/mnt/memory/pipeline/`` read-only, the
  store the orchestrator writes.

Both are written into the child's ``RunStarted`` beside the parent link, as ``inherited``:
``{"permissionDenies": [rule...], "pipelineMemoryStore": "pipeline:sha256:..."}`` (each
only when there is one). Whoever runs the child's attempts — the in-process runner or any
fleet worker, the parent's process or another — reads them from the child's own log
(:attr:`~little_dist.scheduling.RunContext.inherited`), never from the parent's process, and
:func:`with_inherited` applies them to the capabilities of every attempt: the denies ahead
of the child's own rules, the pipeline store mounted read-only at ``/mnt/memory/pipeline/``
(unless the child mounts a pipeline store of its own: a child that orchestrates). Both are
therefore in the child's session manifest (``permissionsHash``, ``memoryMountsHash``): a
resumed session under other inherited rules or mounts is a capability drift.

What a parent passes (:func:`inherited_from`): every deny of its attempt's effective rules
(its own, its run's and what it inherited itself), and the pipeline store its caller names
(the orchestrator's tools) or, else, the one its own session mounts (a sub-run of an
orchestrated run whose model has bash passes the read-only store on to its children).
The parent's approver passes down in process only (:mod:`little_dist.subruns.engine`): a
callback is no fact of a log, and on the fleet an ``ask`` is denied anyway.

Malformed ``inherited`` (not what :func:`inherited_from` writes) fails the child's attempt
with ``runtime_config_error``: a child never runs with less than it was given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from little_dist.memory.layout import MemoryMountSpec
from little_dist.permissions import PermissionRule, ToolPermissions, tool_permissions
from little_dist.runtime.capabilities import RuntimeConfigError

if TYPE_CHECKING:
    from little_dist.runtime.capabilities import Capabilities

__all__ = ["INHERITED_FIELD", "PIPELINE_MOUNT", "Inherited", "inherited_from", "with_inherited"]

#: The ``RunStarted`` field (and parent-link field) that carries what a sub-run inherits.
INHERITED_FIELD: Final = "inherited"
#: Where an orchestration's pipeline store is mounted (upstream's path).
PIPELINE_MOUNT: Final = "/mnt/memory/pipeline/"
_PIPELINE_PREFIX: Final = "pipeline:"


@dataclass(frozen=True)
class Inherited:
    """A sub-run's inheritance: its parent's deny rules and the pipeline store it sees."""

    denies: tuple[PermissionRule, ...] = ()
    pipeline_store: str | None = None

    def __bool__(self) -> bool:
        return bool(self.denies) or self.pipeline_store is not None

    def to_payload(self) -> dict[str, Any]:
        """The ``inherited`` object recorded in the child's ``RunStarted``."""
        data: dict[str, Any] = {}
        if self.denies:
            data["permissionDenies"] = [rule.to_json() for rule in self.denies]
        if self.pipeline_store is not None:
            data["pipelineMemoryStore"] = self.pipeline_store
        return data

    @classmethod
    def from_payload(cls, value: Any) -> Inherited:
        """Read a recorded ``inherited`` object; :class:`RuntimeConfigError` when malformed."""
        where = f"RunStarted.{INHERITED_FIELD}"
        if not isinstance(value, Mapping):
            raise RuntimeConfigError(f"{where}: expected an object, got {type(value).__name__}")
        unknown = sorted(set(value) - {"permissionDenies", "pipelineMemoryStore"})
        if unknown:
            raise RuntimeConfigError(f"{where}: unknown field(s) {', '.join(unknown)}")
        rules = value.get("permissionDenies", [])
        if not isinstance(rules, list):
            raise RuntimeConfigError(f"{where}.permissionDenies: expected a list of rules")
        try:
            denies = tool_permissions(rules, f"{where}.permissionDenies").ruleset
        except RuntimeConfigError:
            raise
        except Exception as error:  # (InvalidInputError: a malformed rule)
            raise RuntimeConfigError(str(error)) from error
        if any(rule.action != "deny" for rule in denies):
            raise RuntimeConfigError(f"{where}.permissionDenies: only 'deny' rules pass down")
        store = value.get("pipelineMemoryStore")
        if store is not None and not (
            isinstance(store, str)
            and store.startswith(_PIPELINE_PREFIX)
            and store != _PIPELINE_PREFIX
        ):
            raise RuntimeConfigError(
                f"{where}.pipelineMemoryStore: expected 'pipeline:<key>', got {store!r}"
            )
        return cls(denies, store)


def inherited_from(
    permissions: ToolPermissions | None,
    memory_mounts: Sequence[MemoryMountSpec] = (),
    *,
    pipeline_store: str | None = None,
) -> Inherited:
    """What a parent session with ``permissions`` and ``memory_mounts`` passes to the
    sub-runs it starts (see the module docstring); ``pipeline_store``: the orchestration's,
    named by the caller (it wins over the session's own mount)."""
    denies = tuple(
        rule for rule in (permissions.ruleset if permissions else ()) if rule.action == "deny"
    )
    if pipeline_store is None:
        pipeline_store = next(
            (m.store_id for m in memory_mounts if m.mount_path == PIPELINE_MOUNT), None
        )
    return Inherited(denies, pipeline_store)


def with_inherited(capabilities: Capabilities, recorded: Any) -> Capabilities:
    """``capabilities`` of an attempt of a sub-run whose ``RunStarted`` records ``recorded``
    as its ``inherited`` (``None``: not a sub-run, or one that inherits nothing: the same
    object). Raises :class:`RuntimeConfigError` for a malformed record."""
    if recorded is None:
        return capabilities
    inherited = Inherited.from_payload(recorded)
    changes: dict[str, Any] = {}
    own = capabilities.permissions or ToolPermissions()
    # (in process the child's workflow carries its parent's denies already: not twice)
    new = tuple(rule for rule in inherited.denies if rule not in own.ruleset)
    if new:
        changes["permissions"] = ToolPermissions((*new, *own.ruleset), own.on_ask)
    mounts = capabilities.memory_mounts
    store = inherited.pipeline_store
    if store is not None and not any(m.mount_path == PIPELINE_MOUNT for m in mounts):
        changes["memory_mounts"] = (*mounts, MemoryMountSpec(store, PIPELINE_MOUNT, "ro"))
    return dataclasses.replace(capabilities, **changes) if changes else capabilities
