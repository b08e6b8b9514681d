"""The harness layer: what runs a step attempt's work (model loops, tool calls, the fixer).

How the runtime uses it, per attempt::

    from little_dist.harness import (
        EventRecorder, ExecuteStepTask, HarnessContext, HarnessRegistry, Memo, StepContext,
    )

    recorder = EventRecorder(world, run_id, step_path, attempt, lease.fence)
    memo = Memo.from_events(world.list_events(run_id), step_path, world=world)
    ctx = HarnessContext(
        run_id=run_id,
        role="worker.ai-generate",                 # role_for_step(step) / "fixer"
        model=capabilities.resolve_model(slot),    # ResolvedModel(slot_id, litellm_model, ...)
        recorder=recorder,
        memo=memo,
        system=capabilities.system,
        tools=capabilities.tools_for(allowed),     # name -> little_dist.tools.Tool
        skills=capabilities.skills,
        cancelled=cancel_event.is_set,
        manifest={"workflowVersionId": version.id, ...},   # merged into the session manifest
    )
    registry = HarnessRegistry(overrides=capabilities.harnesses)   # build once, reuse
    result = registry.run(ExecuteStepTask(step_json, step_input,
                                          StepContext(step_path, visit_index, attempt)), ctx)

``registry.run`` records the session events, falls back to the default harness on
:class:`DelegateToDefault`, self-repairs ``ai.generate`` outputs, and returns an
:class:`ExecuteStepResult` / :class:`FixStepResult` / ... or raises. Any exception it raises
maps to upstream's envelope ``{name, message, causeCode, retriable}`` with
:func:`envelope_for` (harness errors carry ``cause_code`` and ``retriable`` attributes).

Modules: :mod:`.types` (the contract), :mod:`.recorder` (events and their occurrence ids),
:mod:`.memo` (memoized resume), :mod:`.drift` (a resumed session's capabilities checked
against the recorded manifest), :mod:`.registry`, :mod:`.default` (the default harness),
:mod:`.ai_generate`, :mod:`.model_calls`, :mod:`.tool_calls`, :mod:`.output_modes`,
:mod:`.prompts`, :mod:`.fixer`, :mod:`.errors`, :mod:`.bash_tool` (the sandboxed ``bash``
tool a workflow may offer its models), :mod:`.outcomes` (``report_outcome``: an observer's
verdict on a run, upstream's ``outcome.reported``). Nothing here imports litellm until a
model is called.
"""

from __future__ import annotations

from little_dist.harness.default import DefaultHarness
from little_dist.harness.drift import CapabilityDriftError
from little_dist.harness.errors import (
    HarnessCancelled,
    HarnessConfigError,
    HarnessError,
    ModelCallError,
    StepSchemaError,
    ToolCallError,
    TurnLimitError,
    envelope_for,
)
from little_dist.harness.memo import Memo, MemoHit
from little_dist.harness.outcomes import OutcomeReport, report_outcome
from little_dist.harness.output_modes import output_findings
from little_dist.harness.recorder import DEFAULT_INLINE_LIMIT, EventRecorder
from little_dist.harness.registry import HarnessRegistry, resolve_repair_policy
from little_dist.harness.types import (
    DEFAULT_HARNESS_ID,
    HARNESS_ROLES,
    DelegateToDefault,
    ExecuteStepResult,
    ExecuteStepTask,
    FixStepResult,
    FixStepTask,
    Harness,
    HarnessContext,
    HarnessResult,
    HarnessRole,
    HarnessScope,
    HarnessTask,
    OrchestrateResult,
    OrchestrateTask,
    PlanResult,
    PlanTask,
    ResolvedModel,
    SkillDescriptor,
    StepContext,
    role_for_step,
)

__all__ = [
    "DEFAULT_HARNESS_ID",
    "DEFAULT_INLINE_LIMIT",
    "HARNESS_ROLES",
    "CapabilityDriftError",
    "DefaultHarness",
    "DelegateToDefault",
    "EventRecorder",
    "ExecuteStepResult",
    "ExecuteStepTask",
    "FixStepResult",
    "FixStepTask",
    "Harness",
    "HarnessCancelled",
    "HarnessConfigError",
    "HarnessContext",
    "HarnessError",
    "HarnessRegistry",
    "HarnessResult",
    "HarnessRole",
    "HarnessScope",
    "HarnessTask",
    "Memo",
    "MemoHit",
    "ModelCallError",
    "OrchestrateResult",
    "OrchestrateTask",
    "OutcomeReport",
    "PlanResult",
    "PlanTask",
    "ResolvedModel",
    "SkillDescriptor",
    "StepContext",
    "StepSchemaError",
    "ToolCallError",
    "TurnLimitError",
    "envelope_for",
    "output_findings",
    "report_outcome",
    "resolve_repair_policy",
    "role_for_step",
]
