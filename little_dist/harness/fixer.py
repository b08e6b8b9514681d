"""The default fixer (``fix_step``) and the default planner/orchestrator model loop.

A fixer session gets the failed step, its input, the failed attempt's error envelope and the
step's output contract, and runs the same tool loop as ``ai.generate``. It answers with one
JSON object ``{"fixedSource": "...", "output": ...}``: ``fixedSource`` is whatever corrected
source (code, configuration, prompt) the fixer proposes — used for this run only, the LWIR
stays immutable — and ``output`` is the step output it produced. An answer that is not such
an object is taken as the output itself with an empty ``fixedSource`` (upstream's reading of
a fixer result). For a ``code.run`` step the fixer's word is not taken for the output: its
``fixedSource`` replaces the entrypoint and is run in the sandbox
(:func:`~little_dist.harness.code_run.run_fixed_code`); a repair that fails again fails this
fix attempt, and the next one (up to ``maxAttempts``) sees that failure. The runtime
validates the output like any step output.

Plan and orchestrate tasks use one loop too (upstream's ``runModelLikeTask``): the task is the
user message; a plan's answer is its ``lwir`` field or the whole JSON answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.canonical import canonical_json
from little_dist.harness.ai_generate import tool_loop
from little_dist.harness.code_run import run_fixed_code, runnable_code
from little_dist.harness.errors import HarnessError
from little_dist.harness.log_values import json_safe
from little_dist.harness.model_calls import Completion
from little_dist.harness.output_modes import instructions, output_spec, parse_output
from little_dist.harness.prompts import system_prompt
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

__all__ = ["CODE_FIXER_INSTRUCTIONS", "FIXER_INSTRUCTIONS", "run_fix_step", "run_model_task"]

FIXER_INSTRUCTIONS = (
    "A step of a workflow run failed. You get the step definition, its input and the error. "
    "Find the cause, fix it, and produce the step's output yourself. Answer with one JSON "
    'object and nothing else: {"fixedSource": "<the corrected source, or an empty string>", '
    '"output": <the step output, satisfying the output contract below>}.'
)

_JSON = {"mode": "json"}


CODE_FIXER_INSTRUCTIONS = (
    "This is a code.run step: fixedSource must be the complete corrected TypeScript of its "
    "entrypoint. It is run in the sandbox on the step input (JSON on stdin); the JSON it "
    "prints on stdout is the step output, so your output field is not used."
)


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
    """Run the fixer loop; ``attempts`` is ``prior_fix_attempts`` plus the tries it took.

    For a ``code.run`` step each try's ``fixedSource`` is run; a try that fails again is told
    why and tries again, up to the fixer's ``maxAttempts`` (upstream's repair loop)."""
    spec = output_spec(task.step)
    code = runnable_code(task.step)
    extra = FIXER_INSTRUCTIONS + "\n\nOutput contract of the step:\n" + instructions(spec)
    if code:
        extra += "\n\n" + CODE_FIXER_INSTRUCTIONS
    system_text = system_prompt(
        system=_fixer_system(task, ctx),
        skills=ctx.skills,
        tools=ctx.tools,
        extra=extra,
        memory=ctx.memory_mounts,
    )
    request = {
        "step": json_safe(dict(task.step)),
        "stepInput": json_safe(task.step_input),
        "error": json_safe(dict(task.original_attempt_error)),
        "priorFixAttempts": task.prior_fix_attempts,
    }
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_text},
        {"role": "user", "content": canonical_json(request)},
    ]
    tries = max(_fixer_max_attempts(task.step) - task.prior_fix_attempts, 1) if code else 1
    for tried in range(1, tries + 1):
        reply = tool_loop(
            ctx,
            messages=messages,
            tools=ctx.tools,
            max_turns=max_turns or ctx.max_turns,
            task_kind="fix_step",
            scope={"role": "fixer", "stepPath": ctx.recorder.step_path},
            completion=completion,
        )
        output, fixed_source = _answer(reply.text or "")
        if not code:
            if spec.get("mode") in ("text", "choice") and isinstance(output, str):
                output = parse_output(spec, output)
            break
        try:  # the repaired program is run, and its output is the step's
            output = run_fixed_code(
                task.step,
                task.step_input,
                fixed_source,
                ctx.recorder,
                run_number=tried,
                ctx=ctx,
            )
            break
        except HarnessError as failed:
            if tried == tries or not failed.retriable:
                raise
            messages += [
                {"role": "assistant", "content": reply.text or ""},
                {"role": "user", "content": f"The repaired program failed: {failed}"},
            ]
    return FixStepResult(
        output=output, fixed_source=fixed_source, attempts=task.prior_fix_attempts + tried
    )


def _answer(text: str) -> tuple[Any, str]:
    """A fixer's answer: ``(output, fixedSource)``."""
    answer = parse_output(_JSON, text)
    if isinstance(answer, dict) and ("output" in answer or "fixedSource" in answer):
        source = answer.get("fixedSource")
        return answer.get("output"), source if isinstance(source, str) else ""
    return answer, ""


def _fixer_max_attempts(step: Mapping[str, Any]) -> int:
    on_failure = step.get("onFailure")
    fixer = on_failure.get("fixer") if isinstance(on_failure, Mapping) else None
    value = fixer.get("maxAttempts") if isinstance(fixer, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


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
    system_text = system_prompt(
        system=ctx.system, skills=ctx.skills, tools=ctx.tools, extra=extra, memory=ctx.memory_mounts
    )
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
