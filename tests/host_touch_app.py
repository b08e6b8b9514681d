"""Workflows that mount every sandbox-writable folder (``little_dist.sandbox.WRITABLE_MOUNTS``)
for the attack test over ``HOST_TOUCHES`` (``tests/test_sandbox_host_links.py``), run by
``python -m tests.attack_runner tests.host_touch_app:NAME``. Imports nothing from pytest.

* ``stores``: two bash steps (``attack``, then ``after``) with the workflow's own memory store
  and the organisation's, both read-write, beside the step's scratch;
* ``orchestration``: an orchestrator (model ``boss``) with bash over the doubling workflow: its
  pipeline store is read-write, and ``start_workflow`` writes the child's output into its
  scratch (``workflow-results/<run id>/output.json``).
"""

from __future__ import annotations

from typing import Any

from little_dist import define_workflow, model
from tests.bash_fleet_app import _bash_step, shell_plan
from tests.test_subruns import double_workflow

__all__ = ["orchestration", "stores"]

_plan = shell_plan("attack.stores", _bash_step("attack", retry={"maxAttempts": 2}))
_plan["steps"].append(_bash_step("after", needs=["attack"]))
_plan["output"]["from"] = "${{ steps.after.output }}"

stores = define_workflow(
    id="attack.stores",
    description="A model with bash and read-write memory stores (its own and the org's).",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan=_plan,
    bash={},
    memory={"workflow": "rw", "org": "rw"},
)


class _Orchestration:
    """``run(input, world=...)`` as a workflow's, for the attack runner."""

    def run(self, run_input: Any, *, world: Any) -> Any:
        from little_dist.subruns.orchestrator import run_orchestration

        return run_orchestration(
            [double_workflow()],
            run_input,
            model=model("scripted/boss", id="boss"),
            world=world,
            bash={},
        )


orchestration = _Orchestration()
