"""A project's folder workflows on a real fleet: ``little worker --app PROJECT`` serves every
workflow its little-workflow.json names (their tools from tools/, the starter's scripted
model installed by its workflow.py), and ``little submit FOLDER --wait`` runs one there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_dist.workspace import load_workflow
from little_dist.workspace.scaffold import add_workflow, init_project
from tests import zygote
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

SAMPLE = {"name": "Ada", "notes": "curious"}


def test_a_worker_serves_a_projects_workflows_and_submit_takes_a_folder(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    init_project(project)
    add_workflow(project, "second")
    start_worker(fleet_env, app=str(project))
    start_scheduler(fleet_env)
    client = fleet_env.client()

    # By id: the worker knows both of the project's workflows.
    for workflow_id in ("candidate.review", "second"):
        run_id = client.submit(workflow_id, SAMPLE)
        state = client.wait(run_id, timeout=120)
        assert state.status == "completed", state.error
        assert state.output.startswith("A strong candidate")

    # By folder, from the command line, with the folder's own tool in the worker.
    done = zygote.run(
        [
            "submit",
            str(project / "workflows" / "candidate-review"),
            "--input",
            json.dumps(SAMPLE),
            "--wait",
        ],
        env=fleet_env.env,
        cwd=tmp_path,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout).startswith("A strong candidate")
    definition = load_workflow(project / "workflows" / "candidate-review")
    assert definition.tools.names() == ["echo"]


def test_a_worker_refuses_a_folder_whose_workflow_cannot_load(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    project = tmp_path / "proj"
    init_project(project)
    (project / "workflows" / "candidate-review" / "tools" / "echo.py").write_text("VALUE = 1\n")
    worker = start_worker(fleet_env, app=str(project), wait=False)
    assert worker.popen.wait(timeout=120) != 0
    said = worker.output()
    assert "defines no tool named 'echo'" in said and "Traceback" not in said
