"""Payloads of the harness events a workflow run records (sessions, model calls, tool
calls, execute-step), validated as upstream's ``harness/event-recorder.ts`` validates them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from little_dist.event_types.base import (
    ErrorEnvelope,
    ModelIdentity,
    NonEmptyStr,
    NonNegativeInt,
    Number,
    Payload,
    PositiveInt,
    Usage,
)

__all__ = [
    "HarnessExecuteStepStartedPayload",
    "HarnessExecuteStepSucceededPayload",
    "HarnessModelCalledPayload",
    "HarnessModelFailedPayload",
    "HarnessModelRequest",
    "HarnessModelRespondedPayload",
    "HarnessModelResponse",
    "HarnessRequestMessage",
    "HarnessRequestTool",
    "HarnessResponseToolCall",
    "HarnessRole",
    "HarnessSessionCompletedPayload",
    "HarnessSessionFailedPayload",
    "HarnessSessionStartedPayload",
    "HarnessStepUses",
    "HarnessTask",
    "HarnessToolCallFailedPayload",
    "HarnessToolCallStartedPayload",
    "HarnessToolCallSucceededPayload",
]

HarnessRole = Literal[
    "planner", "orchestrator", "worker.ai-generate", "worker.code-run", "worker.tool-call", "fixer"
]
HarnessStepUses = Literal["ai.generate", "code.run", "tool.call", "decision", "parallel"]


class HarnessTask(Payload):
    kind: Literal["plan", "orchestrate", "execute_step", "fix_step"]


class HarnessSessionStartedPayload(Payload):
    run_id: NonEmptyStr
    role: HarnessRole
    task: HarnessTask
    manifest: dict[str, Any]
    manifest_hash: NonEmptyStr
    parent_run_id: NonEmptyStr | None = None


class HarnessSessionCompletedPayload(Payload):
    run_id: NonEmptyStr
    usage: Usage


class HarnessSessionFailedPayload(Payload):
    run_id: NonEmptyStr
    error: ErrorEnvelope


class HarnessRequestMessage(Payload):
    role: NonEmptyStr
    content: Any


class HarnessRequestTool(Payload):
    tool_name: Annotated[str, Field(pattern=r"\S")]


class HarnessModelRequest(Payload):
    model: NonEmptyStr
    messages: list[HarnessRequestMessage]
    tools: list[HarnessRequestTool]


class HarnessModelCalledPayload(Payload):
    turn: PositiveInt
    prompt_hash: NonEmptyStr
    request: HarnessModelRequest
    call_id: NonEmptyStr | None = None
    step_path: str | None = None


class HarnessResponseToolCall(Payload):
    tool_name: Annotated[str, Field(pattern=r"\S")]
    args: Any


class HarnessModelResponse(Payload):
    usage: Usage
    text: str | None = None
    tool_calls: list[HarnessResponseToolCall] | None = None


class HarnessModelRespondedPayload(Payload):
    turn: PositiveInt
    response: HarnessModelResponse
    model: ModelIdentity | None = None
    call_id: NonEmptyStr | None = None
    step_path: str | None = None


class HarnessModelFailedPayload(Payload):
    turn: PositiveInt
    error: ErrorEnvelope
    duration_ms: Number
    attempt: PositiveInt | None = None
    will_retry: bool | None = None
    call_id: NonEmptyStr | None = None
    step_path: str | None = None


class _HarnessToolCallFields(Payload):
    call_id: NonEmptyStr
    caller: Literal["model", "code"] | None = None
    tool_name: Annotated[str, Field(pattern=r"\S")] | None = None
    turn: PositiveInt | None = None
    call_index: PositiveInt | None = None
    scope: dict[str, Any] | None = None
    duration_ms: Number | None = None
    step_path: str | None = None

    @model_validator(mode="after")
    def _turn_matches_caller(self) -> _HarnessToolCallFields:
        # Model-initiated calls are keyed by their turn; code-initiated calls have none.
        if self.caller == "model" and self.turn is None:
            raise ValueError("turn is required when caller is 'model'")
        if self.caller == "code" and "turn" in self.model_fields_set:
            raise ValueError("turn must be absent when caller is 'code'")
        return self


class HarnessToolCallStartedPayload(_HarnessToolCallFields):
    caller: Literal["model", "code"]
    tool_name: Annotated[str, Field(pattern=r"\S")]
    args: Any


class HarnessToolCallSucceededPayload(_HarnessToolCallFields):
    result: Any


class HarnessToolCallFailedPayload(_HarnessToolCallFields):
    error: ErrorEnvelope


class HarnessExecuteStepStartedPayload(Payload):
    step_path: NonEmptyStr
    step_id: NonEmptyStr | None = None
    uses: HarnessStepUses | None = None
    visit_index: NonNegativeInt | None = None
    run_id: NonEmptyStr | None = None
    step_kind: Literal["code.run", "tool.call", "decision"] | None = None
    input_hash: NonEmptyStr | None = None


class HarnessExecuteStepSucceededPayload(Payload):
    step_path: NonEmptyStr
    step_id: NonEmptyStr | None = None
    uses: HarnessStepUses | None = None
    visit_index: NonNegativeInt | None = None
    run_id: NonEmptyStr | None = None
    output: Any = None
    output_hash: NonEmptyStr | None = None
    duration_ms: Number | None = None
