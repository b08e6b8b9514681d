"""The process the sub-run kill test SIGKILLs: a parent run whose model calls a workflow tool
once; the child workflow's two ``tool.call`` steps write a line each to a side-effects file
(``first n``, ``second n``) and sleep. No tests here.

Usage: ``python -m tests.subrun_kill_app DATA_DIR SIDE_EFFECTS RUN_ID``; prints the parent's
output. Leases are short (6 s) so that a resumed process takes the killed one's runs over
within seconds.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import little_dist.local_runner as local_runner
from little_dist import as_tool, define_workflow, model, run_workflow, tool
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld

LEASE_TTL = 6.0
NUMBER_IN = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
OUT = {"type": "object"}


def _recorder(side_effects: Path, label: str, sleep: float) -> Any:
    def work(n: int) -> dict[str, Any]:
        with side_effects.open("a", encoding="utf-8") as out:
            out.write(f"{label} {n}\n")
        time.sleep(sleep)
        return {"step": label, "value": 2 * n}

    return tool(work, name=f"{label}_work")


def _tool_step(step_id: str, tool_name: str, needs: list[str]) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "tool.call",
        "needs": needs,
        "with": {"tool": tool_name, "args": {"n": "{{ input.n }}"}},
        "output": {"mode": "object", "schema": OUT},
        "retry": {"maxAttempts": 3},
    }


def workflows(side_effects: Path) -> Any:
    child_plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "slow.child", "version": "1.0.0"},
        "input": {"schema": NUMBER_IN},
        "output": {"schema": OUT},
        "permissions": {"tools": ["first_work", "second_work"]},
        "steps": [
            _tool_step("first", "first_work", []),
            _tool_step("second", "second_work", ["first"]),
        ],
    }
    child = define_workflow(
        id="slow.child",
        description="Two slow steps.",
        input=NUMBER_IN,
        output=OUT,
        model="scripted/kid",
        tools=[_recorder(side_effects, "first", 0.2), _recorder(side_effects, "second", 3.0)],
        plan=child_plan,
    )
    parent_in = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    parent_plan = {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "slow.parent", "version": "1.0.0"},
        "input": {"schema": parent_in},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["boss"], "tools": ["slow.child"]},
        "steps": [
            {
                "id": "boss",
                "uses": "ai.generate",
                "with": {"model": "boss", "prompt": "Run the child on {{ input.n }}"},
                "output": {"mode": "text"},
                "retry": {"maxAttempts": 3},
            }
        ],
    }
    return define_workflow(
        id="slow.parent",
        input=parent_in,
        output=str,
        model=model("scripted/boss", id="boss"),
        tools=[as_tool(child)],
        plan=parent_plan,
    )


def main(argv: list[str]) -> int:
    data_dir, side_effects, run_id = Path(argv[0]), Path(argv[1]), argv[2]
    # Short leases for the parent's and the child's runners (and so their attempts).
    defaults = local_runner.run_version.__kwdefaults__
    assert defaults is not None
    defaults["lease_ttl"] = LEASE_TTL
    script = ScriptedModel()
    # Rules by what the request holds, not by order: a resumed process replays turn 1 from
    # the memo and asks only for turn 2.
    script.on(model="boss", match=lambda request: bool(request.tool_results)).reply_text(
        "child done", times=None
    )
    script.on(model="boss").call_tool("slow__child", {"n": 21}, times=None)
    world = LocalWorld(data_dir)
    try:
        with script.installed():
            result = run_workflow(workflows(side_effects), {"n": 21}, world=world, run_id=run_id)
    finally:
        world.close()
    print(result.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
