"""A newcomer's path through the real ``little`` command, from an empty folder, offline:
``little init``, ``little run``, ``little test``, ``little add workflow``; and each command's
answer to what it cannot do (one line, an exit code, no traceback, nothing written)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests import zygote

REPO = Path(__file__).resolve().parent.parent


def little(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("LITTLE_MODEL", None)  # offline: the starter workflow's scripted model
    done = zygote.run(list(args), cwd=cwd, env=env, timeout=120)
    assert "Traceback" not in done.stderr + done.stdout
    return done


def test_init_run_test_and_add_workflow_work_offline_from_an_empty_folder(
    tmp_path: Path,
) -> None:
    made = little("init", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "little run candidate-review --input input.example.json" in made.stdout
    assert made.stdout.splitlines()[-1].strip() == "little eval run"
    project = tmp_path / "little-workflow-project"

    ran = little("run", "candidate-review", "--input", "input.example.json", cwd=project)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout).startswith("A strong candidate")
    assert (project / ".little-workflow" / "events" / "events.db").is_file()

    tested = little("test", "candidate-review", "--input", "input.example.json", cwd=project)
    assert tested.returncode == 0, tested.stderr
    said = json.loads(tested.stdout)
    assert said["status"] == "completed" and said["expected"] == "none"
    assert said["output"] == json.loads(ran.stdout)

    added = little("add", "workflow", "second", cwd=project)
    assert added.returncode == 0, added.stderr
    manifest = json.loads((project / "little-workflow.json").read_text())
    assert manifest["workflows"] == {
        "candidate-review": "./workflows/candidate-review",
        "second": "./workflows/second",
    }
    # By name from a folder below the project, and by folder path.
    nested = project / "workflows"
    second = little("run", "second", "--input", "../input.example.json", "-q", cwd=nested)
    assert second.returncode == 0, second.stderr
    by_folder = little(
        "run", "workflows/second", "--input", "input.example.json", "--json", cwd=project
    )
    assert json.loads(by_folder.stdout)["status"] == "completed"


def test_little_test_compares_with_the_expected_output_beside_the_input(tmp_path: Path) -> None:
    assert little("init", "p", cwd=tmp_path).returncode == 0
    project = tmp_path / "p"
    expected = project / "input.example.expected.json"
    expected.write_text(json.dumps("something else"))
    differs = little("test", "candidate-review", "--input", "input.example.json", cwd=project)
    assert differs.returncode == 1
    assert json.loads(differs.stdout)["expected"] == "differs from input.example.expected.json"
    ran = little("run", "candidate-review", "--input", "input.example.json", "-q", cwd=project)
    expected.write_text(ran.stdout)
    same = little("test", "candidate-review", "--input", "input.example.json", cwd=project)
    assert same.returncode == 0 and json.loads(same.stdout)["expected"] == "ok"
    other = project / "other.json"
    other.write_text(json.dumps("nope"))
    given = little(
        "test",
        "candidate-review",
        "--input",
        "input.example.json",
        "--expected",
        "other.json",
        cwd=project,
    )
    assert given.returncode == 1


def test_a_failed_run_fails_the_test_with_its_reason(tmp_path: Path) -> None:
    assert little("init", "p", cwd=tmp_path).returncode == 0
    project = tmp_path / "p"
    tool = project / "workflows" / "candidate-review" / "tools" / "echo.py"
    tool.write_text(tool.read_text().replace('return {"text": text}', 'raise RuntimeError("down")'))
    failed = little("test", "candidate-review", "--input", "input.example.json", cwd=project)
    assert failed.returncode == 1
    said = json.loads(failed.stdout)
    assert said["status"] == "failed" and "down" in json.dumps(said["error"])


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["run", "nosuch"], 2, "unknown workflow 'nosuch' in"),
        (["test", "candidate-review", "--input", '{"name": 3}'], 1, "input.name: 3 is not of type"),
        (["test", "candidate-review"], 2, "--input"),
        (["add", "workflow", "Bad_Name"], 1, "workflow name 'Bad_Name'"),
        (["add", "workflow", "x", "--dir", "../out"], 1, "escapes the project"),
        (["add", "workflow", "candidate-review"], 1, "already exists"),
        (["init", "--here"], 1, "already exists"),
        (["init", "x", "--here"], 2, "give a NAME or --here, not both"),
    ],
)
def test_what_a_command_cannot_do_is_one_line_and_an_exit_code(
    tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    assert little("init", "p", cwd=tmp_path).returncode == 0
    project = tmp_path / "p"
    before = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    done = little(*args, cwd=project)
    assert done.returncode == code, done.stderr
    assert message in done.stderr
    after = sorted(str(p.relative_to(project)) for p in project.rglob("*"))
    assert [p for p in after if "__pycache__" not in p and ".little-workflow" not in p] == [
        p for p in before if "__pycache__" not in p
    ]


def test_a_name_without_a_project_says_where_it_looked(tmp_path: Path) -> None:
    done = little("run", "candidate-review", cwd=tmp_path)
    assert done.returncode == 2
    assert "no little-workflow.json found in" in done.stderr


def test_a_run_past_the_tests_timeout_fails_it_with_cause_timeout(tmp_path: Path) -> None:
    # (A plain Python tool is not interrupted: the run ends once its 3 s call returns.)
    assert little("init", "p", cwd=tmp_path).returncode == 0
    project = tmp_path / "p"
    tool = project / "workflows" / "candidate-review" / "tools" / "echo.py"
    tool.write_text(
        tool.read_text()
        .replace("from little_dist import tool", "import time\n\nfrom little_dist import tool")
        .replace('    return {"text": text}', '    time.sleep(3)\n    return {"text": text}')
    )
    done = little(
        "test", "candidate-review", "--input", "input.example.json", "--timeout", "500",
        cwd=project,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    said = json.loads(done.stdout)
    assert said["status"] == "failed" and said["error"]["causeCode"] == "timeout"
