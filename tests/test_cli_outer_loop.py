"""``little outer-loop`` as a user runs it: a subprocess with a scripted planner and
supervisor, in this process and on a real fleet; exit codes, stdout, one-line errors, the
loop resumed by its id without asking the supervisor again."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from little_dist.outer_loop import manifest_store_for
from little_dist.testing import ScriptedModel, Usage, read_call_log
from little_dist.world.local import LocalWorld
from tests import zygote
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.outer_loop_helpers import simple_lwir

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = "tests.outer_loop_fleet_app:loop_workflow"


def little(
    *args: str, script: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    run_env = {**(env if env is not None else os.environ), "PYTHONPATH": str(REPO)}
    if script is not None:
        run_env["LITTLE_SCRIPTED_MODEL"] = str(script)
    return zygote.run(
        ["outer-loop", *args],
        cwd=REPO,
        env=run_env,
        timeout=240,
    )


def one_error_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("little ")]
    (line,) = lines
    assert line.startswith("little outer-loop: ")
    return line


def two_cycle_script(tmp_path: Path) -> tuple[Path, Path]:
    calls = tmp_path / "calls.jsonl"
    scripted = ScriptedModel(call_log=calls)
    scripted.on(step="planner").reply_json(simple_lwir(), times=None)
    scripted.on(step="supervisor", contains='"cycleNumber":2').reply_json(
        {"kind": "done", "finalOutput": {"result": "done in cycle 2"}},
        usage=Usage(input=300, output=50),
        times=None,
    )
    scripted.on(step="supervisor").reply_json(
        {"kind": "continue", "promptNote": "again"}, usage=Usage(input=100, output=20), times=None
    )
    return scripted.save(tmp_path / "script.json"), calls


def steps_called(calls: Path, step: str) -> int:
    return sum(
        1
        for record in read_call_log(calls)
        if record.get("metadata", {}).get("little", {}).get("stepPath") == step
    )


@pytest.mark.slow  # whole `little` processes (litellm's import alone is seconds)
def test_a_loop_runs_its_cycles_and_resumes_by_id_without_asking_again(tmp_path: Path) -> None:
    script, calls = two_cycle_script(tmp_path)
    data = tmp_path / "world"
    args = (WORKFLOW, "--input", '{"value": "x"}', "--max-cycles", "3", "--data-dir", str(data))

    first = little(*args, "--outer-loop-id", "ol_cli_two", "--json", script=script)
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[0] == "outer loop ol_cli_two"
    summary = json.loads(first.stdout)
    assert summary["outerLoopId"] == "ol_cli_two"
    assert summary["status"] == "done"
    assert summary["output"] == {"result": "done in cycle 2"}
    assert [cycle["decision"] for cycle in summary["cycles"]] == ["continue", "done"]
    assert summary["total"]["inputTokens"] >= 400  # both supervisor calls are priced in
    assert steps_called(calls, "supervisor") == 2
    assert steps_called(calls, "planner") == 2

    again = little(*args, "--outer-loop-id", "ol_cli_two", "--quiet", script=script)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"result": "done in cycle 2"}
    assert again.stderr == ""
    assert steps_called(calls, "supervisor") == 2  # read back, not asked again
    assert steps_called(calls, "planner") == 2


@pytest.mark.slow
def test_a_loop_without_done_exits_1_naming_the_cause(tmp_path: Path) -> None:
    scripted = ScriptedModel()
    scripted.on(step="planner").reply_json(simple_lwir(), times=None)
    scripted.on(step="supervisor").reply_json({"kind": "continue"}, times=None)
    script = scripted.save(tmp_path / "script.json")
    data = tmp_path / "world"
    result = little(
        WORKFLOW,
        "--input",
        '{"value": "x"}',
        "--max-cycles",
        "2",
        "--outer-loop-id",
        "ol_cli_exhausted",
        "--data-dir",
        str(data),
        script=script,
    )
    line = one_error_line(result, 1)
    assert "ol_cli_exhausted" in line and "(outer_loop_exhausted)" in line
    assert result.stdout == ""
    stored = manifest_store_for(LocalWorld(data)).read("ol_cli_exhausted")
    assert stored is not None and len(stored.manifest.cycles) == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "code", "names"),
    [
        ((WORKFLOW, "--max-cycles", "2", "--outer-loop-id", "loop 1"), 2, "--outer-loop-id"),
        (("tests.outer_loop_fleet_app:nothing", "--max-cycles", "2"), 2, "no attribute"),
        (("no.such.workflow", "--max-cycles", "2"), 2, "unknown workflow 'no.such.workflow'"),
        ((WORKFLOW, "--max-cycles", "2", "--input", "{not json"), 2, "JSON"),
        ((WORKFLOW, "--max-cycles", "2", "--input", '{"value": 3}'), 1, "value"),
        ((WORKFLOW, "--max-cycles", "2", "--cycle-timeout", "5"), 2, "--fleet"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], code: int, names: str
) -> None:
    data = tmp_path / "world"
    line = one_error_line(little(*args, "--data-dir", str(data)), code)
    assert names in line
    assert not data.exists()


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_with_fleet_the_cycles_run_on_the_workers(fleet_env: FleetEnv, tmp_path: Path) -> None:
    script, calls = two_cycle_script(tmp_path)
    fleet_env.env["LITTLE_SCRIPTED_MODEL"] = str(script)  # the planner workers'
    fleet_env.env["LITTLE_APP"] = "tests.outer_loop_fleet_app"
    start_scheduler(fleet_env)
    worker = start_worker(fleet_env, app="tests.outer_loop_fleet_app", concurrency=2, timeout=120)

    result = little(
        "outer-loop-test.simple",
        "--app",
        "tests.outer_loop_fleet_app",
        "--fleet",
        "--input",
        '{"value": "fleet"}',
        "--max-cycles",
        "3",
        "--outer-loop-id",
        "ol_cli_fleet",
        "--cycle-timeout",
        "120",
        "--json",
        script=script,
        env=fleet_env.env,
    )
    assert result.returncode == 0, result.stderr
    summary: dict[str, Any] = json.loads(result.stdout)
    assert summary["output"] == {"result": "done in cycle 2"}
    assert [cycle["decision"] for cycle in summary["cycles"]] == ["continue", "done"]
    world = fleet_env.world()
    for cycle in summary["cycles"]:
        outputs = [
            event.payload.get("output")
            for event in world.list_events(cycle["runId"])
            if event.type == "StepCompleted"
        ]
        # The cycle's step ran in the worker's process, not in the `little` process.
        assert outputs == [{"result": f"processed:fleet@{worker.pid}"}]
    assert steps_called(calls, "planner") == 2
