"""The default harness (upstream's ``workflowHarness@1.0.0``) on litellm.

* ``execute_step``: records ``harness.execute_step.started``, then by ``step.uses``:
  ``ai.generate`` runs the tool loop (:mod:`.ai_generate`); ``tool.call`` calls
  ``with.tool`` from ``ctx.tools`` with the resolved step input as arguments (recorded as a
  tool call with caller ``code``, memoized); ``code.run`` runs its pinned TypeScript with Deno
  in the kernel sandbox (:mod:`little_dist.sandbox.code_run`; upstream's default harness
  refuses it for want of an isolated runtime, which this is); ``decision``/``parallel`` are
  the engine's and are refused. Then ``harness.execute_step.succeeded``.
* ``fix_step``: the fixer loop; ``plan``/``orchestrate``: one model loop (:mod:`.fixer`).

The harness does not validate or repair outputs, and records no session events: the
:class:`~little_dist.harness.registry.HarnessRegistry` does both for whichever harness runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from little_dist.harness.ai_generate import run_ai_generate
from little_dist.harness.code_run import run_code_step
from little_dist.harness.errors import HarnessConfigError
from little_dist.harness.fixer import run_fix_step, run_model_task
from little_dist.harness.model_calls import Completion
from little_dist.harness.tool_calls import run_tool_call
from little_dist.harness.types import (
    DEFAULT_HARNESS_ID,
    ExecuteStepResult,
    ExecuteStepTask,
    FixStepTask,
    HarnessContext,
    HarnessResult,
    HarnessTask,
    OrchestrateTask,
    PlanTask,
)

__all__ = ["DefaultHarness"]


class DefaultHarness:
    """The built-in harness for every role.

    ``DefaultHarness()`` calls ``litellm.completion``; ``completion=`` swaps in another
    callable with litellm's signature (tests use the scripted provider instead, through
    litellm). ``max_turns`` overrides ``HarnessContext.max_turns``.
    """

    harness_id = DEFAULT_HARNESS_ID

    def __init__(self, *, completion: Completion | None = None, max_turns: int | None = None):
        self._completion = completion
        self._max_turns = max_turns

    def run(self, task: HarnessTask, ctx: HarnessContext) -> HarnessResult:
        if isinstance(task, ExecuteStepTask):
            return self._execute(task, ctx)
        if isinstance(task, FixStepTask):
            return run_fix_step(task, ctx, max_turns=self._max_turns, completion=self._completion)
        if isinstance(task, PlanTask | OrchestrateTask):
            return run_model_task(task, ctx, max_turns=self._max_turns, completion=self._completion)
        raise HarnessConfigError(f"unknown harness task {task!r}")

    def _execute(self, task: ExecuteStepTask, ctx: HarnessContext) -> ExecuteStepResult:
        step = task.step
        uses = step.get("uses")
        visit = task.step_context.visit_index
        ctx.recorder.execute_step_started(step, visit_index=visit, step_input=task.step_input)
        started = time.monotonic()
        if uses == "ai.generate":
            output = run_ai_generate(
                task, ctx, max_turns=self._max_turns, completion=self._completion
            )
        elif uses == "tool.call":
            output = self._tool_step(task, ctx)
        elif uses == "code.run":
            output = run_code_step(step, task.step_input, ctx.recorder, ctx=ctx)
        else:
            raise HarnessConfigError(
                f"step '{step.get('id')}' uses {uses!r}: the engine evaluates it, not a harness"
            )
        ctx.recorder.execute_step_succeeded(
            step,
            visit_index=visit,
            output=output,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
        )
        return ExecuteStepResult(output)

    def _tool_step(self, task: ExecuteStepTask, ctx: HarnessContext) -> Any:
        config = task.step.get("with")
        name = config.get("tool") if isinstance(config, Mapping) else None
        if not isinstance(name, str) or not name:
            raise HarnessConfigError(
                f"Workflow tool.call step '{task.step.get('id')}' requires with.tool."
            )
        scope = {
            "stepPath": task.step_context.step_path,
            "visitIndex": task.step_context.visit_index,
        }
        # The tool's result is the step's output: it rides with the commit.
        outcome = run_tool_call(
            ctx,
            tool_name=name,
            args=task.step_input,
            caller="code",
            call_index=1,
            scope=scope,
            last=True,
        )
        return outcome.raise_for_error()
