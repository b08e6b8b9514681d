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
(:data:`SCENARIOS`: the ``start_workflow`` calls of its first turn, all in one turn); once it
has every call's result it answers :data:`DONE` (``orch.files`` first reads the result files
with :data:`READ_RESULTS`). The rules look at the request, not at their order: a resumed
attempt replays its turns from the memo. Installed at import when ``$LITTLE_ORCH_APP_SCRIPT``
is set (the test fleet's workers).
"""

from __future__ import annotations

import os
from typing import Any

from little_dist import model
from little_dist.subruns import orchestrator_workflow
from tests.subrun_fleet_app import kid

__all__ = ["DONE", "READ_RESULTS", "SCENARIOS", "WORKFLOWS", "build_script", "files", "gated"]

SCRIPT_ENV = "LITTLE_ORCH_APP_SCRIPT"
DONE = "the orchestration is done"
READ_RESULTS = "cat /mnt/scratch/own/workflow-results/*/output.json"


def _start(n: int, sleep: float) -> tuple[str, dict[str, Any]]:
    return ("start_workflow", {"workflowId": "sub.kid", "input": {"n": n, "sleep": sleep}})


#: scenario -> the calls of the orchestrator's first turn.
SCENARIOS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "four-kids": [_start(n, 0.5) for n in range(1, 5)],
    "slow-kids": [_start(n, 2.5) for n in range(1, 5)],
    "file-kids": [_start(n, 0.3) for n in range(1, 4)],
}

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
    for name, calls in SCENARIOS.items():
        script.on(model="orch", contains=name, match=_results(len(calls))).reply_text(
            DONE, times=None
        )
        script.on(model="orch", contains=name, match=_results(0)).call_tools(calls, times=None)
    return script


if os.environ.get(SCRIPT_ENV):
    build_script().install(model="orch")
