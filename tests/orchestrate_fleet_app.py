"""The ``--app`` module of the orchestrator-on-the-fleet tests
(``tests/test_orchestrate_fleet.py``). Fleet workers import it, so it imports nothing from
pytest.

Two orchestrators over the ``sub.kid`` workflow of :mod:`tests.subrun_fleet_app` (two counted
``tool.call`` steps per child), defined with :func:`~little_dist.subruns.orchestrator_workflow`
so that the workers' registry knows them and the workflow their tools run:

* ``orch.gated``: ``maxConcurrentSubRuns`` 2, no bash (outputs inline);
* ``orch.files``: ``maxConcurrentSubRuns`` 2, with bash: outputs come as files
  (``outputPath``) that its model reads with bash.

The orchestrators' model (``scripted/orch``) follows the scenario its input names
(:data:`SCENARIOS`: the calls of its first turn, all in one turn); once it
has every call's result it answers :data:`DONE` (``orch.files`` first reads the result files
with :data:`READ_RESULTS`). In :data:`PLAN_THEN_RUN` it plans ``sub.kid`` once
(``plan_workflow``), then runs that version on :data:`RUN_INPUTS` (``run_workflow``). The
rules look at the request, not at their order: a resumed attempt replays its turns from the
memo. Installed at import when ``$LITTLE_ORCH_APP_SCRIPT`` is set (the test fleet's
workers).
"""

from __future__ import annotations

import os
from typing import Any

from little_dist import model
from little_dist.subruns import orchestrator_workflow
from tests.subrun_fleet_app import kid

__all__ = [
    "DONE",
    "PLANNED_INPUT",
    "PLAN_THEN_RUN",
    "READ_RESULTS",
    "RUN_INPUTS",
    "SCENARIOS",
    "SLEEP_IN_BASH",
    "WORKFLOWS",
    "build_script",
    "files",
    "gated",
    "planned_kid_version_id",
]

SCRIPT_ENV = "LITTLE_ORCH_APP_SCRIPT"
DONE = "the orchestration is done"
READ_RESULTS = "cat /mnt/scratch/own/workflow-results/*/output.json"
SLEEP_IN_BASH = "sleep 8"


def _start(n: int, sleep: float) -> tuple[str, dict[str, Any]]:
    return ("start_workflow", {"workflowId": "sub.kid", "input": {"n": n, "sleep": sleep}})


#: scenario -> the calls of the orchestrator's first turn.
SCENARIOS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "four-kids": [_start(n, 0.5) for n in range(1, 5)],
    "slow-kids": [_start(n, 2.5) for n in range(1, 5)],
    "file-kids": [_start(n, 0.3) for n in range(1, 4)],
    # (orch.files: its worker is killed in the bash command, before the attempt suspends)
    "kill-in-bash": [_start(1, 0.3), _start(2, 0.3), ("bash", {"cmd": SLEEP_IN_BASH})],
}

#: ``plan_workflow`` once, then ``run_workflow`` of that version on three inputs (one turn).
PLAN_THEN_RUN = "plan-then-run"
PLANNED_INPUT: dict[str, Any] = {"n": 1, "sleep": 0.3}
RUN_INPUTS: list[dict[str, Any]] = [{"n": n, "sleep": 0.3} for n in range(1, 4)]


def planned_kid_version_id(run_input: Any) -> str:
    """The id of the version ``plan_workflow`` plans for ``sub.kid`` on ``run_input`` (its
    fixed plan bound to the input: the same in any world), for the script to run it."""
    import tempfile

    from little_dist.planner import resolve_version
    from little_dist.world.local import LocalWorld

    with tempfile.TemporaryDirectory() as folder:
        world = LocalWorld(folder)
        try:
            version = resolve_version(
                world, "run_plan_script", kid, run_input, capabilities=kid.capabilities()
            )
        finally:
            world.close()
    assert version is not None
    return version.id


_ORCH = model("scripted/orch", id="orch", description="Scripted orchestrator.")

gated = orchestrator_workflow([kid], model=_ORCH, id="orch.gated", max_concurrent_sub_runs=2)
files = orchestrator_workflow(
    [kid], model=_ORCH, id="orch.files", max_concurrent_sub_runs=2, bash={}
)
WORKFLOWS = [gated, files]


def _results(count: int) -> Any:
    return lambda request: len(request.tool_results) == count


def build_script() -> Any:
    """The orchestrators' script (see the module docstring)."""
    from little_dist.testing import ScriptedModel

    script = ScriptedModel()
    files_calls = len(SCENARIOS["file-kids"])
    script.on(model="orch", contains="file-kids", match=_results(files_calls + 1)).reply_text(
        DONE, times=None
    )
    script.on(model="orch", contains="file-kids", match=_results(files_calls)).call_tool(
        "bash", {"cmd": READ_RESULTS}, times=None
    )
    planned = planned_kid_version_id(PLANNED_INPUT)
    runs = [
        ("run_workflow", {"workflowVersionId": planned, "input": value}) for value in RUN_INPUTS
    ]
    on_plan = {"model": "orch", "contains": PLAN_THEN_RUN}
    script.on(**on_plan, match=_results(1 + len(runs))).reply_text(DONE, times=None)
    script.on(**on_plan, match=_results(1)).call_tools(runs, times=None)
    script.on(**on_plan, match=_results(0)).call_tool(
        "plan_workflow", {"workflowId": "sub.kid", "input": PLANNED_INPUT}, times=None
    )
    for name, calls in SCENARIOS.items():
        script.on(model="orch", contains=name, match=_results(len(calls))).reply_text(
            DONE, times=None
        )
        script.on(model="orch", contains=name, match=_results(0)).call_tools(calls, times=None)
    return script


if os.environ.get(SCRIPT_ENV):
    build_script().install(model="orch")
