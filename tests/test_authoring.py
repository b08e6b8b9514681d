"""define_workflow, model slots, skills, the definition hash, and run_workflow end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from little_dist import (
    InputValidationError,
    InvalidInputError,
    RunFailedError,
    define_workflow,
    model,
    run_workflow,
    skill,
    tool,
)
from little_dist.authoring import WorkflowDefinition
from little_dist.canonical import sha256_digest
from little_dist.testing import ScriptedModel, Usage
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld


class Ticket(BaseModel):
    account_id: str = Field(description="The account.")
    message: str
    priority: Literal["low", "high"] = "low"


class Item(BaseModel):
    sku: str
    quantity: int = Field(ge=1)


class Order(BaseModel):
    items: list[Item]
    note: str | None = None


class Triage(BaseModel):
    severity: Literal["low", "medium", "high"]
    reply: str


TICKET_JSON = {
    "type": "object",
    "required": ["account_id", "message"],
    "properties": {"account_id": {"type": "string"}, "message": {"type": "string"}},
}
TRIAGE_JSON = {
    "type": "object",
    "required": ["severity", "reply"],
    "additionalProperties": False,
    "properties": {
        "severity": {"type": "string", "enum": ["low", "medium", "high"]},
        "reply": {"type": "string"},
    },
}


class Counter:
    def __init__(self) -> None:
        self.calls = 0


LOOKUPS = Counter()


def lookup_customer(
    account_id: Annotated[str, Field(description="The account to look up")],
) -> dict[str, Any]:
    """Find a customer by account id."""
    LOOKUPS.calls += 1
    return {"name": "Ada Ltd", "plan": "pro"}


def triage_workflow(**overrides: Any) -> WorkflowDefinition:
    options: dict[str, Any] = {
        "id": "support.triage",
        "description": "Triage a ticket.",
        "input": Ticket,
        "output": Triage,
        "model": model("scripted/triage", id="fast", pricing="openai/gpt-4o-mini"),
        "tools": [lookup_customer],
    }
    options.update(overrides)
    return define_workflow(**options)


def triage_plan(wf: WorkflowDefinition) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": wf.id, "version": "1.0.0"},
        "input": {"schema": wf.input_schema},
        "output": {"schema": wf.output_schema},
        "permissions": {"models": ["fast"], "tools": ["lookup_customer"]},
        "steps": [
            {
                "id": "lookup",
                "uses": "tool.call",
                "with": {
                    "tool": "lookup_customer",
                    "args": {"account_id": "{{ input.account_id }}"},
                },
                "output": {"mode": "object", "schema": {"type": "object"}},
            },
            {
                "id": "triage",
                "uses": "ai.generate",
                "needs": ["lookup"],
                "with": {
                    "model": "fast",
                    "prompt": "{{ steps.lookup.output.name }} wrote: {{ input.message }}",
                },
                "output": {"mode": "object", "schema": wf.output_schema},
            },
        ],
    }


def fixed_triage(**overrides: Any) -> WorkflowDefinition:
    return triage_workflow(plan=triage_plan(triage_workflow(**overrides)), **overrides)


INPUT = {"account_id": "A-1", "message": "The export is broken."}
REPLY = {"severity": "high", "reply": "We are on it."}


# -- define_workflow ---------------------------------------------------------------------------


def test_pydantic_models_become_lwir_subset_schemas() -> None:
    wf = define_workflow(id="shop.order", input=Order, output=list[Triage], model="openai/gpt-4o")
    items = wf.input_schema["properties"]["items"]
    assert items["type"] == "array"
    assert items["items"]["properties"]["quantity"] == {"type": "integer", "minimum": 1}
    assert wf.input_schema["required"] == ["items"]
    assert wf.input_schema["properties"]["note"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}]
    }
    assert "$defs" not in wf.input_schema and "title" not in wf.input_schema
    assert wf.output_schema["type"] == "array"
    assert wf.output_schema["items"]["required"] == ["severity", "reply"]


def test_json_schemas_are_taken_as_given_and_none_means_anything() -> None:
    wf = define_workflow(id="x", input=TICKET_JSON, output=TRIAGE_JSON, model="openai/gpt-4o")
    assert wf.input_schema == TICKET_JSON and wf.output_schema == TRIAGE_JSON
    assert wf.input_adapter is None and wf.output_adapter is None
    bare = define_workflow(id="y", model="openai/gpt-4o")
    assert bare.input_schema is True and bare.output_schema is True
    text = define_workflow(id="z", output=str, model="openai/gpt-4o")
    assert text.output_schema == {"type": "string"}


def test_schemas_outside_the_lwir_subset_are_refused_at_definition() -> None:
    class Email(BaseModel):
        address: str = Field(pattern=r"^.+@.+$")

    with pytest.raises(InvalidInputError, match="input is outside the LWIR schema subset"):
        define_workflow(id="x", input=Email, model="openai/gpt-4o")
    with pytest.raises(InvalidInputError, match="output"):
        define_workflow(id="x", output={"type": "object", "format": 3}, model="openai/gpt-4o")


def test_plain_functions_become_tools_with_derived_schemas() -> None:
    wf = triage_workflow()
    derived = wf.tools["lookup_customer"]
    assert derived.description == "Find a customer by account id."
    assert derived.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "required": ["account_id"],
        "properties": {"account_id": {"type": "string", "description": "The account to look up"}},
    }
    snapshot = wf.snapshot()
    assert snapshot.global_tools == ("lookup_customer",)
    (entry,) = wf.tool_snapshots()
    assert entry["inputSchemaHash"] == sha256_digest(derived.input_schema)


def test_model_slots_get_upstream_style_ids() -> None:
    wf = define_workflow(
        id="x",
        model=["openai/gpt-4o-mini", model("anthropic/claude-sonnet-4", id="smart"), "gpt-4o-mini"],
    )
    ids = list(wf.models)
    assert ids[0] == "gpt-4o-mini" and ids[1] == "smart"
    assert ids[2].startswith("gpt-4o-mini-") and ids[2] != ids[0]
    assert wf.planner_slot_id == "gpt-4o-mini"
    resolved = wf.capabilities().resolve_model("smart")
    assert resolved.litellm_model == "anthropic/claude-sonnet-4"
    assert resolved.identity() == {"provider": "anthropic", "modelId": "claude-sonnet-4"}
    priced = model("scripted/demo", pricing="openai/gpt-4o-mini").resolved("demo")
    assert priced.identity() == {"provider": "openai", "modelId": "gpt-4o-mini"}
    with pytest.raises(InvalidInputError, match="already in use"):
        define_workflow(id="x", model=[model("a/b", id="s"), model("c/d", id="s")])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": "bad id!"}, "workflow id must match"),
        ({"model": []}, "model is required"),
        ({"model": 3}, "litellm model string"),
        ({"skills": ["be nice"]}, "skills must be made with skill"),
        ({"max_revisions": 0}, "max_revisions"),
        ({"plan": "steps: []"}, "plan must be an LWIR document"),
    ],
    ids=["id", "no-model", "model-type", "skills", "revisions", "plan"],
)
def test_bad_definitions_are_refused_with_a_clear_message(
    kwargs: dict[str, Any], message: str
) -> None:
    options: dict[str, Any] = {"id": "ok", "model": "openai/gpt-4o"}
    options.update(kwargs)
    with pytest.raises(InvalidInputError, match=message):
        define_workflow(**options)


# -- the definition hash ----------------------------------------------------------------------


def test_definition_hash_is_stable_and_order_independent() -> None:
    first = triage_workflow(tools=[lookup_customer, tool(lambda q: q, name="echo")])
    second = triage_workflow(tools=[tool(lambda q: q, name="echo"), lookup_customer])
    assert first.definition_hash() == second.definition_hash()
    assert first.definition_hash().startswith("sha256:")
    assert first.definition_hash() == first.snapshot().definition_hash()
    assert triage_workflow().definition_hash() == triage_workflow().definition_hash()


@pytest.mark.parametrize(
    "change",
    [
        {"description": "Triage a ticket quickly."},
        {"output": TRIAGE_JSON},
        {"input": TICKET_JSON},
        {"model": model("scripted/other", id="fast", pricing="openai/gpt-4o-mini")},
        {"model": model("scripted/triage", id="slow", pricing="openai/gpt-4o-mini")},
        {"tools": []},
        {"skills": [skill("tone", "House style", "Be brief.")]},
        {"system": "Prefer tool steps."},
        {"planner_model": "openai/gpt-5"},
    ],
    ids=[
        "description",
        "output",
        "input",
        "model",
        "slot-id",
        "tools",
        "skills",
        "system",
        "planner",
    ],
)
def test_definition_hash_changes_with_what_the_planner_sees(change: dict[str, Any]) -> None:
    assert triage_workflow(**change).definition_hash() != triage_workflow().definition_hash()


def test_definition_hash_sees_skill_bodies_and_harness_ids() -> None:
    one = triage_workflow(skills=[skill("tone", "House style", "Be brief.")])
    two = triage_workflow(skills=[skill("tone", "House style", "Be thorough.")])
    assert one.definition_hash() != two.definition_hash()

    class Planner:
        harness_id = "custom.planner@2"

        def run(self, task: Any, ctx: Any) -> Any:
            raise AssertionError("not called")

    custom = triage_workflow(harness={"planner": Planner()})
    assert custom.snapshot().planner_config.harness_id == "custom.planner@2"
    assert custom.definition_hash() != triage_workflow().definition_hash()


# -- inputs -------------------------------------------------------------------------------------


def test_bad_input_names_the_fields_and_writes_nothing() -> None:
    world = MemoryWorld()
    with pytest.raises(InputValidationError) as caught:
        run_workflow(
            fixed_triage(), {"account_id": 7, "priority": "urgent"}, world=world, run_id="run_bad"
        )
    problems = dict(caught.value.problems)
    assert set(problems) == {"input", "input.account_id", "input.priority"}
    assert "'message' is a required property" in problems["input"]
    assert "input.account_id: 7 is not of type 'string'" in str(caught.value)
    assert world.list_run_ids() == []


def test_pydantic_input_instances_and_unhashable_input() -> None:
    wf = fixed_triage()
    assert wf.validate_input(Ticket(account_id="A", message="m")) == {
        "account_id": "A",
        "message": "m",
        "priority": "low",
    }
    with pytest.raises(InputValidationError, match="input"):
        wf.validate_input({"account_id": "A", "message": float("nan")})
    with pytest.raises(InvalidInputError, match="define_workflow"):
        run_workflow({"id": "x"}, INPUT, world=MemoryWorld())  # type: ignore[arg-type]


# -- running ------------------------------------------------------------------------------------


def test_run_workflow_end_to_end_with_output_usage_and_cost(scripted_model: ScriptedModel) -> None:
    world = MemoryWorld()
    scripted_model.on(step="triage").reply_json(REPLY, usage=Usage(1500, 120, cached=1200))
    result = run_workflow(fixed_triage(), INPUT, world=world, run_id="run_triage_ok")
    assert result.run_id == "run_triage_ok"
    assert result.status == "completed"
    assert isinstance(result.output, Triage) and result.output == Triage(**REPLY)
    assert result.state.output == REPLY
    assert result.workflow_version_id is not None
    assert result.workflow_version_id.startswith("wfver_")
    usage = result.usage
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (1500, 1200, 120)
    # gpt-4o-mini: $0.15/M input, $0.075/M cached input, $0.60/M output.
    assert usage.cost_usd == pytest.approx((300 * 0.15 + 1200 * 0.075 + 120 * 0.60) / 1e6)
    (call,) = scripted_model.calls
    assert call.run_id == "run_triage_ok" and "Ada Ltd wrote" in call.last_user_text


def test_an_unpriced_model_reports_cost_none(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="triage").reply_json(REPLY, usage=Usage(100, 10))
    wf = fixed_triage(model=model("scripted/triage", id="fast"))
    result = run_workflow(wf, INPUT, world=MemoryWorld())
    assert result.usage.input_tokens == 100
    assert result.usage.cost_usd is None


def test_a_model_the_registry_lacks_is_priced_from_litellms_cost_map(
    scripted_model: ScriptedModel,
) -> None:
    from little_dist.model_registry import get_model_info_for

    assert get_model_info_for("openai", "gpt-4.1") is None  # not in upstream's registry
    scripted_model.on(step="triage").reply_json(REPLY, usage=Usage(1000, 100))
    wf = fixed_triage(model=model("scripted/triage", id="fast", pricing="openai/gpt-4.1"))
    result = run_workflow(wf, INPUT, world=MemoryWorld())
    # litellm's bundled map: gpt-4.1 at $2/M input, $8/M output.
    assert result.usage.cost_usd == pytest.approx((1000 * 2.0 + 100 * 8.0) / 1e6)


def test_the_pricing_fallback_is_the_runs_own_and_leaves_no_trace_in_the_process(
    scripted_model: ScriptedModel,
) -> None:
    from little_dist.run_state import materialize_run_state

    scripted_model.on(step="triage").reply_json(REPLY, usage=Usage(1000, 100), times=None)
    wf = fixed_triage(model=model("scripted/triage", id="fast", pricing="openai/gpt-4.1"))
    world = MemoryWorld()
    priced = run_workflow(wf, INPUT, world=world, run_id="run_priced")
    assert priced.usage.cost_usd == pytest.approx((1000 * 2.0 + 100 * 8.0) / 1e6)
    # A run that asks for registry rates only gets them, after one that asked for more...
    unpriced = run_workflow(wf, INPUT, world=world, run_id="run_unpriced", pricing_fallback=None)
    assert unpriced.usage.cost_usd is None and unpriced.usage.unpriced_calls == 1
    # ...and a fold that names no fallback prices from the registry alone, whatever ran
    # before it in this process (no process-wide default).
    assert materialize_run_state(world.list_events("run_priced")).usage.cost_usd is None


def test_a_json_schema_output_stays_plain_json(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="triage").reply_json(REPLY)
    result = run_workflow(fixed_triage(output=TRIAGE_JSON), INPUT, world=MemoryWorld())
    assert result.output == REPLY


def test_a_failed_run_raises_run_failed_error_with_the_recorded_error(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    scripted_model.on(step="triage").reply_json({"severity": "catastrophic"}, times=None)
    with pytest.raises(RunFailedError) as caught:
        run_workflow(fixed_triage(), INPUT, world=world, run_id="run_triage_fail")
    error = caught.value
    assert error.run_id == "run_triage_fail"
    assert error.workflow_version_id.startswith("wfver_")
    assert error.failed_step_path == "triage"
    assert error.cause_code
    assert error.error["message"]
    assert error.result is not None and error.result.status == "failed"
    assert error.result.state.steps["triage"].status == "failed"
    assert "run_triage_fail" in str(error)


def test_a_finished_run_id_returns_the_recorded_result_without_calling_anything(
    scripted_model: ScriptedModel, tmp_path: Path
) -> None:
    world = LocalWorld(tmp_path / "world")
    scripted_model.on(step="triage").reply_json(REPLY, usage=Usage(800, 40, cached=600))
    first = run_workflow(fixed_triage(), INPUT, world=world, run_id="run_triage_once")
    calls, lookups = len(scripted_model.calls), LOOKUPS.calls
    events = len(world.list_events("run_triage_once"))

    again = run_workflow(fixed_triage(), INPUT, world=world, run_id="run_triage_once")

    assert again.output == first.output
    assert again.usage == first.usage
    assert again.workflow_version_id == first.workflow_version_id
    assert len(scripted_model.calls) == calls
    assert LOOKUPS.calls == lookups
    assert len(world.list_events("run_triage_once")) == events
    with pytest.raises(InvalidInputError, match="different input"):
        run_workflow(
            fixed_triage(), {**INPUT, "message": "other"}, world=world, run_id="run_triage_once"
        )


def test_a_finished_failed_run_id_raises_again_without_running(
    scripted_model: ScriptedModel,
) -> None:
    world = MemoryWorld()
    scripted_model.on(step="triage").reply_json({"severity": "nope"}, times=None)
    with pytest.raises(RunFailedError):
        run_workflow(fixed_triage(), INPUT, world=world, run_id="run_fail_twice")
    calls = len(scripted_model.calls)
    with pytest.raises(RunFailedError) as caught:
        run_workflow(fixed_triage(), INPUT, world=world, run_id="run_fail_twice")
    assert len(scripted_model.calls) == calls
    assert caught.value.failed_step_path == "triage"


def test_the_default_world_is_the_local_directory(
    scripted_model: ScriptedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    scripted_model.on(step="triage").reply_json(REPLY)
    result = fixed_triage().run(INPUT, run_id="run_default_world")
    assert result.status == "completed"
    assert LocalWorld(tmp_path / ".little-workflow").list_run_ids() == ["run_default_world"]


def test_progress_sees_the_run_advance(scripted_model: ScriptedModel) -> None:
    scripted_model.on(step="triage").reply_json(REPLY)
    seen: list[str] = []
    run_workflow(
        fixed_triage(), INPUT, world=MemoryWorld(), progress=lambda state: seen.append(state.status)
    )
    assert seen and seen[-1] == "completed"
