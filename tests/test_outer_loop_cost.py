"""What an outer loop's supervisor costs: each decision's model call is recorded with it
(``supervisorCall`` on ``OuterLoopCycleCompleted``) and priced in the loop's report
(``little report ol_...``) beside the cycle runs' own costs, with exact sums."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_dist import run_outer_loop
from little_dist.outer_loop.report import outer_loop_report
from little_dist.testing import ScriptedModel, Usage
from little_dist.world.local import LocalWorld
from tests import zygote
from tests.outer_loop_helpers import simple_lwir, simple_workflow

ROOT = Path(__file__).resolve().parent.parent
LOOP = "ol_cost"
# The workflow's model is priced as openai/gpt-4o-mini: $0.15 in, $0.60 out per million.
PLANNER = Usage(input=100, output=50)  # 0.000015 + 0.00003 = 0.000045 per cycle
SUPERVISOR_1 = Usage(input=1000, output=200)  # 0.00015 + 0.00012 = 0.00027
SUPERVISOR_2 = Usage(input=3000, output=500)  # 0.00045 + 0.0003 = 0.00075


def script(model: ScriptedModel) -> None:
    model.on(step="planner").reply_json(simple_lwir(), usage=PLANNER, times=None)
    model.on(step="supervisor").reply_json(
        {"kind": "continue", "promptNote": "again"}, usage=SUPERVISOR_1
    ).reply_json({"kind": "done", "finalOutput": {"result": "ok"}}, usage=SUPERVISOR_2)


def run_loop(world: LocalWorld) -> None:
    result = run_outer_loop(
        simple_workflow(), {"value": "v"}, max_outer_cycles=3, world=world, outer_loop_id=LOOP
    )
    assert result.output == {"result": "ok"}


def test_each_decision_records_its_supervisor_call(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    script(scripted_model)
    world = LocalWorld(tmp_path / "data")
    run_loop(world)
    report = outer_loop_report(world, LOOP)
    calls = []
    for cycle in report.cycles:
        (decided,) = [
            e.payload
            for e in world.list_events(cycle.run_id)
            if e.type == "OuterLoopCycleCompleted"
        ]
        calls.append(decided["supervisorCall"])
    assert calls == [
        {
            "model": {"provider": "openai", "modelId": "gpt-4o-mini"},
            "usage": {
                "inputTokens": 1000,
                "outputTokens": 200,
                "cachedInputTokens": 0,
                "reasoningTokens": 0,
            },
        },
        {
            "model": {"provider": "openai", "modelId": "gpt-4o-mini"},
            "usage": {
                "inputTokens": 3000,
                "outputTokens": 500,
                "cachedInputTokens": 0,
                "reasoningTokens": 0,
            },
        },
    ]


def test_the_loop_report_prices_the_supervisor_and_rolls_up_the_cycles(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    script(scripted_model)
    world = LocalWorld(tmp_path / "data")
    run_loop(world)

    report = outer_loop_report(world, LOOP)
    assert report.status == "done"
    assert [(c.cycle_number, c.status, c.decision) for c in report.cycles] == [
        (1, "completed", "continue"),
        (2, "completed", "done"),
    ]
    first, second = report.cycles
    assert first.supervisor is not None and second.supervisor is not None
    assert (first.supervisor.input_tokens, first.supervisor.output_tokens) == (1000, 200)
    assert first.supervisor.cost_usd == pytest.approx(0.00027, abs=1e-12)
    assert (second.supervisor.input_tokens, second.supervisor.output_tokens) == (3000, 500)
    assert second.supervisor.cost_usd == pytest.approx(0.00075, abs=1e-12)
    for cycle in report.cycles:
        assert cycle.run is not None
        assert (cycle.run.input_tokens, cycle.run.output_tokens) == (100, 50)
        assert cycle.run.cost_usd == pytest.approx(0.000045, abs=1e-12)
    assert (report.supervisor.input_tokens, report.supervisor.output_tokens) == (4000, 700)
    assert report.supervisor.cost_usd == pytest.approx(0.00102, abs=1e-12)
    assert (report.runs.input_tokens, report.runs.output_tokens) == (200, 100)
    assert report.runs.cost_usd == pytest.approx(0.00009, abs=1e-12)
    assert (report.total.input_tokens, report.total.output_tokens) == (4200, 800)
    assert report.total.cost_usd == pytest.approx(0.00111, abs=1e-12)
    assert report.total.priced_calls == 4

    # The same figures from the CLI, as JSON and as the table.
    data_dir = str(tmp_path / "data")
    shown = zygote.run(
        ["report", LOOP, "--json", "--data-dir", data_dir],
        cwd=ROOT,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert [c["supervisorUsage"]["inputTokens"] for c in data["cycles"]] == [1000, 3000]
    assert data["supervisor"]["outputTokens"] == 700
    assert data["supervisor"]["costUsd"] == pytest.approx(0.00102, abs=1e-12)
    assert data["total"]["costUsd"] == pytest.approx(0.00111, abs=1e-12)
    table = zygote.run(
        ["report", LOOP, "--data-dir", data_dir],
        cwd=ROOT,
        timeout=120,
    )
    assert table.returncode == 0, table.stderr
    assert "SUPERVISOR  in=4000 out=700 cached=0  0.001020" in table.stdout
    assert "TOTAL       in=4200 out=800 cached=0  0.001110" in table.stdout


def test_a_report_of_an_unknown_loop_is_one_line(tmp_path: Path) -> None:
    LocalWorld(tmp_path / "data").close()
    shown = zygote.run(
        ["report", "ol_nothing_here", "--data-dir", str(tmp_path / "data")],
        cwd=ROOT,
        timeout=120,
    )
    assert shown.returncode == 1
    assert shown.stderr.strip().count("\n") == 0
    assert "ol_nothing_here" in shown.stderr
