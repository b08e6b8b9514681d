"""Payloads of the workflow's own events (upstream's ``world.ts``): planner and
validation, the run, its steps and parallel groups."""

from __future__ import annotations

from typing import Any, Literal

from little_dist.event_types.base import (
    NonEmptyStr,
    NonNegativeInt,
    Payload,
    PositiveInt,
    Usage,
)

__all__ = [
    "ArtifactCreatedPayload",
    "ModelCallCompletedPayload",
    "ModelCallStartedPayload",
    "OrchestrationRequestedPayload",
    "OuterLoopCycleCompletedPayload",
    "ParallelBranchCompletedPayload",
    "ParallelBranchFailedPayload",
    "ParallelBranchScheduledPayload",
    "ParallelGroupCompletedPayload",
    "ParallelGroupFailedPayload",
    "ParallelGroupStartedPayload",
    "PlannerDraftedWorkflowPayload",
    "PlannerReuseDecisionRecordedPayload",
    "PlannerStartedPayload",
    "RunCompletedPayload",
    "RunFailedPayload",
    "RunStartedPayload",
    "StepAttemptStartedPayload",
    "StepCompletedPayload",
    "StepFailedPayload",
    "StepOutputValidatedPayload",
    "StepRepairAttemptedPayload",
    "StepScheduledPayload",
    "ToolCallCompletedPayload",
    "ToolCallStartedPayload",
    "WorkflowValidationFailedPayload",
    "WorkflowValidationSucceededPayload",
    "WorkflowVersionRegisteredPayload",
]

# -- planner and validation ------------------------------------------------------------------


class OrchestrationRequestedPayload(Payload):
    request_id: str | None = None
    request_hash: str | None = None
    input_hash: str | None = None
    workflow_definition_hash: str | None = None
    input_schema_hash: str | None = None
    requested_output_hash: str | None = None
    capability_manifest_hash: str | None = None
    workflow_id: str | None = None
    description: str | None = None
    max_workflow_revisions: int | None = None


class PlannerStartedPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    repair: bool | None = None


class PlannerDraftedWorkflowPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    valid: bool | None = None
    lwir_hash: str | None = None
    lwir: dict[str, Any] | None = None


class WorkflowValidationFailedPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    valid: bool | None = None
    lwir_hash: str | None = None
    lwir: dict[str, Any] | None = None
    findings: list[dict[str, Any]] | None = None


class WorkflowValidationSucceededPayload(Payload):
    request_id: str | None = None
    revision: int | None = None
    lwir_hash: str | None = None
    workflow_version_id: str | None = None
    lwir_version_id: str | None = None
    validation_hash: str | None = None


class PlannerReuseDecisionRecordedPayload(Payload):
    decision_kind: str | None = None
    candidate_workflow_version_id: str | None = None
    rationale: str | None = None
    acknowledged_warnings: list[Any] | None = None
    input_hash: str | None = None
    input_structure: Any = None
    candidate_brief_hash: str | None = None
    resulting_workflow_version_id: str | None = None
    base_workflow_version_id: str | None = None


class WorkflowVersionRegisteredPayload(Payload):
    workflow_version_id: str | None = None
    workflow_version_hash: str | None = None


# -- run ---------------------------------------------------------------------------------------


class RunStartedPayload(Payload):
    workflow_version_id: str | None = None
    input: Any = None


class RunCompletedPayload(Payload):
    workflow_version_id: str | None = None
    output: Any = None
    output_ref: str | None = None


class RunFailedPayload(Payload):
    error: Any = None


class OuterLoopCycleCompletedPayload(Payload):
    outer_loop_id: str | None = None
    cycle_number: PositiveInt | None = None
    supervise: dict[str, Any] | None = None
    #: Ours: the supervisor's model call for this decision (``{model, usage}``), when it
    #: reported one (see :mod:`little_dist.outer_loop.decisions`).
    supervisor_call: dict[str, Any] | None = None


# -- steps -------------------------------------------------------------------------------------


class _StepPayload(Payload):
    step_path: NonEmptyStr


class StepScheduledPayload(_StepPayload):
    step_id: str | None = None
    uses: str | None = None


class StepAttemptStartedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None


class StepOutputValidatedPayload(_StepPayload):
    output_ref: str | None = None
    output_mode: str | None = None
    schema_hash: str | None = None


class StepCompletedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    output: Any = None
    output_ref: str | None = None
    artifact_refs: list[str] | None = None
    metadata: dict[str, Any] | None = None


class StepFailedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    error: Any = None
    artifact_refs: list[str] | None = None


class StepRepairAttemptedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    error: Any = None


class ModelCallStartedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    model: Any = None


class ModelCallCompletedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    model: Any = None
    usage: Usage | dict[str, Any] | None = None


class ToolCallStartedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    tool_name: str | None = None
    args: Any = None


class ToolCallCompletedPayload(Payload):
    step_path: str | None = None
    call_id: str | None = None
    tool_name: str | None = None
    result: Any = None


class ArtifactCreatedPayload(Payload):
    artifact_ref: NonEmptyStr
    step_path: str | None = None
    name: str | None = None
    content_type: str | None = None


# -- parallel ----------------------------------------------------------------------------------


class ParallelGroupStartedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    branch_count: NonNegativeInt | None = None
    max_concurrency: PositiveInt | None = None
    failure_mode: Literal["fail_fast", "all_settled"] | None = None


class ParallelBranchScheduledPayload(_StepPayload):
    branch_path: str | None = None
    item_key: str | None = None
    branch_index: NonNegativeInt | None = None


class ParallelBranchCompletedPayload(ParallelBranchScheduledPayload):
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    output_ref: str | None = None
    artifact_refs: list[str] | None = None


class ParallelBranchFailedPayload(ParallelBranchScheduledPayload):
    attempt: PositiveInt | None = None
    attempt_id: str | None = None
    error: Any = None
    retriable: bool | None = None
    artifact_refs: list[str] | None = None


class ParallelGroupCompletedPayload(_StepPayload):
    step_id: str | None = None
    attempt: PositiveInt | None = None
    branch_count: NonNegativeInt | None = None


class ParallelGroupFailedPayload(ParallelGroupCompletedPayload):
    error: Any = None
