"""What a step attempt may use: tools, model slots, harnesses per role, skills."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from little_dist.errors import InvalidInputError
from little_dist.lazy import cached
from little_dist.memory.layout import MemoryMountSpec
from little_dist.sandbox.bash_capabilities import BashCapabilities
from little_dist.tools import ToolRegistry

if TYPE_CHECKING:
    from little_dist.harness.registry import HarnessRegistry
    from little_dist.harness.types import Harness, HarnessRole, ResolvedModel, SkillDescriptor
    from little_dist.permissions import ToolPermissions

__all__ = [
    "Capabilities",
    "CapabilityError",
    "RuntimeConfigError",
    "is_model_string",
    "merge_capabilities",
]


class RuntimeConfigError(InvalidInputError):
    """The runtime cannot execute a step as configured (unknown model slot, missing tool).

    Attempts that hit it fail with causeCode ``runtime_config_error``, which is not retried.
    """


class CapabilityError(RuntimeConfigError):
    """A document names a tool, model slot or harness its workflow does not register (see
    :mod:`little_dist.runtime.grants`)."""


@dataclass(frozen=True)
class Capabilities:
    """The process-side half of a run: everything the LWIR names but does not contain.

    ``models`` maps a model slot id (``with.model`` of an ``ai.generate`` step, e.g.
    ``"model.fast"``) to a litellm model string (``"openai/gpt-4o-mini"``,
    ``"scripted/demo"``) or to a :class:`~little_dist.harness.types.ResolvedModel`. Once
    ``models`` binds any slot, those are all there are (:class:`CapabilityError` for another);
    with none bound, a litellm model string naming its provider (``openai/gpt-4o-mini``) is
    passed to litellm as written, and any other slot is not registered. ``harnesses``
    replaces the default harness for some roles (a harness there may return ``DelegateToDefault``);
    ``default_harness`` replaces the built-in default itself. ``step_timeout``: seconds one
    step attempt may run before it fails with causeCode ``timeout`` (``None``: the engine's
    setting). ``bash``: the workflow's bash capabilities when it enables the bash tool
    (``define_workflow(bash=...)``; see :mod:`little_dist.harness.bash_tool`); ``None``: no
    model is offered bash. ``permissions``: the runtime tool-call rules and approver (see
    :mod:`little_dist.permissions`; ``None``: every call allowed).
    """

    tools: ToolRegistry = field(default_factory=ToolRegistry)
    models: Mapping[str, str | ResolvedModel] = field(default_factory=dict)
    harnesses: Mapping[HarnessRole, Harness] = field(default_factory=dict)
    skills: Sequence[SkillDescriptor] = ()
    default_harness: Harness | None = None
    system: str | None = None
    max_turns: int = 8
    step_timeout: float | None = None
    bash: BashCapabilities | None = None
    #: The memory stores the bash tool mounts (``define_workflow(memory=...)``; see
    #: :mod:`little_dist.memory`); none when the capabilities were not made by a workflow.
    memory_mounts: tuple[MemoryMountSpec, ...] = ()
    permissions: ToolPermissions | None = None
    #: Where the workflow tools' sub-runs start when they run elsewhere (set by a fleet
    #: worker: :class:`~little_dist.subruns.SubRunHost`); ``None``: in this process.
    sub_runs: Any = None
    #: The provider quota limiter of the attempts' model calls (set by a fleet worker: its
    #: Redis one, :func:`~little_dist.harness.quota_limiters.fleet_limiter`); ``None``: the
    #: process's own.
    quotas: Any = None
    #: Rates for models the registry lacks, for a budgeted run's reservations (the run's
    #: ``pricing_fallback``); ``None``: litellm's cost map.
    pricing_fallback: Any = None

    def offers_tool(self, name: object) -> bool:
        """Whether a document may name tool ``name`` for a model: a registered tool, or
        ``bash`` when the workflow enables it (``bash`` set)."""
        if not isinstance(name, str):
            return False
        return name in self.tools or (name == "bash" and self.bash is not None)

    def attempt_timeout(self, default: float | None) -> float | None:
        """The time limit of one attempt: ``step_timeout``, else ``default``; ``None`` (or
        0) for none."""
        chosen = self.step_timeout if self.step_timeout is not None else default
        return chosen if chosen else None

    def resolve_model(self, slot_id: str) -> ResolvedModel:
        """The concrete model behind ``slot_id``."""
        from little_dist.harness.types import ResolvedModel

        if not isinstance(slot_id, str) or not slot_id:
            raise RuntimeConfigError(f"model slot must be a non-empty string, got {slot_id!r}")
        if slot_id not in self.models and (self.models or not is_model_string(slot_id)):
            # A document selects among the slots its workflow binds; never a model of its own.
            # With none bound, only a litellm model string goes through as written.
            raise CapabilityError(
                f"model slot {slot_id!r} is not registered "
                f"(registered: {', '.join(sorted(self.models)) or 'none'})"
            )
        bound = self.models.get(slot_id, slot_id)
        if isinstance(bound, ResolvedModel):
            return bound
        if not isinstance(bound, str) or not bound:
            raise RuntimeConfigError(f"model slot {slot_id!r} is bound to {bound!r}")
        return ResolvedModel(slot_id=slot_id, litellm_model=bound)

    def harness_for(self, role: HarnessRole) -> Harness | None:
        """The custom harness for ``role``, if one was given (``None``: use the default)."""
        return self.harnesses.get(role)

    def harness_registry(self) -> HarnessRegistry:
        """The registry that runs tasks: ``harnesses`` per role over ``default_harness``.

        Built once per Capabilities (it holds no per-run state) and shared by its attempts.
        """
        return self._registry

    @cached
    def _registry(self) -> HarnessRegistry:
        from little_dist.harness.registry import HarnessRegistry

        return HarnessRegistry(default=self.default_harness, overrides=self.harnesses)

    def tools_for(self, names: Sequence[str] | None) -> dict[str, Any]:
        """Tools by name, limited to ``names`` when given (the workflow's permissions)."""
        if names is None:
            return {item.name: item for item in self.tools}
        return {name: self.tools[name] for name in names if name in self.tools}


def is_model_string(name: str) -> bool:
    """True for a litellm model string naming its provider (``openai/gpt-4o-mini``): what a
    step may name when no model slot is registered at all."""
    provider, _, model = name.partition("/")
    return bool(provider.strip()) and bool(model.strip())


def merge_capabilities(parts: Sequence[Capabilities]) -> Capabilities:
    """One Capabilities from several (the app modules a worker or ``little run`` loads):
    tools, model slots and harnesses united, the first part winning a name; skills in order;
    the rest (default harness, system text, turns, step timeout, bash) from the first part."""
    if not parts:
        return Capabilities()
    if len(parts) == 1:
        return parts[0]
    registry = ToolRegistry()
    models: dict[str, str | ResolvedModel] = {}
    harnesses: dict[HarnessRole, Harness] = {}
    skills: list[SkillDescriptor] = []
    for part in parts:
        for item in part.tools:
            if item.name not in registry:
                registry.register(item)
        for slot, bound in part.models.items():
            models.setdefault(slot, bound)
        for role, harness in part.harnesses.items():
            harnesses.setdefault(role, harness)
        skills.extend(part.skills)
    return dataclasses.replace(
        parts[0], tools=registry, models=models, harnesses=harnesses, skills=tuple(skills)
    )
