"""``little orchestrate`` as a user runs it: a subprocess with a scripted orchestrator model,
exit codes, stdout, one-line errors, and the sub-runs in the world."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from little_dist.subruns import SUB_RUN_STARTED
from little_dist.testing import ScriptedModel, ToolCall, Usage
from little_dist.world.local import LocalWorld
from tests import zygote

REPO = Path(__file__).resolve().parent.parent


def little(*args: str, script: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if script is not None:
        env["LITTLE_SCRIPTED_MODEL"] = str(script)
    return zygote.run(
        ["orchestrate", *args],
        cwd=REPO,
        env=env,
        timeout=120,
    )


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("little orchestrate: ")
    return line


@pytest.fixture
def script(tmp_path: Path) -> Path:
    scripted = ScriptedModel()
    scripted.on(model="kid", contains="Double 4").reply_json({"value": 8}, usage=Usage(400, 4))
    scripted.on(model="kid", contains="Double 6").reply_json({"value": 12}, usage=Usage(600, 6))
    scripted.on(model="boss").call_tools(
        [
            ToolCall("start_workflow", {"workflowId": "math.double", "input": {"n": 4}}),
            ToolCall("start_workflow", {"workflowId": "math.double", "input": {"n": 6}}),
        ],
        usage=Usage(100, 10),
    ).then_reply_text("8 and 12", usage=Usage(200, 20))
    return scripted.save(tmp_path / "script.json")


@pytest.mark.slow  # a whole `little` process (litellm's import alone is seconds)
def test_an_orchestrator_runs_the_apps_workflows_as_sub_runs(tmp_path: Path, script: Path) -> None:
    data = tmp_path / "world"
    result = little(
        "--model",
        "scripted/boss",
        "--app",
        "tests.orchestrate_app",
        "--goal",
        "Double 4 and 6.",
        "--data-dir",
        str(data),
        "--run-id",
        "run_cli_orch",
        "--json",
        script=script,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["output"] == "8 and 12"
    assert summary["status"] == "completed"
    children = [row for row in summary["subRuns"] if row["status"] == "completed"]
    assert [row["workflowId"] for row in children] == ["math.double", "math.double"]
    assert summary["totalUsage"]["inputTokens"] == 300 + 400 + 600
    world = LocalWorld(data)
    try:
        started = [e for e in world.list_events("run_cli_orch") if e.type == SUB_RUN_STARTED]
        assert len(started) == 4  # two plannings, two runs
        (first,) = [e for e in world.list_events("run_cli_orch") if e.type == "RunStarted"]
        assert first.payload["input"] == {"goal": "Double 4 and 6."}
    finally:
        world.close()


@pytest.mark.slow  # a whole `little` process (litellm's import alone is seconds)
def test_a_workflow_reference_and_plain_output(tmp_path: Path, script: Path) -> None:
    result = little(
        "tests.orchestrate_app:double",
        "--model",
        "scripted/boss",
        "--input",
        '{"task": "double"}',
        "--data-dir",
        str(tmp_path / "w"),
        script=script,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == "8 and 12"


@pytest.mark.slow  # a whole `little` process (litellm's import alone is seconds)
def test_a_failed_orchestrator_exits_1_with_one_line(tmp_path: Path) -> None:
    scripted = ScriptedModel()
    scripted.on(model="boss").raise_error("server", times=None)
    script = scripted.save(tmp_path / "failing.json")
    result = little(
        "--model",
        "scripted/boss",
        "--app",
        "tests.orchestrate_app",
        "--goal",
        "x",
        "--data-dir",
        str(tmp_path / "w"),
        script=script,
    )
    line = one_error_line(result, 1)
    assert "failed" in line
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--app", "tests.orchestrate_app", "--workflow", "math.triple"],
            "--workflow: unknown workflow 'math.triple' (available: math.double)",
        ),
        (
            ["--app", "tests.orchestrate_app", "--input", "{not json"],
            "--input: invalid JSON at line 1 column 2",
        ),
        (["--app", "tests.no_such_module"], "cannot import module 'tests.no_such_module'"),
        (["tests.orchestrate_app:nothing"], "module 'tests.orchestrate_app' has no attribute"),
        (["tests.orchestrate_app:WORKFLOWS"], "is a list, not a workflow"),
        ([], "no workflows: give --app MODULE or module:attribute references"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    data = tmp_path / "world"
    result = little("--model", "scripted/boss", "--data-dir", str(data), *args)
    line = one_error_line(result, 2)
    assert expected in line
    assert not data.exists()


def test_a_missing_model_is_a_usage_error(tmp_path: Path) -> None:
    result = little("--app", "tests.orchestrate_app")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--model" in result.stderr
