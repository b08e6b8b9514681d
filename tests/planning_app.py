"""Workflows planned on the fleet by custom planner harnesses: the planning-failure tests.

Loaded by fleet workers (``--app tests.planning_app``). No model is called: each planner
harness answers by itself.

* ``tests.plan-once-slowly``: the first plan (in any process) sleeps a minute, the next ones
  answer at once; ``$LITTLE_TEST_PLAN_MARKS`` names the directory that remembers the first
  (a test SIGKILLs the worker during that minute).
* ``tests.plan-broken``: the planner harness answers with something that is not a plan.

Both take ``{"ticket": string}`` and plan one ``noop`` tool step.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from little_dist import define_workflow, model, tool
from little_dist.harness.types import PlanResult
from tests.lwir_builder import tool_step, workflow_doc

__all__ = ["INPUT_SCHEMA", "plan_broken", "plan_once_slowly"]

INPUT_SCHEMA = {
    "type": "object",
    "required": ["ticket"],
    "properties": {"ticket": {"type": "string"}},
}


@tool
def noop(n: int = 0) -> dict[str, Any]:
    """Do nothing."""
    return {"n": n}


def _lwir(name: str) -> dict[str, Any]:
    step = tool_step("only", "noop", {"n": 1})
    return workflow_doc(name, [step], input_schema=INPUT_SCHEMA)


class _SlowOnce:
    harness_id = "tests.slowOncePlanner@1"

    def run(self, task: Any, ctx: Any) -> Any:
        marks = Path(os.environ["LITTLE_TEST_PLAN_MARKS"])
        first = marks / "first"
        try:
            first.touch(exist_ok=False)
        except FileExistsError:
            (marks / f"again-{os.getpid()}").touch()
        else:
            time.sleep(60)
        return PlanResult(lwir=_lwir("tests.plan-once-slowly"))


class _Broken:
    harness_id = "tests.brokenPlanner@1"

    def run(self, task: Any, ctx: Any) -> Any:
        return {"kind": "shrug"}


_MODEL = model("scripted/unused", id="model.unused", description="Never called.")

plan_once_slowly = define_workflow(
    id="tests.plan-once-slowly",
    description="Planned by a harness that takes a minute the first time.",
    input=INPUT_SCHEMA,
    output={"type": "object"},
    model=_MODEL,
    tools=[noop],
    harness={"planner": _SlowOnce()},
)

plan_broken = define_workflow(
    id="tests.plan-broken",
    description="Planned by a harness that never answers with a plan.",
    input=INPUT_SCHEMA,
    output={"type": "object"},
    model=_MODEL,
    tools=[noop],
    harness={"planner": _Broken()},
)
