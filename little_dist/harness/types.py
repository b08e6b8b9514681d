"""The harness contract: tasks, results, roles, the ``Harness`` protocol and its context.

Upstream's ``little-harness`` workflow-harness types (``WorkflowHarnessTask``,
``WorkflowHarnessResult``, ``WorkflowHarnessContext``) as Python. A harness is anything with a
``harness_id`` and a ``run(task, ctx)`` method; the runtime picks one per role (a custom one
replaces the default; returning :class:`DelegateToDefault` falls back to the default).

Steps travel as their LWIR JSON object (``{"id": ..., "uses": "ai.generate", "with": ...}``),
as upstream passes them, so custom harnesses get plain data; :func:`step_model` parses one
into the typed LWIR model when a harness wants attribute access.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeAlias, runtime_checkable

# What a skill is lives with the skills (below the harness, which offers them); named here too.
from little_dist.skills.descriptor import SkillDescriptor

if TYPE_CHECKING:
    from little_dist.harness.memo import Memo
    from little_dist.harness.recorder import EventRecorder
    from little_dist.memory.layout import MemoryMountSpec
    from little_dist.permissions import ToolPermissions
    from little_dist.tools import Tool

__all__ = [
    "DEFAULT_HARNESS_ID",
    "HARNESS_ROLES",
    "NO_MODEL",
    "DelegateToDefault",
    "ExecuteStepResult",
    "ExecuteStepTask",
    "FixStepResult",
    "FixStepTask",
    "Harness",
    "HarnessContext",
    "HarnessResult",
    "HarnessRole",
    "HarnessScope",
    "HarnessTask",
    "OrchestrateResult",
    "OrchestrateTask",
    "PlanResult",
    "PlanTask",
    "ResolvedModel",
    "SkillDescriptor",
    "StepContext",
    "TaskKind",
    "role_for_step",
    "step_model",
]

#: Upstream's ``WORKFLOW_HARNESS_ID``: the id the default harness records in manifests.
DEFAULT_HARNESS_ID = "workflowHarness@1.0.0"

HarnessRole: TypeAlias = Literal[
    "planner", "orchestrator", "worker.ai-generate", "worker.code-run", "worker.tool-call", "fixer"
]
HARNESS_ROLES: tuple[HarnessRole, ...] = (
    "planner",
    "orchestrator",
    "worker.ai-generate",
    "worker.code-run",
    "worker.tool-call",
    "fixer",
)
TaskKind: TypeAlias = Literal["plan", "orchestrate", "execute_step", "fix_step"]

_ROLE_BY_USES: dict[str, HarnessRole] = {
    "ai.generate": "worker.ai-generate",
    "code.run": "worker.code-run",
    "tool.call": "worker.tool-call",
}


def role_for_step(step: Mapping[str, Any]) -> HarnessRole:
    """The worker role that executes ``step`` (by its ``uses``).

    Raises :class:`ValueError` for ``decision``/``parallel`` steps, which the engine
    evaluates itself and never hands to a harness.
    """
    uses = step.get("uses")
    role = _ROLE_BY_USES.get(uses) if isinstance(uses, str) else None
    if role is None:
        raise ValueError(f"step {step.get('id')!r} uses {uses!r}: no harness role runs it")
    return role


def step_model(step: Mapping[str, Any]) -> Any:
    """The typed LWIR model (``little_dist.lwir.models``) of a step's JSON object."""
    from pydantic import TypeAdapter

    from little_dist.lwir.models import Step

    return TypeAdapter(Step).validate_python(dict(step))


# -- tasks -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepContext:
    """Where a step attempt sits: ``step_path`` (``"draft.visit[1]"``), visit, attempt."""

    step_path: str
    visit_index: int = 0
    attempt: int = 1
    tool_call_scope: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class PlanTask:
    """Design a workflow (LWIR) for ``input``."""

    workflow_snapshot: Mapping[str, Any]
    input: Any
    system_message: str | None = None
    outer_loop_context: Any = None
    kind: Literal["plan"] = field(default="plan", init=False)


@dataclass(frozen=True)
class OrchestrateTask:
    """Choose among ``available`` workflow snapshots and drive them for ``input``."""

    available: Sequence[Mapping[str, Any]]
    input: Any
    kind: Literal["orchestrate"] = field(default="orchestrate", init=False)


@dataclass(frozen=True)
class ExecuteStepTask:
    """Run one attempt of ``step`` (its LWIR JSON) on the resolved ``step_input``."""

    step: Mapping[str, Any]
    step_input: Any
    step_context: StepContext
    kind: Literal["execute_step"] = field(default="execute_step", init=False)


@dataclass(frozen=True)
class FixStepTask:
    """Repair a failed step: ``original_attempt_error`` is its error envelope."""

    step: Mapping[str, Any]
    step_input: Any
    original_attempt_error: Mapping[str, Any]
    prior_fix_attempts: int = 0
    step_context: StepContext | None = None
    kind: Literal["fix_step"] = field(default="fix_step", init=False)


HarnessTask: TypeAlias = PlanTask | OrchestrateTask | ExecuteStepTask | FixStepTask


# -- results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanResult:
    lwir: Any
    kind: Literal["plan"] = field(default="plan", init=False)


@dataclass(frozen=True)
class OrchestrateResult:
    output: Any
    kind: Literal["orchestrate"] = field(default="orchestrate", init=False)


@dataclass(frozen=True)
class ExecuteStepResult:
    """A step's output (validated by the runtime) and refs of artifacts it created."""

    output: Any
    artifact_refs: tuple[str, ...] = ()
    kind: Literal["execute_step"] = field(default="execute_step", init=False)


@dataclass(frozen=True)
class FixStepResult:
    """The fixed step's output, the fixer's ``fixed_source`` and how many tries it took."""

    output: Any
    fixed_source: str
    attempts: int
    kind: Literal["fix_step"] = field(default="fix_step", init=False)


@dataclass(frozen=True)
class DelegateToDefault:
    """Returned by a custom harness that does not handle a task: the default runs it."""

    kind: Literal["delegate_to_default"] = field(default="delegate_to_default", init=False)


HarnessResult: TypeAlias = (
    PlanResult | OrchestrateResult | ExecuteStepResult | FixStepResult | DelegateToDefault
)


# -- context -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResolvedModel:
    """A model slot resolved to a concrete model.

    ``litellm_model`` is what ``litellm.completion(model=...)`` gets. ``provider_id`` and
    ``model_id`` are the identity recorded on ``harness.model.responded`` (``model:
    {provider, modelId}``), which :mod:`little_dist.pricing` prices with the bundled
    registry. They default from ``pricing_key`` (``"openai/gpt-4o-mini"``), which defaults
    to ``litellm_model``: a scripted slot (``scripted/demo``) is priced as a real model by
    giving it ``pricing_key="openai/gpt-4o-mini"``.
    """

    slot_id: str
    litellm_model: str
    provider_id: str = ""
    model_id: str = ""
    pricing_key: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        key = self.pricing_key or self.litellm_model
        object.__setattr__(self, "pricing_key", key)
        provider, _, model_id = key.partition("/")
        if not model_id:  # a bare model name: litellm's own default provider
            provider, model_id = "openai", key
        if not self.provider_id:
            object.__setattr__(self, "provider_id", provider)
        if not self.model_id:
            object.__setattr__(self, "model_id", model_id)

    def identity(self) -> dict[str, str]:
        """``{"provider", "modelId"}`` as recorded on model events."""
        return {"provider": self.provider_id, "modelId": self.model_id}


#: The model of a step that uses none (``tool.call``, ``code.run``): one value, shared, so
#: what is derived from it (the session manifest's ``modelHash``) is computed once. (Its
#: ``settings`` is an empty plain dict, as a model made per attempt had: a harness may
#: record it; nothing may change it.)
NO_MODEL: Final = ResolvedModel(slot_id="none", litellm_model="none")


@dataclass(frozen=True)
class HarnessScope:
    """Upstream's ``WorkflowHarnessScope``."""

    run_id: str
    role: HarnessRole
    step_path: str | None = None
    parent_run_id: str | None = None


def _never_cancelled() -> bool:
    return False


@dataclass(frozen=True)
class HarnessContext:
    """Everything a harness may use for one task.

    ``tools`` are the tools this step may call (already filtered by the workflow's
    permissions); ``recorder`` appends the attempt's harness events (fenced); ``memo``
    holds the recorded model turns and tool results of earlier tries of the same step path;
    ``cancelled()`` turns true when the attempt must stop (lease lost, run cancelled).
    ``manifest`` is what ``harness.session.started`` records (its hash is computed).
    ``permissions``: the runtime tool-call rules every call is decided against (see
    :mod:`little_dist.permissions`; ``None`` or empty: every call allowed).
    ``deadline``: the ``time.monotonic()`` by which the attempt must be over (its step
    timeout; ``None``: no limit); model calls pass what is left as litellm's ``timeout``.
    ``memory_mounts``: the workflow's memory stores the bash tool sees (path and mode), listed
    in the system prompt when the model is offered bash; empty without bash.
    """

    run_id: str
    role: HarnessRole
    model: ResolvedModel
    recorder: EventRecorder
    memo: Memo
    scope: HarnessScope | None = None
    system: str | None = None
    tools: Mapping[str, Tool] = field(default_factory=dict)
    skills: Sequence[SkillDescriptor] = ()
    cancelled: Callable[[], bool] = _never_cancelled
    manifest: Mapping[str, Any] = field(default_factory=dict)
    parent_run_id: str | None = None
    max_turns: int = 8
    deadline: float | None = None
    permissions: ToolPermissions | None = None
    memory_mounts: Sequence[MemoryMountSpec] = ()
    #: Where sub-runs are started when they run elsewhere (a fleet worker's
    #: :class:`~little_dist.subruns.SubRunHost`): a workflow tool's call then suspends the
    #: attempt instead of waiting. ``None``: the call drives its child in this process.
    sub_runs: Any = None
    #: The provider quota limiter model calls go through (a fleet worker's, on its Redis:
    #: :class:`~little_dist.quotas.QuotaLimiter`); ``None``: this process's, from
    #: ``LITTLE_QUOTAS`` (none when unset).
    quotas: Any = None
    #: The attempt before this one gave its worker slot back for quota: this one waits for
    #: its turn in place (see :mod:`little_dist.quotas.limiter`).
    quota_gave_back: bool = False
    #: Whether the run has a dollar budget (``little.run.budget`` in its log when the attempt
    #: started): each model call then reserves its worst case against it
    #: (:mod:`little_dist.harness.budget_hold`), priced with ``pricing_fallback`` for models
    #: the registry lacks (``None``: litellm's cost map).
    budgeted: bool = False
    pricing_fallback: Any = None

    @property
    def can_cancel(self) -> bool:
        """Whether ``cancelled()`` can turn true: a model call in flight is then waited for
        on another thread and abandoned when it does (:mod:`.interruptible`)."""
        return self.cancelled is not _never_cancelled


@runtime_checkable
class Harness(Protocol):
    """Runs tasks for one or more roles. Raise to fail the attempt (see ``errors``)."""

    @property
    def harness_id(self) -> str: ...

    def run(self, task: HarnessTask, ctx: HarnessContext) -> HarnessResult: ...
