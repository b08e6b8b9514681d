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
from little_dist.harness.budget_hold import hold_daily, settle_daily
from little_dist.harness.replies import json_in_reply
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

__all__ = ["DefaultPlanner", "FixedPlan", "PlannerError"]

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
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        recorder = ctx.recorder
        called = f"model:planner:{recorder.attempt}:1"
        ended = f"model-end:planner:{recorder.attempt}:1"
        for event in recorder.world.list_events(recorder.run_id):
            if event.occurrence_id == ended and event.type == "harness.model.responded":
                text = event.payload.get("response", {}).get("text")
                return PlanResult(lwir=json_in_reply(text if isinstance(text, str) else ""))
        return PlanResult(lwir=json_in_reply(_call_model(ctx, messages, called, ended)))


def _call_model(
    ctx: HarnessContext, messages: list[dict[str, Any]], called: str, ended: str
) -> str:
    from little_dist.harness.model_calls import import_litellm, usage_from_response

    world, run_id, model = ctx.recorder.world, ctx.run_id, ctx.model
    base = {"turn": 1, "callId": called, "role": "planner", "attempt": ctx.recorder.attempt}
    request = {"model": model.litellm_model, "messages": messages, "tools": []}
    call = EventInput(
        type="harness.model.called",
        occurrence_id=called,
        payload={**base, "promptHash": sha256_digest(request), "request": request},
    )
    # Its worst case held against the key's daily ceilings and the run's budget, or refused.
    daily = hold_daily(ctx, messages, ())
    try:
        if ctx.budgeted:
            from little_dist.harness.budget_hold import planner_hold, reserve, worst_case_usd

            def record(need: float, last: int) -> None:
                hold = planner_hold(called, need)
                world.append_batch(run_id, [hold, call], expected_sequence=last)

            reserve(ctx, worst_case_usd(ctx, messages, ()), record)
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
            messages=messages,
            metadata={"little": {"stepPath": "planner", "runId": run_id}},
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
    text = response.choices[0].message.content or ""
    usage = usage_from_response(response)
    if daily is not None:
        settle_daily(ctx, daily, usage)
    world.append(
        run_id,
        EventInput(
            type="harness.model.responded",
            occurrence_id=ended,
            payload={
                **base,
                "model": model.identity(),
                "response": {"text": text, "usage": usage},
                "durationMs": round((time.monotonic() - started) * 1000),
            },
        ),
    )
    return str(text)


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
