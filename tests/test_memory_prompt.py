"""The memory stores in the model's system prompt: a step whose model is offered bash is told
each mounted store's path and mode (``rw``/``ro``), in mount-path order; without bash, or
without stores, the prompt says nothing about memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from little_dist import define_workflow, model, run_workflow
from little_dist.harness.prompts import system_prompt
from little_dist.memory.layout import MemoryMountSpec
from little_dist.testing import ScriptedModel
from little_dist.tools import tool
from little_dist.world.local import LocalWorld
from tests.bash_fleet_app import shell_plan


def prompted_workflow(**options: Any) -> Any:
    return define_workflow(
        id="memory.demo",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/memory", id="default"),
        plan=shell_plan("memory.demo"),
        **options,
    )


def _system_text(script: ScriptedModel) -> str:
    (call,) = script.calls
    system = call.messages[0]
    assert system["role"] == "system"
    return str(system["content"])


def test_a_model_offered_bash_is_told_each_store_with_its_mode_in_path_order(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="shell").reply_text("done")
    workflow = prompted_workflow(bash={}, memory={"attach": [{"id": "Other_Flow", "mode": "ro"}]})
    run_workflow(workflow, {}, world=LocalWorld(tmp_path / "data"))
    text = _system_text(scripted_model)
    assert (
        "<memory_stores>\n"
        '<store path="/mnt/memory/org/" mode="ro"/>\n'
        '<store path="/mnt/memory/peer-workflows/other-flow/" mode="ro"/>\n'
        '<store path="/mnt/memory/workflow/" mode="rw"/>\n'
        "</memory_stores>"
    ) in text
    assert "reach them with bash" in text
    # Stable parts first: the stores come before the tools and the output contract.
    assert text.index("<memory_stores>") < text.index("Tools you may call:")
    assert text.index("<memory_stores>") < text.index("Output contract:")


def test_the_modes_follow_the_workflows_memory_config(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="shell").reply_text("done")
    prompted_workflow(bash={}, memory={"workflow": "ro", "org": "none"}).run(
        {}, world=LocalWorld(tmp_path / "data")
    )
    text = _system_text(scripted_model)
    assert '<store path="/mnt/memory/workflow/" mode="ro"/>\n</memory_stores>' in text
    assert "/mnt/memory/org/" not in text


def test_no_stores_or_no_bash_means_no_memory_in_the_prompt(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="shell").reply_text("done")
    prompted_workflow(bash={}, memory={"workflow": "none", "org": "none"}).run(
        {}, world=LocalWorld(tmp_path / "data" / "a")
    )

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    # Memory stores by default, a tool but no bash: nothing reaches them, nothing is said.
    step = {
        "id": "shell",
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": "hi", "tools": ["lookup"]},
        "output": {"mode": "text"},
    }
    workflow = define_workflow(
        id="memory.plain",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/memory", id="default"),
        plan=shell_plan("memory.plain", step),
        tools=[lookup],
    )
    scripted_model.on(step="shell").reply_text("done")
    run_workflow(workflow, {}, world=LocalWorld(tmp_path / "data" / "b"))
    assert len(scripted_model.calls) == 2
    for call in scripted_model.calls:
        text = str(call.messages[0]["content"])
        assert "<memory_stores>" not in text and "Memory stores" not in text
        assert "/mnt/memory/" not in text


def test_system_prompt_lists_stores_only_beside_bash() -> None:
    mounts = [
        MemoryMountSpec("workflow:w", "/mnt/memory/workflow/", "rw"),
        MemoryMountSpec("org", "/mnt/memory/org/", "ro"),
    ]
    bash: Any = {"bash": tool(lambda cmd: cmd, name="bash")}
    with_bash = system_prompt(system="S", tools=bash, memory=mounts)
    assert with_bash == system_prompt(system="S", tools=bash, memory=list(reversed(mounts)))
    assert with_bash.index("/mnt/memory/org/") < with_bash.index("/mnt/memory/workflow/")
    assert "<memory_stores>" not in system_prompt(system="S", memory=mounts)
    assert system_prompt(system="S", tools=bash) == system_prompt(system="S", tools=bash, memory=())
