"""What a submission is checked for before anything is stored: the limits on input and LWIR.

``submit_run`` (the client and the ``little.submit_run`` task) and ``run_workflow``, on an
in-memory world: no fleet is needed to see that nothing was written.
"""

from __future__ import annotations

from typing import Any

import pytest

from little_dist import define_workflow, run_workflow
from little_dist.authoring import WorkflowDefinition
from little_dist.compiler import compile_lwir
from little_dist.fleet.client import submit_run
from little_dist.limits import InputLimitError, InputLimits
from little_dist.settings import load_settings
from little_dist.world.memory import MemoryWorld
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
