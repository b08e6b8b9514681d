"""The WorkflowDefinitionSnapshot: what a workflow definition is, for hashing.

``define_workflow`` (the authoring layer) builds one of these from a definition and hashes
it; the hash goes into every compiled version's lock as ``workflowDefinitionHash`` and lets an
orchestrator notice that a definition changed. The shape and the orderings are upstream's
(``workflow-definition-hash.ts``), so the same definition hashes the same on both sides:

* ``globalTools`` sorted; ``modelSlots`` de-duplicated and sorted by (id, providerId,
  modelId, description); ``memoryConfig.attached`` sorted by (id, mode). Upstream compares
  these strings by code point, which is Python's own ``str`` order.
* Schemas and prompts appear only as digests (``inputSchemaHash``, ``systemHash``, ...).

The model normalises those orders itself, so a caller may pass the parts in any order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator
from pydantic.alias_generators import to_camel

from little_dist.canonical import sha256_digest

__all__ = [
    "MemoryAttachment",
    "MemoryConfigSnapshot",
    "ModelSlotSnapshot",
    "PlannerConfigSnapshot",
    "SkillIdentity",
    "ToolIdentitySnapshot",
    "WorkerConfigSnapshot",
    "WorkflowDefinitionSnapshot",
    "global_tools_hash",
    "skills_hash",
]

MemoryMode = Literal["rw", "ro", "none"]


class _Snapshot(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    def to_json(self) -> dict[str, Any]:
        """The snapshot as upstream shapes it: camelCase keys, optional fields omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ModelSlotSnapshot(_Snapshot):
    """One model slot: its id and the provider model behind it."""

    id: str
    provider_id: str = ""
    model_id: str = ""
    description: str = ""

    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.id, self.provider_id, self.model_id, self.description)


class PlannerConfigSnapshot(_Snapshot):
    """The planner's own model slot, harness, system prompt digest and skills digest."""

    model_slot_id: str
    model_identity: ModelSlotSnapshot
    harness_id: str = "customHarness@unknown"
    system_hash: str
    skills_hash: str


class WorkerConfigSnapshot(_Snapshot):
    """The worker role's harness and skills digest."""

    harness_id: str = "customHarness@unknown"
    skills_hash: str


class MemoryAttachment(_Snapshot):
    """A memory store attached read-only."""

    id: str
    mode: Literal["ro"] = "ro"


class MemoryConfigSnapshot(_Snapshot):
    """Which memory mounts a run gets: the workflow's own, the org's, and attached ones."""

    workflow: MemoryMode = "rw"
    org: MemoryMode = "ro"
    attached: tuple[MemoryAttachment, ...] = ()

    @field_validator("attached")
    @classmethod
    def _sorted_attached(cls, value: tuple[MemoryAttachment, ...]) -> tuple[MemoryAttachment, ...]:
        return tuple(sorted(value, key=lambda item: (item.id, item.mode)))


class ToolIdentitySnapshot(_Snapshot):
    """What the planner may see of a global tool, hashed into ``globalToolsHash``.

    An unregistered name carries only ``registered: false``; a registered tool carries the
    digests of its description and schemas and its approval policy (``none``, ``required``
    or ``not_required``).
    """

    name: str
    registered: bool
    description_hash: str | None = None
    input_schema_hash: str | None = None
    output_schema_hash: str | None = None
    approval_policy: str | None = None

    @classmethod
    def for_tool(
        cls,
        name: str,
        *,
        description: str = "",
        input_schema: Any = None,
        output_schema: Any = None,
        needs_approval: bool | None = None,
    ) -> ToolIdentitySnapshot:
        """The snapshot of a registered tool from its (already normalised) schemas."""
        return cls(
            name=name,
            registered=True,
            description_hash=sha256_digest(description),
            input_schema_hash=None if input_schema is None else sha256_digest(input_schema),
            output_schema_hash=None if output_schema is None else sha256_digest(output_schema),
            approval_policy=(
                "none"
                if needs_approval is None
                else "required"
                if needs_approval
                else "not_required"
            ),
        )


class SkillIdentity(_Snapshot):
    """A skill as hashed: its name, the digest of its frontmatter, and a remote identity."""

    name: str
    frontmatter_hash: str
    remote: dict[str, Any] | None = None


def skills_hash(skills: Iterable[SkillIdentity]) -> str:
    """Digest of a skill list, independent of the order the skills were given in."""
    ordered = sorted(
        skills,
        key=lambda skill: (
            skill.name,
            skill.frontmatter_hash,
            "" if skill.remote is None else sha256_digest(skill.remote),
        ),
    )
    return sha256_digest([skill.to_json() for skill in ordered])


def global_tools_hash(tools: Iterable[ToolIdentitySnapshot]) -> str:
    """Digest of the planner-visible tool snapshots, sorted by name."""
    return sha256_digest([tool.to_json() for tool in sorted(tools, key=lambda t: t.name)])


class WorkflowDefinitionSnapshot(_Snapshot):
    """Everything about a workflow definition that changes what the planner may build.

    ``model_slots`` always ends up holding the planner's own slot too, as upstream's does.

    ``definition_hash()`` is the ``workflowDefinitionHash`` of every version compiled from it.
    """

    id: str
    description: str = ""
    input_schema_hash: str
    output_schema_hash: str
    model_slots: tuple[ModelSlotSnapshot, ...] = ()
    planner_config: PlannerConfigSnapshot
    worker_config: WorkerConfigSnapshot
    global_tools: tuple[str, ...] = ()
    global_tools_hash: str
    tool_selection: str = "planner_selected"
    memory_config: MemoryConfigSnapshot = MemoryConfigSnapshot()
    bash_config: dict[str, Any]

    @model_validator(mode="after")
    def _slots_include_planner(self) -> WorkflowDefinitionSnapshot:
        # Upstream lists the planner's own slot among the model slots, once, in sorted order.
        slots = (*self.model_slots, self.planner_config.model_identity)
        unique = {slot.sort_key(): slot for slot in slots}
        # The model is frozen; this runs once, during validation, before anyone can see it.
        object.__setattr__(self, "model_slots", tuple(unique[key] for key in sorted(unique)))
        return self

    @field_validator("global_tools")
    @classmethod
    def _sorted_tools(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(value))

    def definition_hash(self) -> str:
        """``sha256:<hex>`` of the snapshot's canonical JSON: the workflowDefinitionHash."""
        return sha256_digest(self.to_json())
