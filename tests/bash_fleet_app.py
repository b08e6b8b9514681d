"""The ``--app`` module of the fleet test of the bash tool (``tests/test_bash_fleet.py``).

Fleet workers import it (``little worker --app tests.bash_fleet_app``, run from the
repository root), so it imports nothing from pytest. ``shell`` is a workflow that enables
the bash tool; its one ``ai.generate`` step's scripted model (:func:`build_script`, installed
by the workers from ``LITTLE_SCRIPTED_MODEL``) runs two commands that share a shell, then
answers.
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model

__all__ = [
    "FIRST",
    "NOTE",
    "SECOND",
    "SHELL_STEP",
    "allowlisted",
    "attacks",
    "build_pair_script",
    "build_script",
    "pair",
    "shell",
    "shell_plan",
]

FIRST = "mkdir -p work && cd work && export GREETING=hello && echo one > a.txt"
SECOND = "echo $GREETING; cat a.txt; pwd"

SHELL_STEP: dict[str, Any] = {
    "id": "shell",
    "uses": "ai.generate",
    "with": {"model": "default", "prompt": "Use bash.", "tools": ["bash"]},
    "output": {"mode": "text"},
}


def shell_plan(name: str, step: dict[str, Any] | None = None) -> dict[str, Any]:
    """A one-step LWIR (``step``, by default :data:`SHELL_STEP`) with a string output."""
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["default"], "tools": [], "secrets": [], "network": []},
        "steps": [step or SHELL_STEP],
    }


shell = define_workflow(
    id="fleet.shell",
    description="A model that uses the sandboxed bash tool.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan=shell_plan("fleet.shell"),
    bash={"python": False},
)


def build_script() -> Any:
    from little_dist.testing import ScriptedModel

    script = ScriptedModel()
    script.on(step="shell").call_tool("bash", {"cmd": FIRST}).then_call_tool(
        "bash", {"cmd": SECOND}
    ).then_reply_text("done")
    return script


#: What the ``pair`` workflow's first step writes to its scratch.
NOTE = "written on one worker, read by a peer"


def _bash_step(step_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": step_id,
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": "Use bash.", "tools": ["bash"]},
        "output": {"mode": "text"},
        **extra,
    }


_pair_plan = shell_plan("fleet.scratch-pair", _bash_step("write"))
_pair_plan["steps"].append(_bash_step("read", needs=["write"]))
_pair_plan["output"]["from"] = "${{ steps.read.output }}"

pair = define_workflow(
    id="fleet.scratch-pair",
    description="A step writes a scratch file with bash; a later step reads it.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan=_pair_plan,
    bash={"python": False},
)


def build_pair_script() -> Any:
    from little_dist.testing import ScriptedModel

    script = ScriptedModel()
    script.on(step="write").call_tool(
        "bash", {"cmd": f"mkdir -p notes && echo '{NOTE}' > notes/n.txt"}
    ).then_reply_text("wrote")
    script.on(step="read").call_tool(
        "bash", {"cmd": "cat /mnt/scratch/peer-steps/write/notes/n.txt"}
    ).then_reply_text("read")
    return script


_attack_plan = shell_plan("fleet.attacks", _bash_step("attack"))
_attack_plan["steps"].append(_bash_step("after", needs=["attack"]))
_attack_plan["output"]["from"] = "${{ steps.after.output }}"

attacks = define_workflow(
    id="fleet.attacks",
    description="A model runs hostile commands with bash; the next step must still run.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan=_attack_plan,
    bash={},
)

_allowlisted_plan = shell_plan("fleet.allowlisted", _bash_step("attack"))
_allowlisted_plan["steps"].append(_bash_step("after", needs=["attack"]))
_allowlisted_plan["output"]["from"] = "${{ steps.after.output }}"

allowlisted = define_workflow(
    id="fleet.allowlisted",
    description="As attacks, with network granted to one URL prefix only.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan=_allowlisted_plan,
    bash={"network": {"allow": ["https://api.example.org/v1/"], "methods": ["GET"]}},
)
