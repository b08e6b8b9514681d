"""The ``--app`` module of the budget-tree tests (``tests/test_budget_tree*.py``): a parent
whose model calls child workflows as tools, every model priced as ``openai/gpt-4o-mini`` (the
bundled registry's rates: the fleet's workers and scheduler price them too).

* ``kid`` (``budget.kid``): one ``ai.generate`` call of ``scripted/quota`` (64 output
  tokens at most) about ``input.item``;
* ``small`` (``budget.small``): its own ``budget_usd`` (:data:`SMALL_BUDGET`, two of its
  calls' worst case and a half) and a parallel step of such calls, one per ``input.keys``,
  every branch ending whatever the others did;
* ``boss`` (``budget.boss``): one ``ai.generate`` step of ``scripted/boss``, whose first turn
  calls the tools :data:`SCENARIOS` names for the scenario in its prompt, all at once; once it
  sees tool results it answers :data:`DONE`.

Fleet workers install :func:`build_script` at import when ``$LITTLE_BUDGET_TREE_SCRIPT`` is
set (each call taking ``$LITTLE_BUDGET_TREE_LATENCY`` seconds); in process a test installs it.
"""

from __future__ import annotations

import os
from typing import Any

from little_dist import as_tool, define_workflow, model
from tests.lwir_builder import fan_in_schema, workflow_doc
from tests.quota_fleet_app import REPLY

__all__ = [
    "DONE",
    "PLANNED_LWIR",
    "SCENARIOS",
    "SMALL_BUDGET",
    "boss",
    "build_script",
    "kid",
    "planned",
    "small",
]

SCRIPT_ENV = "LITTLE_BUDGET_TREE_SCRIPT"
LATENCY_ENV = "LITTLE_BUDGET_TREE_LATENCY"  # seconds each scripted call takes
DONE = "every kid answered"
_PRICE = "openai/gpt-4o-mini"
_KID_SLOT = model("scripted/quota", id="default", max_tokens=64, pricing=_PRICE)
_BOSS_SLOT = model("scripted/boss", id="boss", max_tokens=64, pricing=_PRICE)
#: Two of ``small``'s calls at their worst case and a half (each is about 4.1e-5 dollars).
SMALL_BUDGET = 0.0001

_ITEM = {"type": "object", "required": ["item"], "properties": {"item": {"type": "string"}}}
_KEYS = {
    "type": "object",
    "required": ["keys"],
    "properties": {"keys": {"type": "array", "items": {"type": "string"}}},
}


def _ask(prompt: str) -> dict[str, Any]:
    return {
        "id": "ask",
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": prompt},
        "output": {"mode": "text"},
    }


kid = define_workflow(
    id="budget.kid",
    description="One model call about an item.",
    input=_ITEM,
    output=str,
    model=_KID_SLOT,
    plan=workflow_doc(
        "budget.kid",
        [_ask("Think about {{ input.item }}.")],
        input_schema=_ITEM,
        output_schema={"type": "string"},
        version="1.0.0",
    ),
)

small = define_workflow(
    id="budget.small",
    description="Model calls about some keys, under a budget of its own.",
    input=_KEYS,
    output={"type": "array"},
    model=_KID_SLOT,
    budget_usd=SMALL_BUDGET,
    plan=workflow_doc(
        "budget.small",
        [
            {
                "id": "fan",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.keys }}",
                    "itemKey": "{{ item }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": 20,
                    "maxConcurrency": 1,
                    "failureMode": "all_settled",
                    "fanIn": {"order": "input", "output": "array"},
                },
                "output": {"mode": "array", "schema": fan_in_schema({"type": "string"})},
                "steps": [_ask("Think about item {{ item }}.")],
            }
        ],
        input_schema=_KEYS,
        output_schema={"type": "array"},
        models=["default"],
        version="1.0.0",
    ),
)


#: ``planned`` (``budget.planned``): ``kid``'s step, planned by its planner (the model's
#: reply is :data:`PLANNED_LWIR`) when it starts.
PLANNED_LWIR = workflow_doc(
    "budget.planned",
    [_ask("Think about {{ input.item }}.")],
    input_schema=_ITEM,
    output_schema={"type": "string"},
    version="1.0.0",
)
planned = define_workflow(
    id="budget.planned",
    description="One model call about an item, planned.",
    input=_ITEM,
    output=str,
    model=_KID_SLOT,
)


def _kid(item: str) -> tuple[str, dict[str, Any]]:
    return ("budget__kid", {"item": item})


#: scenario -> the tool calls of the boss's first turn.
SCENARIOS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "kids": [_kid(f"k{n}") for n in range(1, 9)],
    "small": [("budget__small", {"keys": [f"s{n}" for n in range(1, 6)]})],
    "planned": [("budget__planned", {"item": "p1"})],
    "two": [_kid("t1"), _kid("t2")],
}

_BOSS_IN = {"type": "object", "required": ["scenario"], "properties": {"scenario": {}}}

boss = define_workflow(
    id="budget.boss",
    description="A model that calls child workflows as tools.",
    input=_BOSS_IN,
    output=str,
    model=_BOSS_SLOT,
    tools=[as_tool(kid), as_tool(small), as_tool(planned)],
    plan=workflow_doc(
        "budget.boss",
        [
            {
                "id": "boss",
                "uses": "ai.generate",
                "with": {"model": "boss", "prompt": "scenario:{{ input.scenario }}"},
                "output": {"mode": "text"},
            }
        ],
        input_schema=_BOSS_IN,
        output_schema={"type": "string"},
        tools=["budget.kid", "budget.small", "budget.planned"],
        models=["boss"],
        version="1.0.0",
    ),
)


def build_script() -> Any:
    """The provider of both models (see the module docstring)."""
    from little_dist.testing import ScriptedModel

    script = ScriptedModel(latency=float(os.environ.get(LATENCY_ENV, "0")))
    script.on(model="boss", match=lambda request: bool(request.tool_results)).reply_text(
        DONE, times=None
    )
    for name, calls in SCENARIOS.items():
        script.on(model="boss", contains=f"scenario:{name}").call_tools(calls, times=None)
    script.on(step="planner").reply_json(PLANNED_LWIR, times=None)
    script.otherwise().reply_text(REPLY, times=None)
    return script


if os.environ.get(SCRIPT_ENV):
    build_script().install()
