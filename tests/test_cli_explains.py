"""Runs that explain themselves, read with the real ``little`` command on a LocalWorld: a
failed run's report says why (cause code, message, step) in the table, the JSON and the HTML;
rows come in run order; dollars are rounded; ``--type`` that matches nothing says so.
(``little status`` needs the fleet's world: ``tests/test_cli_fleet.py``.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from little_dist.events import EventInput
from little_dist.world.local import LocalWorld
from tests import workflows_for_tests as wf
from tests import zygote
from tests.conftest import load_vectors

ROOT = Path(__file__).resolve().parents[1]
CAUSE = "Cause: tool_error in step only: tool 'explode' failed: kaput"


def little(*args: str) -> subprocess.CompletedProcess[str]:
    return zygote.run(
        args,
        cwd=ROOT,
        timeout=60,
    )


def run_workflow(tmp_path: Path, lwir: dict[str, Any], data: Path) -> str:
    """``little run`` of ``lwir`` (tools from tests.workflows_for_tests); the run id."""
    path = tmp_path / "workflow.json"
    path.write_text(json.dumps(lwir), encoding="utf-8")
    result = little("run", str(path), "--data-dir", str(data), "--app", "tests.workflows_for_tests")
    first = result.stderr.splitlines()[0]
    assert first.startswith("run run_"), result.stderr
    return first.split()[1]


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("failed")
    data = tmp / "world"
    return data, run_workflow(tmp, wf.single_tool_lwir("explode", {"message": "kaput"}), data)


def test_the_report_of_a_failed_run_says_why(failed_run: tuple[Path, str]) -> None:
    data, run_id = failed_run
    table = little("report", run_id, "--data-dir", str(data))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[:2] == [f"Run {run_id} (failed)", CAUSE]

    report = json.loads(little("report", run_id, "--data-dir", str(data), "--json").stdout)
    assert report["failure"] == {
        "causeCode": "tool_error",
        "message": "tool 'explode' failed: kaput",
        "stepPath": "only",
    }


def test_the_html_report_of_a_failed_run_says_why(
    failed_run: tuple[Path, str], tmp_path: Path
) -> None:
    data, run_id = failed_run
    page = tmp_path / "run.html"
    result = little("report", run_id, "--data-dir", str(data), "--html", str(page))
    assert result.returncode == 0, result.stderr
    assert CAUSE.replace("'", "&#x27;") in page.read_text(encoding="utf-8")


def test_upstreams_report_stays_upstreams(failed_run: tuple[Path, str]) -> None:
    data, run_id = failed_run
    table = little("report", run_id, "--data-dir", str(data), "--upstream")
    assert "Cause:" not in table.stdout
    report = json.loads(
        little("report", run_id, "--data-dir", str(data), "--json", "--upstream").stdout
    )
    assert "failure" not in report


def test_report_rows_come_in_run_order(tmp_path: Path) -> None:
    data = tmp_path / "world"
    names = ["zeta", "alpha", "mid"]  # run one after the other, in this order
    steps = [
        wf.tool_step(name, "noop", {"n": index}, **({"needs": [names[index - 1]]} if index else {}))
        for index, name in enumerate(names)
    ]
    lwir = wf.chain_lwir(1) | {"steps": steps}
    run_id = run_workflow(tmp_path, lwir, data)

    def first_column(*extra: str) -> list[str]:
        out = little("report", run_id, "--data-dir", str(data), *extra).stdout.splitlines()
        return [line.split()[0] for line in out[4:] if line.split()[0] in names]

    assert first_column() == names
    assert first_column("--upstream") == sorted(names)  # upstream's localeCompare order
    detailed = json.loads(little("report", run_id, "--data-dir", str(data), "--json").stdout)
    assert [row["stepPath"] for row in detailed["steps"]] == names


def test_report_json_rounds_dollars_and_upstreams_keeps_them(tmp_path: Path) -> None:
    # Upstream's vector whose float sum is 0.009000000000000001.
    vector = next(
        v for v in load_vectors("pricing")["run_reports"] if v["name"] == "unattributed_row"
    )
    assert vector["expected_report"]["total"]["costUsd"] == 0.009000000000000001
    world = LocalWorld(tmp_path)
    for event in vector["events"]:
        world.append(vector["runId"], EventInput(type=event["type"], payload=event["payload"]))
    world.close()
    args = ("report", vector["runId"], "--data-dir", str(tmp_path), "--json")
    ours = json.loads(little(*args).stdout)
    assert ours["total"]["costUsd"] == 0.009
    theirs = json.loads(little(*args, "--upstream").stdout)
    assert theirs["total"]["costUsd"] == 0.009000000000000001


def test_events_type_that_matches_nothing_says_so(failed_run: tuple[Path, str]) -> None:
    data, run_id = failed_run
    result = little("events", run_id, "--data-dir", str(data), "--type", "step*")
    assert result.returncode == 0
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"little events: no event of run {run_id} has a type matching 'step*'")
    assert "StepFailed" in line  # the types it does hold, to spot the typo
    found = little("events", run_id, "--data-dir", str(data), "--type", "Step*")
    assert found.stderr == "" and "StepFailed" in found.stdout


def _costs(value: Any) -> list[float]:
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k == "costUsd" and isinstance(v, float)]
        return found + [c for v in value.values() for c in _costs(v)]
    if isinstance(value, list):
        return [c for v in value for c in _costs(v)]
    return []


def test_dollars_print_without_float_noise(tmp_path: Path) -> None:
    # The support-triage example's scripted calls sum to 0.00028230000000000003 in a float.
    data = str(tmp_path / "world")
    run = little(
        "run", "examples.support_triage:workflow", "--data-dir", data, "--json", "--quiet",
        "--input", '{"account_id": "acme-42", "subject": "Export fails", "message": "Help."}',
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    report = json.loads(little("report", summary["runId"], "--data-dir", data, "--json").stdout)
    runs = json.loads(little("runs", "--data-dir", data, "--json").stdout)
    costs = _costs([summary, report, runs])
    assert len(costs) >= 4 and all(cost > 0 for cost in costs[:1])
    for cost in costs:
        assert cost == round(cost, 10), cost  # what json prints is what a person reads
