"""The default ``ai.generate``: a litellm tool-calling loop with an output contract.

Per turn the loop asks the memo, else calls the model (:func:`~.model_calls.call_model`);
each tool call the model makes runs through :func:`~.tool_calls.run_tool_call` (memoized,
recorded, errors shown to the model as ``{"error": ...}``); the loop ends at the first reply
without tool calls, whose text is parsed per the step's output mode. Calls that start
sub-runs to be waited for elsewhere (:class:`~.errors.SubRunPending`) do not stop the turn's
other calls (their children are submitted :data:`START_EVERY` at a time meanwhile); once all
ran, the turn raises one ``SubRunPending`` for all their sub-runs.
More than ``max_turns`` turns raise :class:`~.errors.TurnLimitError`.

Which tools a step is offered: the step's ``with.tools`` list when it has one (limited to the
tools the context allows); otherwise all the context's tools for a ``text`` step and none for
a structured one — upstream's rule, since a structured step should produce its output from
its input, and an unasked-for tool call could repeat a side effect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from little_dist.harness.compaction import compact_conversation
from little_dist.harness.errors import SubRunPending, TurnLimitError
from little_dist.harness.model_calls import Completion, ModelReply, call_model
from little_dist.harness.output_modes import output_spec, parse_output
from little_dist.harness.prompts import step_messages, system_prompt
from little_dist.harness.tool_calls import run_tool_call

if TYPE_CHECKING:
    from little_dist.harness.types import ExecuteStepTask, HarnessContext
    from little_dist.tools import Tool

__all__ = ["START_EVERY", "run_ai_generate", "tool_loop", "tools_for_step", "wire_tools"]

#: Sub-runs a model turn's calls start per batch while the turn goes on (the last batch is
#: started by the attempt as it suspends).
START_EVERY = 25


def tools_for_step(step: Mapping[str, Any], ctx: HarnessContext) -> dict[str, Tool]:
    """The tools an ``ai.generate`` step is offered (see the module docstring)."""
    config = step.get("with")
    listed = config.get("tools") if isinstance(config, Mapping) else None
    if isinstance(listed, list):
        return {name: ctx.tools[name] for name in listed if name in ctx.tools}
    if output_spec(step).get("mode", "text") != "text":
        return {}
    return dict(ctx.tools)


def wire_tools(tools: Mapping[str, Tool]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """OpenAI tool definitions, sorted by name, and the map from wire names back to ours.

    OpenAI refuses ``.`` in function names, so ``crm.lookup`` goes out as ``crm__lookup``.
    """
    definitions: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for name in sorted(tools):
        definition = tools[name].to_openai()
        wire = name.replace(".", "__")
        definition["function"] = {**definition["function"], "name": wire}
        definitions.append(definition)
        names[wire] = name
    return definitions, names


def tool_loop(
    ctx: HarnessContext,
    *,
    messages: Sequence[Mapping[str, Any]],
    tools: Mapping[str, Tool],
    max_turns: int,
    task_kind: str,
    scope: Mapping[str, Any],
    completion: Completion | None = None,
) -> ModelReply:
    """Call the model until it answers without tool calls; returns that final reply."""
    conversation = [dict(message) for message in messages]
    definitions, names = wire_tools(tools)
    for _ in range(max_turns):
        # Older bulky tool results elided once the conversation runs long (deterministic:
        # a resumed attempt sends, and its memo matches, the same messages).
        sent = compact_conversation(conversation)
        reply = call_model(
            ctx, messages=sent, tools=definitions, name_map=names, completion=completion
        )
        if not reply.tool_calls:
            return reply
        conversation.append(reply.assistant_message())
        waiting: list[str] = []
        starts: list[Any] = []
        held = False
        held_calls = 0
        for position, call in enumerate(reply.tool_calls, start=1):
            try:
                outcome = run_tool_call(
                    ctx,
                    tool_name=call.name,
                    args=call.args,
                    caller="model",
                    turn=reply.turn,
                    call_index=position,
                    scope=scope,
                    in_flight=len(waiting),
                    queued=held_calls,
                )
            except SubRunPending as pending:
                # The turn's other calls start their sub-runs too: one suspension for all.
                waiting += pending.child_run_ids
                starts += pending.starts
                held = held or pending.held
                held_calls += 1 if pending.held and not pending.child_run_ids else 0
                if len(starts) >= START_EVERY and ctx.sub_runs is not None:
                    # A wide turn's children start running while its later calls are made.
                    ctx.recorder.flush()
                    ctx.sub_runs.start_many(starts)
                    starts = []
                continue
            conversation.append(
                {"role": "tool", "tool_call_id": call.id, "content": outcome.content_for_model()}
            )
        if waiting or held:
            raise SubRunPending(waiting, starts, held=held)
    raise TurnLimitError(f"Workflow {task_kind} task exceeded {max_turns} model turns.")


def run_ai_generate(
    task: ExecuteStepTask,
    ctx: HarnessContext,
    *,
    max_turns: int | None = None,
    completion: Completion | None = None,
) -> Any:
    """The step's output from the model (parsed per output mode, not yet validated)."""
    step = task.step
    spec = output_spec(step)
    tools = tools_for_step(step, ctx)
    config = step.get("with")
    note = config.get("outputRepairNote") if isinstance(config, Mapping) else None
    system_text = system_prompt(
        system=ctx.system,
        skills=ctx.skills,
        tools=tools,
        output=spec,
        memory=ctx.memory_mounts,
    )
    messages = step_messages(
        system_text, task.step_input, repair_note=note if isinstance(note, str) else None
    )
    scope = {
        "stepPath": task.step_context.step_path,
        "visitIndex": task.step_context.visit_index,
    }
    reply = tool_loop(
        ctx,
        messages=messages,
        tools=tools,
        max_turns=max_turns or ctx.max_turns,
        task_kind="execute_step",
        scope=scope,
        completion=completion,
    )
    return parse_output(spec, reply.text or "")
