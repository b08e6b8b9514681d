"""The ``--app`` module of the fleet tests of what a sub-run inherits
(``tests/test_subruns_inherit_fleet.py``). Fleet workers import it, so it imports nothing
from pytest.

* ``pipeline_boss`` (``inherit.orchestrator``): an orchestrating session on the fleet — one
  ``ai.generate`` step whose model has bash and sees ``/mnt/memory/pipeline/`` (``rw``, the
  pipeline store of ``[reader]``:
  :func:`~little_dist.subruns.orchestrator.with_orchestrator_memory`) and calls ``reader``
  as a tool (a sub-run, submitted to the fleet). Scenario ``write``: it writes ``plan.md``
  there; ``read``: it starts a reader.
* ``reader`` (``inherit.reader``): one step whose model runs :data:`READ_COMMAND` with bash
  (reads the pipeline's ``plan.md``, then tries to overwrite it).
* ``guarded`` (``inherit.guarded``): a parent whose permission rules deny ``lookup`` and
  whose model calls ``finder`` as a tool; ``finder`` (``inherit.finder``): a child whose
  model calls ``lookup`` (its own rules allow everything).

The scripts are installed at import from ``$LITTLE_INHERIT_APP_SCRIPT``: ``normal``, or
``hang-reader`` (the reader's model never answers: a worker that takes the reader's attempt
stays in it until it is killed). Rules look at the request, not at their order, so a worker
that resumes a step replays its first turn from the memo and asks only for the answer.
"""

from __future__ import annotations

import os
from typing import Any

from little_dist import as_tool, define_workflow, model
from little_dist.subruns.orchestrator import with_orchestrator_memory
from little_dist.tools import tool
from tests.bash_fleet_app import shell_plan

__all__ = [
    "LOOKUP_DENY",
    "NOTE",
    "READ_COMMAND",
    "finder",
    "guarded",
    "lookup",
    "pipeline_boss",
    "reader",
]

SCRIPT_ENV = "LITTLE_INHERIT_APP_SCRIPT"
NOTE = "plan: read me"
WRITE_COMMAND = f"echo '{NOTE}' > /mnt/memory/pipeline/plan.md"
READ_COMMAND = "cat /mnt/memory/pipeline/plan.md; echo mine > /mnt/memory/pipeline/plan.md"
LOOKUP_DENY = {"tool": "lookup", "action": "deny"}
_BOSS_IN = {"type": "object", "required": ["scenario"], "properties": {"scenario": {}}}
_KEY_IN = {"type": "object", "required": ["key"], "properties": {"key": {"type": "string"}}}

reader = define_workflow(
    id="inherit.reader",
    description="Reads the pipeline's plan.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/reader", id="default", description="Scripted reader."),
    plan=shell_plan("inherit.reader"),
    bash={"python": False},
)


def _one_step(name: str, slot: str, tools: list[str], registered: list[str], schema: Any) -> Any:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "1.0.0"},
        "input": {"schema": schema},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": [slot], "tools": registered},
        "steps": [
            {
                "id": "boss",
                "uses": "ai.generate",
                "with": {
                    "model": slot,
                    "prompt": "scenario:{{ input.scenario }}",
                    "tools": tools,
                },
                "output": {"mode": "text"},
            }
        ],
    }


pipeline_boss = with_orchestrator_memory(
    define_workflow(
        id="inherit.orchestrator",
        input=_BOSS_IN,
        output=str,
        model=model("scripted/boss", id="boss", description="Scripted boss."),
        tools=[as_tool(reader)],
        bash={"python": False},
        plan=_one_step(
            "inherit.orchestrator",
            "boss",
            ["bash", "inherit.reader"],
            ["inherit.reader"],
            _BOSS_IN,
        ),
    ),
    [reader],
)


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


finder = define_workflow(
    id="inherit.finder",
    description="Finds a key.",
    input=_KEY_IN,
    output=str,
    model=model("scripted/finder", id="finder", description="Scripted finder."),
    tools=[lookup],
    permissions=[{"tool": "*", "action": "allow"}],
    plan={
        **_one_step("inherit.finder", "finder", ["lookup"], ["lookup"], _KEY_IN),
        "steps": [
            {
                "id": "find",
                "uses": "ai.generate",
                "with": {"model": "finder", "prompt": "Find {{ input.key }}", "tools": ["lookup"]},
                "output": {"mode": "text"},
            }
        ],
    },
)

guarded = define_workflow(
    id="inherit.guarded",
    input=_BOSS_IN,
    output=str,
    model=model("scripted/boss", id="boss", description="Scripted boss."),
    tools=[as_tool(finder)],
    permissions=[LOOKUP_DENY],
    plan=_one_step("inherit.guarded", "boss", ["inherit.finder"], ["inherit.finder"], _BOSS_IN),
)


def _answered(request: Any) -> bool:
    return bool(request.tool_results)


def install_scripts(kind: str) -> None:
    """Install the models' scripts (see the module docstring)."""
    from little_dist.testing import ScriptedModel

    boss = ScriptedModel()
    boss.on(match=_answered).reply_text("boss done", times=None)
    boss.on(contains="scenario:write").call_tool("bash", {"cmd": WRITE_COMMAND}, times=None)
    boss.on(contains="scenario:read").call_tool("inherit__reader", {}, times=None)
    boss.on(contains="scenario:deny").call_tool("inherit__finder", {"key": "k1"}, times=None)
    boss.install(model="boss")
    child = ScriptedModel()
    child.on(match=_answered).reply_text("child done", times=None)
    if kind == "hang-reader":
        child.on(model="reader").reply_text("never answered", latency=120, times=None)
    else:
        child.on(model="reader").call_tool("bash", {"cmd": READ_COMMAND}, times=None)
    child.on(model="finder").call_tool("lookup", {"key": "k1"}, times=None)
    child.install(model="reader")
    child.install(model="finder")


if os.environ.get(SCRIPT_ENV):
    install_scripts(os.environ[SCRIPT_ENV])
