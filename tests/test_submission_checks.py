"""What a submission is checked for before anything is stored: the limits on input and LWIR,
and that a document selects among its workflow's capabilities without naming more.

``submit_run`` (the client and the ``little.submit_run`` task) and ``run_workflow``, on an
in-memory world: no fleet is needed to see that nothing was written. The same refusal at an
attempt (a version that reached the log another way) ends the file.
"""

from __future__ import annotations

from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow
from little_dist.authoring import WorkflowDefinition
from little_dist.compiler import compile_lwir
from little_dist.fleet.app_registry import AppRegistry
from little_dist.fleet.client import submit_run
from little_dist.harness.types import DEFAULT_HARNESS_ID
from little_dist.limits import InputLimitError, InputLimits
from little_dist.runtime import Capabilities, CapabilityError
from little_dist.runtime.grants import overreach
from little_dist.settings import load_settings
from little_dist.tools import ToolRegistry, tool
from little_dist.world.in_process import MemoryWorld
from tests import workflows_for_tests as wf

RUN = "run_checks"
DEEP = 100_000


def nested_lists(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def fixed_plan_workflow() -> WorkflowDefinition:
    plan = wf.single_tool_lwir("noop", {"n": 1})
    plan["metadata"]["name"] = "checks.fixed"
    plan["input"]["schema"] = plan["output"]["schema"] = True
    plan["permissions"]["tools"] = ["noop"]
    return define_workflow(id="checks.fixed", model="scripted/checks", tools=[wf.noop], plan=plan)


def submissions() -> list[Any]:
    doc = wf.single_tool_lwir("noop", {"n": 1})
    return [doc, compile_lwir(doc, input={}), fixed_plan_workflow(), "checks.planned"]


@pytest.mark.parametrize("index", range(4), ids=["lwir", "version", "definition", "workflow-id"])
def test_a_very_deep_input_is_refused_before_anything_is_stored(index: int) -> None:
    world = MemoryWorld()
    with pytest.raises(InputLimitError) as caught:
        submit_run(world, submissions()[index], {"deep": nested_lists(DEEP)}, run_id=RUN)
    assert str(caught.value) == (
        "the run input is nested more than 64 levels deep (LITTLE_MAX_JSON_DEPTH=64)"
    )
    assert world.list_events(RUN) == []


@pytest.mark.parametrize("index", range(4), ids=["lwir", "version", "definition", "workflow-id"])
def test_the_limits_come_from_the_settings(index: int) -> None:
    world = MemoryWorld()
    settings = load_settings({"LITTLE_MAX_INPUT_BYTES": "20"})
    with pytest.raises(InputLimitError, match="more than LITTLE_MAX_INPUT_BYTES=20"):
        submit_run(world, submissions()[index], {"text": "x" * 20}, run_id=RUN, settings=settings)
    assert world.list_events(RUN) == []
    submit_run(world, submissions()[index], {"t": 1}, run_id=RUN, settings=settings)
    assert world.list_events(RUN) != []


def test_a_submitted_document_over_the_step_limit_is_refused() -> None:
    world = MemoryWorld()
    settings = load_settings({"LITTLE_MAX_STEPS": "4"})
    for document in (wf.chain_lwir(5), compile_lwir(wf.chain_lwir(5), input={})):
        with pytest.raises(InputLimitError) as caught:
            submit_run(world, document, {}, run_id=RUN, settings=settings)
        assert str(caught.value) == "the workflow has 5 steps, more than LITTLE_MAX_STEPS=4"
    assert world.list_events(RUN) == []


def test_a_very_deep_document_is_refused_as_over_the_limit() -> None:
    world = MemoryWorld()
    doc = wf.single_tool_lwir("noop", {"n": nested_lists(DEEP)})
    with pytest.raises(InputLimitError, match="the workflow is nested more than 64 levels"):
        submit_run(world, doc, {}, run_id=RUN)
    assert world.list_events(RUN) == []


def test_run_workflow_refuses_a_very_deep_input_before_anything_is_stored() -> None:
    world = MemoryWorld()
    with pytest.raises(InputLimitError, match="nested more than 64 levels deep"):
        run_workflow(fixed_plan_workflow(), nested_lists(DEEP), world=world, run_id=RUN)
    with pytest.raises(InputLimitError, match="nested more than 2 levels deep"):
        run_workflow(
            fixed_plan_workflow(),
            {"a": [[1]]},  # 3 deep
            world=world,
            run_id=RUN,
            limits=InputLimits(max_json_depth=2),
        )
    assert world.list_events(RUN) == []
    # At the limit it runs.
    result = run_workflow(
        fixed_plan_workflow(),
        {"a": [[1]]},
        world=world,
        run_id=RUN,
        limits=InputLimits(max_json_depth=3),
    )
    assert result.output == {"n": 1}


def test_run_workflow_reads_the_limits_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LITTLE_MAX_INPUT_BYTES", "10")
    world = MemoryWorld()
    with pytest.raises(InputLimitError, match="more than LITTLE_MAX_INPUT_BYTES=10"):
        run_workflow(fixed_plan_workflow(), {"text": "0123456789"}, world=world, run_id=RUN)
    assert world.list_events(RUN) == []


# -- capabilities come from the registered workflow ----------------------------------------------


@tool
def lookupCustomer(account: str) -> dict[str, Any]:
    """Look a customer up (counts its calls)."""
    CALLS.append(f"lookupCustomer:{account}")
    return {"account": account}


@tool
def deleteAll() -> dict[str, Any]:
    """Delete everything (registered by no workflow here; must never run)."""
    CALLS.append("deleteAll")
    return {}


CALLS: list[str] = []


def triage(
    plan: dict[str, Any] | None = None, tools: list[Any] | None = None
) -> WorkflowDefinition:
    """support.triage with model slot ``fast`` and ``tools`` (lookupCustomer); with a fixed
    ``plan``, an object input and a string output."""
    if plan is None:
        return define_workflow(
            id="support.triage",
            model=model("scripted/triage", id="fast"),
            tools=tools or [lookupCustomer],
        )
    return define_workflow(
        id="support.triage",
        model=model("scripted/triage", id="fast"),
        tools=tools or [lookupCustomer],
        input={"type": "object"},
        output={"type": "string"},
        plan=plan,
    )


def triage_lwir(**changes: Any) -> dict[str, Any]:
    """support.triage's document: ``lookup`` calls lookupCustomer, ``answer`` asks ``fast``."""
    doc: dict[str, Any] = {
        "apiVersion": wf.API_VERSION,
        "kind": "Workflow",
        "metadata": {"name": "support.triage"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["fast"], "tools": ["lookupCustomer"]},
        "steps": [
            {
                "id": "lookup",
                "uses": "tool.call",
                "with": {"tool": "lookupCustomer", "args": {"account": "A-1"}},
                "output": {"mode": "object", "schema": {"type": "object"}},
            },
            {
                "id": "answer",
                "uses": "ai.generate",
                "needs": ["lookup"],
                "with": {"model": "fast", "prompt": "Answer {{ steps.lookup.output.account }}"},
                "output": {"mode": "text"},
            },
        ],
    }
    for change in changes.values():
        change(doc)
    return doc


def _tool(name: str) -> Any:
    def change(doc: dict[str, Any]) -> None:
        doc["steps"][0]["with"]["tool"] = name
        doc["permissions"]["tools"].append(name)

    return change


def _permitted_tool(doc: dict[str, Any]) -> None:
    doc["permissions"]["tools"].append("deleteAll")


def _offered_tool(doc: dict[str, Any]) -> None:
    doc["steps"][1]["with"]["tools"] = ["lookupCustomer", "deleteAll"]


def _own_model(doc: dict[str, Any]) -> None:
    doc["steps"][1]["with"]["model"] = "openai/gpt-4o"
    doc["permissions"]["models"].append("openai/gpt-4o")


def _permitted_model(doc: dict[str, Any]) -> None:
    doc["permissions"]["models"].append("anthropic/claude-opus")


def _nested_tool(doc: dict[str, Any]) -> None:
    doc["input"]["schema"] = {
        "type": "object",
        "properties": {"ids": {"type": "array", "items": {"type": "string"}}},
    }
    doc["steps"].append(
        {
            "id": "fan",
            "uses": "parallel",
            "with": {
                "items": "{{ input.ids }}",
                "itemKey": "{{ item }}",
                "cardinality": {"kind": "matches_items"},
                "maxBranches": 10,
                "maxConcurrency": 2,
                "failureMode": "fail_fast",
                "fanIn": {"order": "input", "output": "array"},
            },
            "output": {"mode": "array", "schema": wf.FAN_IN_SCHEMA},
            "steps": [
                {
                    "id": "wipe",
                    "uses": "tool.call",
                    "with": {"tool": "deleteAll", "args": {}},
                    "output": {"mode": "json"},
                }
            ],
        }
    )
    doc["permissions"]["tools"].append("deleteAll")
    doc["steps"][1]["needs"] = ["lookup", "fan"]


def _fixer_model(doc: dict[str, Any]) -> None:
    from tests.test_scheduling import code_step

    doc["steps"].append(
        code_step(onFailure={"fixer": {"model": "openai/o3", "maxAttempts": 1, "system": "fix it"}})
    )
    doc["permissions"]["models"].append("openai/o3")
    doc["steps"][1]["needs"] = ["lookup", "code"]


WIDENINGS = {
    "tool-call": (
        {"c": _tool("deleteAll")},
        "step 'lookup' calls tool 'deleteAll', which workflow 'support.triage' does not "
        "register (registered: lookupCustomer)",
    ),
    "permissions-tools": (
        {"c": _permitted_tool},
        "permissions.tools names tool 'deleteAll', which workflow 'support.triage' does not "
        "register (registered: lookupCustomer)",
    ),
    "with-tools": (
        {"c": _offered_tool},
        "step 'answer' offers its model tool 'deleteAll', which workflow 'support.triage' "
        "does not register (registered: lookupCustomer)",
    ),
    "with-model": (
        {"c": _own_model},
        "step 'answer' uses model slot 'openai/gpt-4o', which workflow 'support.triage' does "
        "not register (registered: fast)",
    ),
    "permissions-models": (
        {"c": _permitted_model},
        "permissions.models names model slot 'anthropic/claude-opus', which workflow "
        "'support.triage' does not register (registered: fast)",
    ),
    "nested-step": (
        {"c": _nested_tool},
        "step 'fan.wipe' calls tool 'deleteAll', which workflow 'support.triage' does not "
        "register (registered: lookupCustomer)",
    ),
    "fixer-model": (
        {"c": _fixer_model},
        "step 'code' fixes its code with model slot 'openai/o3', which workflow "
        "'support.triage' does not register (registered: fast)",
    ),
    "several": (
        {"a": _tool("deleteAll"), "b": _own_model, "c": _permitted_model},
        "step 'lookup' calls tool 'deleteAll', which workflow 'support.triage' does not "
        "register (registered: lookupCustomer) (and 2 more)",
    ),
}


def test_the_document_as_registered_passes() -> None:
    registry = AppRegistry(workflows={"support.triage": triage()})
    registry.check_version(compile_lwir(triage_lwir(), input={}))


@pytest.mark.parametrize("case", sorted(WIDENINGS))
def test_every_way_a_document_names_more_than_its_workflow_is_found(case: str) -> None:
    changes, first = WIDENINGS[case]
    doc = triage_lwir(**changes)
    version = compile_lwir(doc, input={"ids": ["a"]})  # valid LWIR: only the registry objects
    registry = AppRegistry(workflows={"support.triage": triage()})
    with pytest.raises(CapabilityError) as caught:
        registry.check_version(version)
    assert str(caught.value) == first
    assert "\n" not in str(caught.value)


def test_a_step_and_the_allowlist_naming_one_tool_are_one_problem() -> None:
    caps = triage().capabilities()
    doc = triage_lwir(a=_tool("deleteAll"), b=_offered_tool, c=_permitted_model)
    assert overreach(doc, caps, "workflow 'w'") == [
        "step 'lookup' calls tool 'deleteAll', which workflow 'w' does not register "
        "(registered: lookupCustomer)",
        "step 'answer' offers its model tool 'deleteAll', which workflow 'w' does not register "
        "(registered: lookupCustomer)",
        "permissions.models names model slot 'anthropic/claude-opus', which workflow 'w' does "
        "not register (registered: fast)",
    ]


def test_a_version_planned_for_another_worker_harness_is_found() -> None:
    version = compile_lwir(triage_lwir(), input={})
    lock = {**version.lock, "capabilityManifest": {"workerHarness": {"harnessId": "root@9"}}}
    problems = overreach(version.lwir, triage().capabilities(), "workflow 'x'", lock)
    assert problems == [
        "the version was planned for worker harness 'root@9', which workflow 'x' does not "
        f"register (registered: {DEFAULT_HARNESS_ID})"
    ]


def test_a_planned_version_of_the_workflow_passes() -> None:
    from little_dist.planner import resolve_version

    definition = triage(triage_lwir())
    world = MemoryWorld()
    version = resolve_version(world, RUN, definition, {}, capabilities=definition.capabilities())
    assert version is not None and "workerHarness" in version.lock["capabilityManifest"]
    AppRegistry(workflows={"support.triage": definition}).check_version(version)


@pytest.mark.parametrize("as_version", [False, True], ids=["lwir", "version"])
def test_submit_refuses_a_widening_document_before_anything_is_stored(as_version: bool) -> None:
    world = MemoryWorld()
    registry = AppRegistry(workflows={"support.triage": triage()})
    doc = triage_lwir(c=_offered_tool)
    document: Any = compile_lwir(doc, input={}) if as_version else doc
    with pytest.raises(CapabilityError, match="offers its model tool 'deleteAll'"):
        submit_run(world, document, {}, run_id=RUN, registry=registry)
    assert world.list_events(RUN) == []
    submit_run(world, triage_lwir(), {}, run_id=RUN, registry=registry)
    assert [e.type for e in world.list_events(RUN)][-1] == "RunStarted"


def test_plain_lwir_selects_among_the_app_wide_capabilities() -> None:
    world = MemoryWorld()
    registry = AppRegistry(default=Capabilities(tools=ToolRegistry([lookupCustomer])))
    doc = triage_lwir(c=_tool("deleteAll"))
    doc["metadata"]["name"] = "not.registered"
    with pytest.raises(CapabilityError) as caught:
        submit_run(world, doc, {}, run_id=RUN, registry=registry)
    # The tool first; then the model slot 'fast', which nothing registers either.
    assert str(caught.value) == (
        "step 'lookup' calls tool 'deleteAll', which the app does not register "
        "(registered: lookupCustomer) (and 1 more)"
    )
    assert world.list_events(RUN) == []
    doc = triage_lwir()
    doc["metadata"]["name"] = "not.registered"
    with pytest.raises(CapabilityError) as caught:
        submit_run(world, doc, {}, run_id=RUN, registry=registry)
    assert str(caught.value) == (
        "step 'answer' uses model slot 'fast', which the app does not register (registered: none)"
    )
    assert world.list_events(RUN) == []
    # With no model slot bound, a litellm model string goes to litellm as written (the
    # documented plain LWIR).
    doc = triage_lwir(c=_own_model)
    doc["metadata"]["name"] = "not.registered"
    doc["permissions"]["models"].remove("fast")
    submit_run(world, doc, {}, run_id=RUN, registry=registry)


def test_a_fixed_plan_is_checked_against_its_workflow() -> None:
    world = MemoryWorld()
    plan = triage_lwir(c=_offered_tool)
    greedy = triage(plan)
    with pytest.raises(CapabilityError, match="offers its model tool 'deleteAll'"):
        submit_run(world, greedy, {}, run_id=RUN)
    with pytest.raises(CapabilityError, match="offers its model tool 'deleteAll'"):
        run_workflow(greedy, {}, world=world, run_id=RUN)
    assert world.list_events(RUN) == []
    # The workers run it with the registered workflow's capabilities, which are what count.
    wider = triage(plan, tools=[lookupCustomer, deleteAll])
    registry = AppRegistry(workflows={"support.triage": triage()})
    with pytest.raises(CapabilityError, match=r"workflow .support\.triage. does not register"):
        submit_run(world, wider, {}, run_id=RUN, registry=registry)
    assert world.list_events(RUN) == []


def test_a_plan_found_within_its_capabilities_is_not_walked_again_and_a_refusal_is_never_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from little_dist.fleet import submission_requests

    walks: list[str] = []
    real = submission_requests.check_grants

    def counted(document: Any, capabilities: Any, owner: str) -> None:
        walks.append(owner)
        real(document, capabilities, owner)

    monkeypatch.setattr(submission_requests, "check_grants", counted)
    fitting = triage(triage_lwir())
    registry = AppRegistry(workflows={"support.triage": fitting})
    world = MemoryWorld()
    for index in range(3):
        submit_run(world, fitting, {}, run_id=f"{RUN}_{index}", registry=registry)
    assert len(walks) == 1  # the registry's capabilities are one object: checked once
    # Another registry's capabilities are other capabilities: checked again.
    other = AppRegistry(workflows={"support.triage": fitting})
    submit_run(world, fitting, {}, run_id=f"{RUN}_other", registry=other)
    assert len(walks) == 2
    greedy = triage(triage_lwir(c=_offered_tool))
    for _ in range(2):
        with pytest.raises(CapabilityError, match="offers its model tool 'deleteAll'"):
            submit_run(world, greedy, {}, run_id=f"{RUN}_greedy", registry=registry)
    assert len(walks) == 4
    assert world.list_events(f"{RUN}_greedy") == []


# -- the worker side: a version that reached the log another way ---------------------------------


def forged_run(world: MemoryWorld, doc: dict[str, Any], path: str) -> Any:
    """Register ``doc`` and start its run with ``path`` scheduled, bypassing submission."""
    from little_dist.events import EventInput

    version = compile_lwir(doc, input={})
    world.register_version(version.id, version.to_json())
    world.append_batch(
        RUN,
        [
            EventInput(
                type="RunStarted",
                occurrence_id="run-start",
                payload={"workflowVersionId": version.id, "input": {}},
            ),
            EventInput(
                type="StepScheduled",
                occurrence_id=f"sched:{path}:1",
                payload={"stepPath": path, "stepId": path, "uses": "ai.generate"},
            ),
        ],
    )
    return version


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_offered_tool, "step 'answer' names tool 'deleteAll', which is not registered"),
        (_permitted_tool, "step 'answer' names tool 'deleteAll', which is not registered"),
        (_own_model, "model slot 'openai/gpt-4o' is not registered (registered: fast)"),
    ],
    ids=["with-tools", "permissions-tools", "with-model"],
)
def test_a_forged_version_fails_its_step_with_runtime_config_error_and_calls_nothing(
    change: Any, message: str
) -> None:
    from little_dist.runtime import AttemptOutcome, execute_step_attempt
    from little_dist.scheduling import StepDispatch

    CALLS.clear()
    world = MemoryWorld()
    doc = triage_lwir(c=change)
    doc["steps"] = [doc["steps"][1]]
    doc["steps"][0]["with"]["prompt"] = "Answer."
    del doc["steps"][0]["needs"]
    version = forged_run(world, doc, "answer")
    capabilities = triage().capabilities()
    outcome = execute_step_attempt(
        world,
        StepDispatch(RUN, "answer", "answer", 1, "worker", "execute_step"),
        version=version,
        capabilities=capabilities,
    )
    assert outcome is AttemptOutcome.failed
    events = world.list_events(RUN)
    (failed,) = [e for e in events if e.type == "StepFailed"]
    assert failed.payload["error"]["causeCode"] == "runtime_config_error"
    assert failed.payload["error"]["retriable"] is False
    assert message in failed.payload["error"]["message"]
    # No model was asked and no tool ran: the refusal comes before the harness.
    assert not [e for e in events if e.type.startswith("harness.")]
    assert CALLS == []


def test_a_client_checks_against_the_app_module_of_its_settings() -> None:
    from little_dist.fleet.client import Client

    world = MemoryWorld()
    doc = triage_lwir(c=_tool("deleteAll"))
    doc["steps"][1]["with"]["model"] = "default"  # (the examples' one model slot)
    doc["permissions"] = {"models": ["default"], "tools": ["deleteAll"]}
    settings = load_settings({"LITTLE_APP": "examples.support_triage"})
    with Client(settings, world=world, app=object()) as client:  # type: ignore[arg-type]
        with pytest.raises(CapabilityError) as caught:
            client.submit(doc, {}, run_id=RUN)
        assert client.registry is not None and "support.triage" in client.registry.workflows
    assert str(caught.value) == (
        "step 'lookup' calls tool 'deleteAll', which workflow 'support.triage' does not "
        "register (registered: lookup_customer, search_knowledge_base)"
    )
    assert world.list_events(RUN) == []
