"""``little run`` as a user runs it: a subprocess, exit codes, stdout, stderr, the world."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from little_dist.world.local import LocalWorld
from tests import zygote
from tests.workflows_for_tests import chain_lwir, single_tool_lwir

REPO = Path(__file__).resolve().parent.parent


def little_run(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return zygote.run(
        ["run", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        timeout=120,
    )


def write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout


@pytest.fixture
def chain_file(tmp_path: Path) -> Path:
    return write(tmp_path / "chain.json", chain_lwir(3))


def test_runs_an_lwir_file_and_prints_the_output(tmp_path: Path, chain_file: Path) -> None:
    data = tmp_path / "world"
    result = little_run(
        str(chain_file), "--data-dir", str(data), "--app", "tests.workflows_for_tests"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"n": 2}
    lines = result.stderr.splitlines()
    # Progress is not an error: no line looks like "little run: <problem>" or "failed: ...".
    assert not any(line.startswith(("little run:", "failed:", "error")) for line in lines)
    assert lines[0].startswith("run run_")
    assert lines[-1] == "[completed] 3 done, 0 running, 0 failed · 0 tokens · $0.0000"
    run_id = lines[0].removeprefix("run ").split()[0]
    world = LocalWorld(data)
    assert [e.type for e in world.list_events(run_id)][-1] == "RunCompleted"
    world.close()


def test_quiet_json_and_reading_back_a_finished_run(tmp_path: Path, chain_file: Path) -> None:
    data = tmp_path / "world"
    args = [
        str(chain_file),
        "--data-dir",
        str(data),
        "--app",
        "tests.workflows_for_tests",
        "--run-id",
        "run_cli_json",
        "--quiet",
        "--json",
    ]
    first = little_run(*args)
    assert first.returncode == 0, first.stderr
    assert first.stderr == ""
    summary = json.loads(first.stdout)
    assert summary["runId"] == "run_cli_json"
    assert summary["status"] == "completed"
    assert summary["output"] == {"n": 2}
    assert summary["usage"]["inputTokens"] == 0
    world = LocalWorld(data)
    count = len(world.list_events("run_cli_json"))

    again = little_run(*args)

    assert again.returncode == 0
    assert json.loads(again.stdout) == summary
    assert len(world.list_events("run_cli_json")) == count  # nothing ran, nothing written
    world.close()


def test_module_attribute_workflow(tmp_path: Path) -> None:
    result = little_run(
        "tests.workflows_for_tests:KILL_WORKFLOW",
        "--input",
        '{"keys": ["a", "b"], "sleep": 0}',
        "--data-dir",
        str(tmp_path / "world"),
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert [entry["itemKey"] for entry in output] == ["a", "b"]
    assert output[0]["output"]["key"] == "a"


def test_input_from_a_file(tmp_path: Path) -> None:
    workflow = write(tmp_path / "wf.json", single_tool_lwir("add", {"a": "{{ input.a }}", "b": 1}))
    data_input = write(tmp_path / "input.json", {"a": 41})
    result = little_run(
        str(workflow),
        "--input",
        str(data_input),
        "--data-dir",
        str(tmp_path / "world"),
        "--app",
        "tests.workflows_for_tests",
        "--quiet",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"sum": 42}


def test_a_failed_run_exits_1_with_a_one_line_reason(tmp_path: Path) -> None:
    workflow = write(tmp_path / "wf.json", single_tool_lwir("explode", {"message": "kaput"}))
    result = little_run(
        str(workflow),
        "--data-dir",
        str(tmp_path / "world"),
        "--app",
        "tests.workflows_for_tests",
        "--quiet",
    )
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("little run: run_") and "failed:" in line and "kaput" in line
    assert_no_traceback(result)


@pytest.mark.parametrize(
    ("make_args", "code", "expected"),
    [
        pytest.param(
            lambda tmp: [str(tmp / "missing.json")],
            2,
            ["little run: cannot read", "no such file"],
            id="missing-file",
        ),
        pytest.param(
            lambda tmp: [str(write(tmp / "bad.json", {"apiVersion": "nope"}))],
            1,
            ["invalid workflow"],
            id="malformed-lwir",
        ),
        pytest.param(
            lambda tmp: [
                str(write(tmp / "wf.json", chain_lwir(1))),
                "--input",
                "{not json",
            ],
            2,
            ["--input: invalid JSON"],
            id="input-not-json",
        ),
        pytest.param(
            lambda tmp: ["tests.workflows_for_tests:KILL_WORKFLOW", "--input", '{"keys": [1]}'],
            1,
            ["input does not match the workflow's input schema"],
            id="input-schema-mismatch",
        ),
        pytest.param(
            lambda tmp: ["tests.no_such_module:WORKFLOW"],
            2,
            ["cannot import module 'tests.no_such_module'"],
            id="unknown-module",
        ),
        pytest.param(
            lambda tmp: ["tests.workflows_for_tests:NO_SUCH_ATTRIBUTE"],
            2,
            ["has no attribute 'NO_SUCH_ATTRIBUTE'"],
            id="unknown-attribute",
        ),
        pytest.param(
            lambda tmp: ["tests.workflows_for_tests:SIDE_EFFECTS_ENV"],
            2,
            ["not a workflow"],
            id="not-a-workflow",
        ),
        pytest.param(
            lambda tmp: [str(write(tmp / "wf.json", chain_lwir(1))), "--run-id", "bad id"],
            2,
            ["--run-id"],
            id="bad-run-id",
        ),
        pytest.param(
            # Parses (the parser's own limit is near 1,000), then is refused for the input:
            # not blamed on the workflow, never a RecursionError further in.
            lambda tmp: [
                str(write(tmp / "wf.json", chain_lwir(1))),
                "--input",
                str(write(tmp / "deep.json", json.loads("[" * 900 + "]" * 900))),
            ],
            1,
            ["deep.json is nested more than 64 levels deep (LITTLE_MAX_JSON_DEPTH=64)"],
            id="input-nested-900",
        ),
        pytest.param(
            lambda tmp: [
                str(write(tmp / "wf.json", chain_lwir(1))),
                "--input",
                "[" * 50_000 + "]" * 50_000,  # (an argument holds at most 128 KiB)
            ],
            1,
            ["little run: --input is nested more than 64 levels deep (LITTLE_MAX_JSON_DEPTH=64)"],
            id="input-nested-50k",
        ),
        pytest.param(
            lambda tmp: [
                str(write(tmp / "wf.json", chain_lwir(1))),
                "--input",
                str(write(tmp / "big.json", {"text": "x" * (1024 * 1024)})),
            ],
            1,
            ["the run input is 1,048,587 bytes of JSON, more than LITTLE_MAX_INPUT_BYTES"],
            id="input-too-big",
        ),
        pytest.param(
            lambda tmp: [str(write(tmp / "wf.json", chain_lwir(1001)))],
            1,
            ["wf.json has 1,001 steps, more than LITTLE_MAX_STEPS=1,000"],
            id="too-many-steps",
        ),
    ],
)
def test_bad_input_is_one_clear_error_and_leaves_the_world_untouched(
    tmp_path: Path, make_args: Any, code: int, expected: list[str]
) -> None:
    data = tmp_path / "world"
    result = little_run(*make_args(tmp_path), "--data-dir", str(data))
    assert result.returncode == code, result.stderr
    assert_no_traceback(result)
    last = result.stderr.splitlines()[-1]
    for fragment in expected:
        assert fragment in result.stderr, result.stderr
    assert last.startswith("little run: ")
    assert not data.exists()  # nothing was created, let alone written


def test_the_limits_come_from_the_environment(tmp_path: Path) -> None:
    wf = write(tmp_path / "wf.json", chain_lwir(3))
    data = tmp_path / "world"
    result = little_run(str(wf), "--data-dir", str(data), env={"LITTLE_MAX_STEPS": "2"})
    assert result.returncode == 1
    assert result.stderr == f"little run: {wf} has 3 steps, more than LITTLE_MAX_STEPS=2\n"
    result = little_run(str(wf), "--data-dir", str(data), env={"LITTLE_MAX_STEPS": "none"})
    assert result.returncode == 2
    assert result.stderr == (
        "little run: LITTLE_MAX_STEPS='none': expected a whole number of steps, 1 or more\n"
    )
    assert not data.exists()


def test_malformed_lwir_lists_findings_one_per_line(tmp_path: Path) -> None:
    doc = chain_lwir(2)
    doc["steps"][1]["needs"] = ["nowhere"]
    del doc["metadata"]
    result = little_run(str(write(tmp_path / "wf.json", doc)), "--data-dir", str(tmp_path / "w"))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) >= 3  # at least two findings, then the summary
    assert all(" $." in line or line.startswith("little run:") for line in lines)
    assert lines[-1].startswith("little run: ") and "findings" in lines[-1]


def test_usage_errors_exit_2() -> None:
    result = little_run("--max-workers", "0", "x.json")
    assert result.returncode == 2
    assert_no_traceback(result)
