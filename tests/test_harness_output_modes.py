"""Output modes, self-repair and prompt layout of the default harness (scripted provider)."""

from __future__ import annotations

from typing import Any

import pytest

from little_dist.harness import (
    ExecuteStepTask,
    HarnessRegistry,
    SkillDescriptor,
    StepContext,
    StepSchemaError,
    envelope_for,
    output_findings,
    resolve_repair_policy,
)
from little_dist.harness.output_modes import parse_output
from little_dist.testing import ScriptedModel
from little_dist.world.in_process import MemoryWorld
from tests.harness_helpers import OBJECT_SCHEMA, RUN, ai_step, execute, make_ctx, of_type

ARRAY_SCHEMA = {"type": "array", "items": {"type": "string"}, "minItems": 1}
JSON_SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}

# mode -> (output spec, valid reply text, expected output, invalid reply text)
MODES: dict[str, tuple[dict[str, Any], str, Any, str]] = {
    "text": ({"mode": "text"}, "plain words", "plain words", ""),
    "object": (
        {"mode": "object", "schema": OBJECT_SCHEMA},
        '```json\n{"value": 42}\n```',
        {"value": 42},
        '{"wrong": "shape"}',
    ),
    "array": (
        {"mode": "array", "schema": ARRAY_SCHEMA},
        'Here: ["a", "b"]',
        ["a", "b"],
        "[]",
    ),
    "choice": (
        {"mode": "choice", "values": ["approve", "reject"]},
        '"Approve".',
        "approve",
        "maybe",
    ),
    "json": (
        {"mode": "json", "schema": JSON_SCHEMA},
        '{"ok": true}',
        {"ok": True},
        '{"ok": "yes"}',
    ),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_valid_output_per_mode(mode: str, scripted_model: ScriptedModel) -> None:
    spec, reply, expected, _ = MODES[mode]
    scripted_model.on(step="draft").reply_text(reply)
    world = MemoryWorld()
    result = HarnessRegistry().run_step(execute(ai_step(output=spec)), make_ctx(world))
    assert result.kind == "execute_step"
    assert result.output == expected
    events = world.list_events(RUN)
    assert not of_type(events, "StepRepairAttempted")
    succeeded = of_type(events, "harness.execute_step.succeeded")
    assert succeeded[0].payload["output"] == expected
    assert (
        of_type(events, "harness.session.completed")[0].payload["output"]["result"]["output"]
        == expected
    )


@pytest.mark.parametrize("mode", [mode for mode in MODES if mode != "text"])
def test_invalid_output_is_self_repaired(mode: str, scripted_model: ScriptedModel) -> None:
    spec, reply, expected, invalid = MODES[mode]
    scripted_model.on(step="draft").reply_text(invalid).then_reply_text(reply)
    world = MemoryWorld()
    result = HarnessRegistry().run_step(execute(ai_step(output=spec)), make_ctx(world))
    assert result.output == expected
    repairs = of_type(world.list_events(RUN), "StepRepairAttempted")
    assert len(repairs) == 1
    payload = repairs[0].payload
    assert payload["stepPath"] == "draft"
    assert payload["attempt"] == 1
    findings = payload["findings"]
    assert findings and all(isinstance(item, str) for item in findings)
    # The repair note reaches the model as a trailing user turn with findings and schema.
    note = scripted_model.calls[1].messages[-1]["content"]
    assert note.startswith("[OUTPUT REPAIR]")
    for finding in findings:
        assert finding in note
    if "schema" in spec:
        assert '"type":' in note


def test_non_record_object_output_gets_the_schema_back(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="draft").reply_json(["not", "an", "object"]).then_reply_json(
        {"value": 42}
    )
    world = MemoryWorld()
    spec = {"mode": "object", "schema": OBJECT_SCHEMA}
    result = HarnessRegistry().run_step(execute(ai_step(output=spec)), make_ctx(world))
    assert result.output == {"value": 42}
    note = scripted_model.calls[1].last_user_text
    assert "additionalProperties" in note and "number" in note
    assert "does not match object output mode" in note


def test_repair_exhausts_after_default_three_attempts(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="draft").reply_json({"wrong": "shape"}, times=None)
    world = MemoryWorld()
    spec = {"mode": "object", "schema": OBJECT_SCHEMA}
    with pytest.raises(StepSchemaError) as caught:
        HarnessRegistry().run_step(execute(ai_step(output=spec)), make_ctx(world))
    assert len(scripted_model.calls) == 4  # the first call and three repairs
    events = world.list_events(RUN)
    assert len(of_type(events, "StepRepairAttempted")) == 3
    envelope = envelope_for(caught.value)
    assert envelope["causeCode"] == "step_schema_error"
    assert envelope["retriable"] is False
    failed = of_type(events, "harness.session.failed")
    assert failed[0].payload["error"]["causeCode"] == "step_schema_error"
    # Each repair round has its own execute_step events; none was swallowed by idempotence.
    assert len(of_type(events, "harness.execute_step.succeeded")) == 4


def test_explicit_repair_budget_is_honoured(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="draft").reply_text("maybe", times=None)
    step = ai_step(
        output={"mode": "choice", "values": ["yes", "no"]},
        onFailure={"repair": {"mode": "self", "maxAttempts": 1}},
    )
    assert resolve_repair_policy(step) == ("self", 1)
    with pytest.raises(StepSchemaError):
        HarnessRegistry().run_step(execute(step), make_ctx(MemoryWorld()))
    assert len(scripted_model.calls) == 2


def test_repair_policy_defaults() -> None:
    assert resolve_repair_policy(ai_step()) == ("self", 3)
    assert resolve_repair_policy({"id": "t", "uses": "tool.call", "with": {"tool": "x"}}) is None


def test_findings_and_parsing_edges() -> None:
    assert output_findings({"output": {"mode": "text"}}, 3)
    assert output_findings({"output": {"mode": "json"}}, {"anything": [1]}) == []
    assert output_findings({"output": {"mode": "array", "schema": ARRAY_SCHEMA}}, [1]) == [
        "/0: 1 is not of type 'string'"
    ]
    assert parse_output({"mode": "json"}, "not json") == "not json"
    assert parse_output({"mode": "choice", "values": ["a"]}, "b") == "b"


def test_a_reply_nested_too_deeply_to_parse_is_text_not_a_recursion_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert parse_output({"mode": "json"}, deep) == deep
    reply = 'Here it is: {"a": ' + deep + "}"
    assert parse_output({"mode": "object", "schema": {}}, reply) == reply


def test_a_planner_reply_nested_too_deeply_is_text_for_validation_to_refuse() -> None:
    from little_dist.harness.replies import json_in_reply as _parse_reply

    deep = '{"steps": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert _parse_reply(deep) == deep
    assert _parse_reply("Here: " + deep + " done.") == "Here: " + deep + " done."


def test_prompt_layout_shares_a_prefix_and_puts_the_input_last(
    scripted_model: ScriptedModel,
) -> None:
    scripted_model.on(step="first").reply_text("one")
    scripted_model.on(step="second").reply_json({"value": 1})
    scripted_model.on(step="first", run="run_other").reply_text("two")
    skills = [SkillDescriptor("style", "House style", body="Be brief.")]
    world = MemoryWorld()
    registry = HarnessRegistry()
    system = "You work for ACME."
    first = ai_step("first")
    second = ai_step("second", output={"mode": "object", "schema": OBJECT_SCHEMA})
    registry.run_step(
        ExecuteStepTask(first, "input A", StepContext("first")),
        make_ctx(world, step_path="first", system=system, skills=skills),
    )
    registry.run_step(
        ExecuteStepTask(second, "input B", StepContext("second")),
        make_ctx(world, step_path="second", system=system, skills=skills),
    )
    registry.run_step(
        ExecuteStepTask(first, "input C", StepContext("first")),
        make_ctx(world, step_path="first", system=system, skills=skills, run_id="run_other"),
    )
    a, b, c = (call.messages for call in scripted_model.calls)
    # Stable parts lead: the two steps' system prompts agree up to their output contracts.
    prefix_a = a[0]["content"].split("Output contract:")[0]
    prefix_b = b[0]["content"].split("Output contract:")[0]
    assert prefix_a == prefix_b
    assert prefix_a.startswith(system) and "House style" in prefix_a
    # The run-specific input is the last message, and nothing before it depends on the run.
    assert a[-1] == {"role": "user", "content": "input A"}
    assert b[-1]["content"] == "input B"
    assert a[:-1] == c[:-1] and c[-1]["content"] == "input C"
