"""``little events``, ``little replay`` and ``little report`` against a real LocalWorld."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from little_dist.events import EventInput
from little_dist.world.local import LocalWorld
from tests import zygote
from tests.conftest import load_vectors

REPORT = load_vectors("pricing")["run_reports"][0]
RUN_ID = REPORT["runId"]


def little(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return zygote.run(
        args,
        cwd=cwd,
        timeout=60,
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("world")
    world = LocalWorld(directory)
    for event in REPORT["events"]:
        world.append(RUN_ID, EventInput(type=event["type"], payload=event["payload"]))
    world.close()
    return directory


def test_events_lists_the_log_in_order(data_dir: Path) -> None:
    result = little("events", RUN_ID, "--data-dir", str(data_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(REPORT["events"])
    assert [line.split()[2] for line in lines] == [e["type"] for e in REPORT["events"]]


def test_events_json_is_newline_delimited_envelopes(data_dir: Path) -> None:
    result = little("events", RUN_ID, "--data-dir", str(data_dir), "--json", "--type", "Step*")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert {e["type"] for e in events} == {"StepAttemptStarted", "StepCompleted"}
    assert all(e["runId"] == RUN_ID and e["eventId"].startswith("evt_") for e in events)
    assert [e["sequence"] for e in events] == sorted(e["sequence"] for e in events)


def test_events_follow_stops_at_the_terminal_event(data_dir: Path) -> None:
    result = little("events", RUN_ID, "--data-dir", str(data_dir), "--follow", "--timeout", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split()[2] == "RunCompleted"


def test_replay_lists_completed_steps(data_dir: Path) -> None:
    result = little("replay", RUN_ID, "--data-dir", str(data_dir), "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["runId"] == RUN_ID
    assert plan["pendingStepPaths"] == []
    assert plan["completedStepPaths"] == [
        e["payload"]["stepPath"] for e in REPORT["events"] if e["type"] == "StepCompleted"
    ]
    human = little("replay", RUN_ID, "--data-dir", str(data_dir))
    assert human.returncode == 0 and "reuse" in human.stdout


def test_report_table_json_and_html(data_dir: Path, tmp_path: Path) -> None:
    table = little("report", RUN_ID, "--data-dir", str(data_dir))
    assert table.returncode == 0, table.stderr
    for fragment in REPORT["table_contains"]:
        assert fragment in table.stdout
    header = table.stdout.splitlines()[2].split()
    assert header[:3] == ["STEP", "ATTEMPTS", "DURATION"]
    as_json = little("report", RUN_ID, "--data-dir", str(data_dir), "--json")
    report: dict[str, Any] = json.loads(as_json.stdout)
    assert report["runId"] == RUN_ID and report["timeline"]
    assert [row["attempts"] for row in report["steps"]] == [1] * len(report["steps"])
    assert all(isinstance(row["durationMs"], int | float) for row in report["steps"])
    assert report["total"]["attempts"] == len(report["steps"])
    page = tmp_path / "report.html"
    html = little("report", RUN_ID, "--data-dir", str(data_dir), "--html", str(page))
    assert html.returncode == 0, html.stderr
    assert page.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")


def test_report_upstream_prints_upstreams_table_and_json(data_dir: Path) -> None:
    table = little("report", RUN_ID, "--data-dir", str(data_dir), "--table", "--upstream")
    assert table.returncode == 0, table.stderr
    assert table.stdout == REPORT["expected_table"]
    as_json = little("report", RUN_ID, "--data-dir", str(data_dir), "--json", "--upstream")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == REPORT["expected_report"]


def test_report_upstream_with_html_is_a_usage_error(data_dir: Path, tmp_path: Path) -> None:
    page = tmp_path / "x.html"
    result = little(
        "report", RUN_ID, "--data-dir", str(data_dir), "--upstream", "--html", str(page)
    )
    assert result.returncode == 2
    assert "--upstream" in result.stderr and "Traceback" not in result.stderr
    assert not page.exists()


def test_report_prices_models_the_registry_lacks_from_litellms_map(tmp_path: Path) -> None:
    run_id = "run_gpt41"
    usage = {"inputTokens": 1_000_000, "cachedInputTokens": 200_000, "outputTokens": 100_000}
    world = LocalWorld(tmp_path)
    for type_, payload in [
        ("RunStarted", {"workflowVersionId": "wfver_1"}),
        ("StepAttemptStarted", {"stepPath": "draft", "attemptId": "a1"}),
        (
            "harness.model.responded",
            {
                "stepPath": "draft",
                "model": {"provider": "openai", "modelId": "gpt-4.1"},
                "response": {"usage": usage},
            },
        ),
        ("StepCompleted", {"stepPath": "draft"}),
        ("RunCompleted", {}),
    ]:
        world.append(run_id, EventInput(type=type_, payload=payload))
    world.close()

    priced = little("report", run_id, "--data-dir", str(tmp_path), "--json")
    assert priced.returncode == 0, priced.stderr
    data = json.loads(priced.stdout)
    assert data["total"]["costUsd"] == pytest.approx(2.5)  # 0.8M*$2 + 0.2M*$0.5 + 0.1M*$8
    assert data["hasUnpricedCalls"] is False
    registry_only = little("report", run_id, "--data-dir", str(tmp_path), "--registry-only")
    assert registry_only.returncode == 0, registry_only.stderr
    total = next(line for line in registry_only.stdout.splitlines() if line.startswith("TOTAL"))
    assert total.endswith("n/a")
    assert "no price in the model registry" in registry_only.stdout


@pytest.mark.parametrize("command", ["events", "replay", "report"])
def test_unknown_run_is_a_one_line_error(command: str, data_dir: Path) -> None:
    result = little(command, "run_nope", "--data-dir", str(data_dir))
    assert result.returncode == 1
    assert result.stderr.strip() == f"little {command}: Run not found: run_nope"
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["events", "replay", "report"])
def test_invalid_run_id_is_a_one_line_error(command: str, data_dir: Path) -> None:
    result = little(command, "../etc", "--data-dir", str(data_dir))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Invalid run id" in result.stderr and "Traceback" not in result.stderr


def test_missing_data_dir_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = little("events", RUN_ID, "--data-dir", str(missing))
    assert result.returncode == 1
    assert "no world at" in result.stderr and "Traceback" not in result.stderr
    assert not missing.exists()


def test_unknown_world_scheme_is_a_one_line_error(tmp_path: Path) -> None:
    result = little("events", RUN_ID, "--world", "ftp://x")
    assert result.returncode == 1
    assert "Unknown world scheme" in result.stderr and "Traceback" not in result.stderr
