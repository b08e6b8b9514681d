"""The planner's ``plan`` harnesses: :class:`DefaultPlanner` (one planner-model call per
draft, recorded on the run) and :class:`FixedPlan` (a workflow defined with ``plan=``)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from little_dist.canonical import canonical_json, sha256_digest
from little_dist.errors import LittleError
from little_dist.events import EventInput
from little_dist.harness.ai_generate import wire_tools
from little_dist.harness.budget_hold import hold_daily, settle_daily
from little_dist.harness.model_calls import ModelReply, reply_from_recorded, reply_from_response
from little_dist.harness.replies import json_in_reply
from little_dist.harness.tool_calls import run_tool_call
from little_dist.harness.types import (
    DEFAULT_HARNESS_ID,
    DelegateToDefault,
    HarnessContext,
    HarnessResult,
    HarnessTask,
    PlanResult,
    PlanTask,
)
from little_dist.redaction import redact

__all__ = ["MAX_TURNS", "DefaultPlanner", "FixedPlan", "PlannerError"]

#: Model turns of one draft (upstream's ``maxTurns`` of its planner loop).
MAX_TURNS = 25

_PLANNER_ROLE = """You are the planner of little-workflow. You design a workflow as one LWIR \
document (apiVersion "littleworkflow.dev/v0.1", kind "Workflow") that achieves the goal for \
inputs like the one given. Rules:
- metadata.name must be the workflow id; input.schema and output.schema must equal the given \
schemas exactly.
- Steps use only: ai.generate (with.model = a model slot id, with.prompt), tool.call \
(with.tool = a tool name, with.args), parallel (fan out over an array with item/itemKey), \
decision (with.cases/when/to, default). Reference data with {{ input.x }}, \
{{ steps.<id>.output.y }}, {{ item.z }}.
- List the model slots and tools you use in permissions.models and permissions.tools.
- The last step's output is the workflow output and must match output.schema.
Reply with the LWIR JSON object only: no prose, no markdown fences."""


class PlannerError(LittleError):
    """The planner harness could not be run (a model call failed, a harness misbehaved)."""


class DefaultPlanner:
    """The default ``plan`` harness: one planner-model call per draft, whose reply is one
    JSON object.

    The call is recorded on the run as ``harness.model.called``/``harness.model.responded``
    without a ``stepPath`` (planning is not a step; its tokens count in the run's total),
    with occurrence ids ``model:planner:{revision}:1``/``model-end:planner:{revision}:1``
    (the revision is ``ctx.recorder.attempt``). A reply already recorded under that id is
    reused instead of calling the model again.
    """

    harness_id = DEFAULT_HARNESS_ID

    def run(self, task: HarnessTask, ctx: HarnessContext) -> HarnessResult:
        if not isinstance(task, PlanTask):
            return DelegateToDefault()
        system = "\n\n".join(
            part
            for part in (_PLANNER_ROLE, ctx.system, _skills_text(ctx), task.system_message)
            if part
        )
        user = canonical_json(
            {
                "goal": task.workflow_snapshot.get("description") or task.workflow_snapshot["id"],
                "workflow": task.workflow_snapshot,
                "input": task.input,
            }
        )
        conversation: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        definitions, names = wire_tools(ctx.tools)
        revision = ctx.recorder.attempt
        for turn in range(1, MAX_TURNS + 1):
            called, ended = (
                f"model:planner:{revision}:{turn}",
                f"model-end:planner:{revision}:{turn}",
            )
            reply = _recorded_reply(ctx, ended, turn)
            if reply is None:
                reply = _call_model(ctx, conversation, called, ended, turn, definitions, names)
            if not reply.tool_calls or not ctx.tools:
                return PlanResult(lwir=json_in_reply(reply.text or ""))
            # Upstream's planner loop: the model reads (the reuse candidate's files, with the
            # read-only bash) and answers with its plan when it has read enough.
            conversation.append(reply.assistant_message())
            for position, call in enumerate(reply.tool_calls, start=1):
                outcome = run_tool_call(
                    ctx,
                    tool_name=call.name,
                    args=call.args,
                    caller="model",
                    turn=turn,
                    call_index=position,
                    scope={"role": "planner"},
                )
                conversation.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": outcome.content_for_model(),
                    }
                )
        raise PlannerError(f"Workflow plan task exceeded {MAX_TURNS} model turns.")


def _recorded_reply(ctx: HarnessContext, ended: str, turn: int) -> ModelReply | None:
    """The reply recorded under ``ended`` (a resumed session does not call the model again)."""
    for event in ctx.recorder.world.list_events(ctx.recorder.run_id):
        if event.occurrence_id == ended and event.type == "harness.model.responded":
            response = event.payload.get("response")
            return reply_from_recorded(turn, response if isinstance(response, Mapping) else {})
    return None


# Long on purpose: one planner turn's record, from its budget hold to its recorded end.
def _call_model(
    ctx: HarnessContext,
    messages: list[dict[str, Any]],
    called: str,
    ended: str,
    turn: int,
    tools: list[dict[str, Any]],
    names: Mapping[str, str],
) -> ModelReply:
    from little_dist.harness.model_calls import import_litellm

    world, run_id, model = ctx.recorder.world, ctx.run_id, ctx.model
    base = {"turn": turn, "callId": called, "role": "planner", "attempt": ctx.recorder.attempt}
    refs = [
        {
            "toolName": names.get(item["function"]["name"], item["function"]["name"]),
            "inputSchemaHash": sha256_digest(item["function"].get("parameters")),
        }
        for item in tools
    ]
    request = {"model": model.litellm_model, "messages": messages, "tools": refs}
    call = EventInput(
        type="harness.model.called",
        occurrence_id=called,
        payload={**base, "promptHash": sha256_digest(request), "request": request},
    )
    # Its worst case held against the key's daily ceilings and the run's budget, or refused.
    daily = hold_daily(ctx, messages, tools)
    try:
        if ctx.budgeted:
            from little_dist.harness.budget_hold import planner_hold, reserve, worst_case_usd

            def record(need: float, last: int) -> None:
                hold = planner_hold(called, need)
                world.append_batch(run_id, [hold, call], expected_sequence=last)

            reserve(ctx, worst_case_usd(ctx, messages, tools), record)
        else:
            world.append(run_id, call)
    except BaseException:
        if daily is not None:
            daily.settle(0.0)
        raise
    started = time.monotonic()
    try:
        response = import_litellm().completion(
            model=model.litellm_model,
            messages=[dict(message) for message in messages],
            metadata={"little": {"stepPath": "planner", "runId": run_id}},
            **({"tools": [dict(item) for item in tools]} if tools else {}),
            **dict(model.settings),
        )
    except Exception as error:
        if daily is not None:
            daily.settle(0.0)
        # Provider errors can echo the request: a key in its URL, its Authorization header.
        text = redact(str(error))
        world.append(
            run_id,
            EventInput(
                type="harness.model.failed",
                occurrence_id=ended,
                payload={
                    **base,
                    "error": {"name": type(error).__name__, "message": text or "error"},
                    "durationMs": round((time.monotonic() - started) * 1000),
                },
            ),
        )
        raise PlannerError(f"planner model {model.litellm_model!r} failed: {text}") from error
    reply = reply_from_response(turn, response, names)
    usage = reply.usage
    if daily is not None:
        settle_daily(ctx, daily, usage)
    recorded: dict[str, Any] = {"text": reply.text or "", "usage": usage}
    if reply.tool_calls:
        recorded["toolCalls"] = [call.to_json() for call in reply.tool_calls]
    world.append(
        run_id,
        EventInput(
            type="harness.model.responded",
            occurrence_id=ended,
            payload={
                **base,
                "model": model.identity(),
                "response": recorded,
                "durationMs": round((time.monotonic() - started) * 1000),
            },
        ),
    )
    return reply


def _skills_text(ctx: HarnessContext) -> str:
    if not ctx.skills:
        return ""
    parts = ["Skills:"]
    for item in ctx.skills:
        parts.append(
            f"## {item.name}\n{item.description}" + (f"\n{item.body}" if item.body else "")
        )
    return "\n".join(parts)


@dataclass(frozen=True)
class FixedPlan:
    """The ``plan`` harness of a workflow defined with ``plan=``: that LWIR, no model."""

    lwir: Mapping[str, Any]
    harness_id: str = "fixedPlan@1.0.0"

    def run(self, task: HarnessTask, ctx: HarnessContext) -> HarnessResult:
        return PlanResult(lwir=json.loads(canonical_json(dict(self.lwir))))
