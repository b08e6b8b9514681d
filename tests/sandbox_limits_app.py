"""Workflows of the sandbox limits' attack tests (``tests/test_sandbox_limits.py``) that need
other bash capabilities than ``tests.bash_fleet_app:attacks``; imports nothing from pytest.

``no_javascript``: as ``attacks`` (an ``attack`` step, then an ``after`` step that must still
run), with ``javascript: false``, which hides the JavaScript runtimes' names.
"""

from __future__ import annotations

from little_dist import define_workflow, model
from tests.bash_fleet_app import _bash_step, shell_plan

__all__ = ["no_javascript"]

_plan = shell_plan("limits.no-javascript", _bash_step("attack"))
_plan["steps"].append(_bash_step("after", needs=["attack"]))
_plan["output"]["from"] = "${{ steps.after.output }}"

no_javascript = define_workflow(
    id="limits.no-javascript",
    description="A model runs bash commands with the JavaScript runtimes hidden.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan=_plan,
    bash={"javascript": False},
)
