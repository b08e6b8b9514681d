"""The default fixer (``fix_step``) and the default planner/orchestrator model loop.

A fixer session gets the failed step, its input, the failed attempt's error envelope and the
step's output contract, and runs the same tool loop as ``ai.generate``. It answers with one
JSON object ``{"fixedSource": "...", "output": ...}``: ``fixedSource`` is whatever corrected
source (code, configuration, prompt) the fixer proposes — used for this run only, the LWIR
stays immutable — and ``output`` is the step output it produced. An answer that is not such
an object is taken as the output itself with an empty ``fixedSource`` (upstream's reading of
a fixer result). The runtime validates the output like any step output.

Plan and orchestrate tasks use one loop too (upstream's ``runModelLikeTask``): the task is the
user message; a plan's answer is its ``lwir`` field or the whole JSON answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.canonical import canonical_json
from little_dist.harness.ai_generate import tool_loop
from little_dist.harness.model_calls import Completion
from little_dist.harness.output_modes import instructions, output_spec, parse_output
from little_dist.harness.prompts import system_prompt
from little_dist.harness.recorder import json_safe
from little_dist.harness.types import (
    FixStepResult,
    FixStepTask,
    OrchestrateResult,
    OrchestrateTask,
    PlanResult,
    PlanTask,
)

if TYPE_CHECKING:
    from little_dist.harness.types import HarnessContext

__all__ = ["FIXER_INSTRUCTIONS", "run_fix_step", "run_model_task"]

FIXER_INSTRUCTIONS = (
    "A step of a workflow run failed. You get the step definition, its input and the error. "
    "Find the cause, fix it, and produce the step's output yourself. Answer with one JSON "
    'object and nothing else: {"fixedSource": "<the corrected source, or an empty string>", '
    '"output": <the step output, satisfying the output contract below>}.'
)

_JSON = {"mode": "json"}


def _fixer_system(task: FixStepTask, ctx: HarnessContext) -> str | None:
    on_failure = task.step.get("onFailure")
    fixer = on_failure.get("fixer") if isinstance(on_failure, Mapping) else None
    own = fixer.get("system") if isinstance(fixer, Mapping) else None
    parts = [text for text in (ctx.system, own) if isinstance(text, str) and text]
    return "\n\n".join(parts) or None


def run_fix_step(
    task: FixStepTask,
    ctx: HarnessContext,
    *,
    max_turns: int | None = None,
    completion: Completion | None = None,
) -> FixStepResult:
    """Run the fixer loop once; ``attempts`` is ``prior_fix_attempts + 1``."""
    spec = output_spec(task.step)
    extra = FIXER_INSTRUCTIONS + "\n\nOutput contract of the step:\n" + instructions(spec)
    system_text = system_prompt(
        system=_fixer_system(task, ctx), skills=ctx.skills, tools=ctx.tools, extra=extra
    )
    request = {
        "step": json_safe(dict(task.step)),
        "stepInput": json_safe(task.step_input),
        "error": json_safe(dict(task.original_attempt_error)),
        "priorFixAttempts": task.prior_fix_attempts,
    }
    messages = [
        {"role": "system", "content": system_text},
        {"role": "user", "content": canonical_json(request)},
    ]
    reply = tool_loop(
        ctx,
        messages=messages,
        tools=ctx.tools,
        max_turns=max_turns or ctx.max_turns,
        task_kind="fix_step",
        scope={"role": "fixer", "stepPath": ctx.recorder.step_path},
        completion=completion,
    )
    answer = parse_output(_JSON, reply.text or "")
    if isinstance(answer, dict) and ("output" in answer or "fixedSource" in answer):
        source = answer.get("fixedSource")
        output = answer.get("output")
        fixed_source = source if isinstance(source, str) else ""
    else:
        output, fixed_source = answer, ""
    if spec.get("mode") in ("text", "choice") and isinstance(output, str):
        output = parse_output(spec, output)
    return FixStepResult(
        output=output, fixed_source=fixed_source, attempts=task.prior_fix_attempts + 1
    )


def run_model_task(
    task: PlanTask | OrchestrateTask,
    ctx: HarnessContext,
    *,
    max_turns: int | None = None,
    completion: Completion | None = None,
) -> PlanResult | OrchestrateResult:
    """Plan or orchestrate with one tool loop (the task JSON is the user message)."""
    extra = None
    if isinstance(task, PlanTask) and task.system_message:
        extra = task.system_message
    system_text = system_prompt(system=ctx.system, skills=ctx.skills, tools=ctx.tools, extra=extra)
    body: dict[str, Any] = {"kind": task.kind, "input": json_safe(task.input)}
    if isinstance(task, PlanTask):
        body["workflowSnapshot"] = json_safe(dict(task.workflow_snapshot))
    else:
        body["available"] = [json_safe(dict(item)) for item in task.available]
    reply = tool_loop(
        ctx,
        messages=[
            {"role": "system", "content": system_text},
            {"role": "user", "content": canonical_json(body)},
        ],
        tools=ctx.tools,
        max_turns=max_turns or ctx.max_turns,
        task_kind=task.kind,
        scope={"role": ctx.role},
        completion=completion,
    )
    answer = parse_output(_JSON, reply.text or "")
    if isinstance(task, PlanTask):
        if isinstance(answer, dict) and "lwir" in answer:
            return PlanResult(answer["lwir"])
        return PlanResult(answer)
    return OrchestrateResult(answer)
