"""The ``--app`` module of the fleet test of memory stores (``tests/test_memory_fleet.py``).

Fleet workers import it, so it imports nothing from pytest. ``writer`` is a one-step
workflow whose model (:func:`build_script`, installed from ``LITTLE_SCRIPTED_MODEL``) writes
``/mnt/memory/workflow/shared.txt`` with bash, a different line per run id, then holds its
attempt open a few seconds so that two runs' attempts overlap.
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from tests.bash_fleet_app import shell_plan

__all__ = ["HOLD_SECONDS", "RUNS", "build_script", "line_of", "writer"]

RUNS = ("run_memory_a", "run_memory_b")
HOLD_SECONDS = 4

writer = define_workflow(
    id="fleet.memory-writer",
    description="Writes one memory file with bash.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan=shell_plan("fleet.memory-writer"),
    bash={"python": False},
)


def line_of(run_id: str) -> str:
    return f"written by {run_id}"


def build_script() -> Any:
    from little_dist.testing import ScriptedModel

    script = ScriptedModel()
    for run_id in RUNS:
        command = (
            f"cat /mnt/memory/workflow/shared.txt 2>/dev/null; "
            f"echo '{line_of(run_id)}' > /mnt/memory/workflow/shared.txt; sleep {HOLD_SECONDS}"
        )
        script.on(step="shell", run=run_id).call_tool("bash", {"cmd": command}).then_reply_text(
            "wrote"
        )
    return script
