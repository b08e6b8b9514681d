"""The ``--app`` module of ``tests/test_subruns_planned_fleet.py``: children whose workflow
has no fixed ``plan=``, planned on the fleet by their planner model. Fleet workers import
it, so it imports nothing from pytest.

* ``planned_kid`` (``sub.planned_kid``): the input of :mod:`tests.subrun_fleet_app`'s kid and
  no plan; its planner model (``scripted/kidplanner``, priced as ``openai/gpt-4o-mini``)
  answers with the kid's two ``kid_work`` steps (counted in Redis, see ``kid_key``) and
  :data:`PLANNER_USAGE`. With ``$LITTLE_PLANNED_APP_SLOW_PLANNER`` set, the planner takes a
  minute to answer (a test SIGKILLs the planner worker meanwhile).
* ``unplannable`` (``sub.unplannable``): its planner model (``scripted/badplanner``) fails
  every call with an authentication error: planning fails for good.
* ``plan_boss`` (``sub.planboss``): one ``ai.generate`` step whose model (``scripted/planboss``)
  calls them as tools; the prompt names a scenario (:data:`SCENARIOS`), and once it sees
  tool results it answers :data:`DONE`.
* ``guarded_plan_boss`` (``sub.guardedplanboss``): ``plan_boss``'s step under permission
  rules that deny :data:`SLOW_DENY`: a parent whose planned children inherit a deny.

The scripts are installed at import when ``$LITTLE_SUBRUN_APP_SCRIPT`` is set.
"""

from __future__ import annotations

import os
from typing import Any

from little_dist import as_tool, define_workflow, model
from tests.subrun_fleet_app import DONE, SCRIPT_ENV, kid_work, slow_tool

__all__ = [
    "DONE",
    "PLANNER_USAGE",
    "SCENARIOS",
    "SLOW_DENY",
    "guarded_plan_boss",
    "kid_lwir",
    "plan_boss",
    "planned_kid",
    "unplannable",
]

SLOW_PLANNER_ENV = "LITTLE_PLANNED_APP_SLOW_PLANNER"
#: The rule ``guarded_plan_boss`` denies (its planned children inherit it).
SLOW_DENY = {"tool": "slow_tool", "action": "deny"}
#: The planner's usage per answer: (input, output) tokens.
PLANNER_USAGE = (3000, 500)

_KID_IN = {
    "type": "object",
    "required": ["n", "sleep"],
    "additionalProperties": False,
    "properties": {"n": {"type": "integer"}, "sleep": {"type": "number"}},
}
_OBJECT = {"type": "object"}

#: scenario -> the calls of the boss's first turn.
SCENARIOS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "planned": [("sub__planned_kid", {"n": 7, "sleep": 0.1})],
    "unplannable": [("sub__unplannable", {"n": 8, "sleep": 0.1})],
}


def _kid_step(step_id: str, needs: list[str]) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "tool.call",
        "needs": needs,
        "with": {
            "tool": "kid_work",
            "args": {"n": "{{ input.n }}", "step": step_id, "sleep": "{{ input.sleep }}"},
        },
        "output": {"mode": "object", "schema": _OBJECT},
    }


def kid_lwir(name: str) -> dict[str, Any]:
    """What the planner drafts for the workflow ``name``: the kid's two counted steps."""
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "0.1.0"},
        "input": {"schema": _KID_IN},
        "output": {"schema": _OBJECT},
        "permissions": {"models": [], "tools": ["kid_work"], "secrets": [], "network": []},
        "steps": [_kid_step("first", []), _kid_step("second", ["first"])],
    }


planned_kid = define_workflow(
    id="sub.planned_kid",
    description="Two counted steps, planned by the planner model.",
    input=_KID_IN,
    output=_OBJECT,
    model=model("scripted/kidplanner", id="kidplanner", pricing="openai/gpt-4o-mini"),
    tools=[kid_work],
)

unplannable = define_workflow(
    id="sub.unplannable",
    description="A workflow whose planner model always fails.",
    input=_KID_IN,
    output=_OBJECT,
    model=model("scripted/badplanner", id="badplanner", pricing="openai/gpt-4o-mini"),
    tools=[kid_work],
)

_BOSS_IN = {
    "type": "object",
    "required": ["scenario"],
    "properties": {"scenario": {"type": "string"}},
}

_BOSS_PLAN: dict[str, Any] = {
    "apiVersion": "littleworkflow.dev/v0.1",
    "kind": "Workflow",
    "metadata": {"name": "sub.planboss", "version": "1.0.0"},
    "input": {"schema": _BOSS_IN},
    "output": {"schema": {"type": "string"}},
    "permissions": {"models": ["planboss"], "tools": ["sub.planned_kid", "sub.unplannable"]},
    "steps": [
        {
            "id": "boss",
            "uses": "ai.generate",
            "with": {"model": "planboss", "prompt": "scenario:{{ input.scenario }}"},
            "output": {"mode": "text"},
        }
    ],
}

plan_boss = define_workflow(
    id="sub.planboss",
    description="A model that calls planned workflows as tools.",
    input=_BOSS_IN,
    output=str,
    model=model("scripted/planboss", id="planboss", description="Scripted boss."),
    tools=[as_tool(planned_kid), as_tool(unplannable)],
    plan=_BOSS_PLAN,
)

guarded_plan_boss = define_workflow(
    id="sub.guardedplanboss",
    description="plan_boss under a deny its planned children inherit.",
    input=_BOSS_IN,
    output=str,
    model=model("scripted/planboss", id="planboss", description="Scripted boss."),
    tools=[as_tool(planned_kid), slow_tool],
    permissions=[SLOW_DENY],
    plan={
        **_BOSS_PLAN,
        "metadata": {"name": "sub.guardedplanboss", "version": "1.0.0"},
        "permissions": {"models": ["planboss"], "tools": ["sub.planned_kid", "slow_tool"]},
    },
)


def install_scripts() -> None:
    """The boss's and the planners' scripts (see the module docstring)."""
    from little_dist.testing import ScriptedModel, Usage

    boss = ScriptedModel()
    boss.on(model="planboss", match=lambda request: bool(request.tool_results)).reply_text(
        DONE, times=None
    )
    for name, calls in SCENARIOS.items():
        boss.on(model="planboss", contains=f"scenario:{name}").call_tools(calls, times=None)
    boss.install(model="planboss")
    planner = ScriptedModel()
    slow = 60.0 if os.environ.get(SLOW_PLANNER_ENV) else None
    planner.on(model="kidplanner").reply_json(
        kid_lwir("sub.planned_kid"),
        usage=Usage(input=PLANNER_USAGE[0], output=PLANNER_USAGE[1]),
        latency=slow,
        times=None,
    )
    planner.install(model="kidplanner")
    bad = ScriptedModel()
    bad.on(model="badplanner").raise_error(
        "auth", message="the planner's key was revoked", times=None
    )
    bad.install(model="badplanner")


if os.environ.get(SCRIPT_ENV):
    install_scripts()
