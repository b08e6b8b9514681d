"""``examples.research_digest``: an orchestrator model fans the digest out to two workflows
as sub-runs and combines their results — offline on the embedded default (``python -m``,
``little report`` / ``little events`` of the runs it made) and on a fleet of real worker and
scheduler processes."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from little_dist.api import run_workflow
from little_dist.pricing import price_model_call
from little_dist.subruns import SUB_RUN_ENDED, SUB_RUN_STARTED
from little_dist.world.local import LocalWorld
from tests import zygote
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.test_cli_fleet import _ok, little

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

ROOT = Path(__file__).parent.parent
CHILD_WORKFLOWS = ["digest.summarise", "digest.action-items"]
#: The model calls each workflow makes for the sample input (three sources).
MODEL_CALLS = {
    "digest.research": ["orchestrate", "orchestrate"],
    "digest.summarise": [
        "overview",
        "per_source[incident-notes].summarise",
        "per_source[retro].summarise",
        "per_source[support-thread].summarise",
    ],
    "digest.action-items": ["extract"],
}


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.delenv("LITTLE_MODEL", raising=False)
    module = importlib.import_module("examples.research_digest")
    assert module.SCRIPT is not None
    return module


def _usage_from_events(events: Sequence[Any]) -> dict[str, float]:
    """Tokens and dollars of a run, summed from its ``harness.model.responded`` events."""
    totals = {"inputTokens": 0.0, "outputTokens": 0.0, "cachedInputTokens": 0.0, "costUsd": 0.0}
    for event in events:
        if _kind(event) != "harness.model.responded":
            continue
        payload = _payload(event)
        usage = payload["response"]["usage"]
        for key in ("inputTokens", "outputTokens", "cachedInputTokens"):
            totals[key] += usage[key]
        priced = price_model_call(payload["model"], usage)
        assert priced.cost_usd is not None
        totals["costUsd"] += priced.cost_usd
    return totals


def _kind(event: Any) -> str:
    return str(event["type"] if isinstance(event, dict) else event.type)


def _payload(event: Any) -> dict[str, Any]:
    return dict(event["payload"] if isinstance(event, dict) else event.payload)


def _children(events: Sequence[Any]) -> list[dict[str, Any]]:
    return [_payload(e) for e in events if _kind(e) == SUB_RUN_STARTED]


def _assert_tree(
    example: ModuleType, parent: str, list_events: Callable[[str], Sequence[Any]]
) -> tuple[list[str], dict[str, Sequence[Any]]]:
    """The orchestrator ``parent`` ran each child workflow once, as a sub-run linked both
    ways, and combined their outputs; returns the children and every run's events."""
    logs: dict[str, Sequence[Any]] = {parent: list_events(parent)}
    starts = _children(logs[parent])
    assert [(s["workflowId"], s["toolName"], s["stepPath"]) for s in starts] == [
        ("digest.summarise", "summarise_sources", "orchestrate"),
        ("digest.action-items", "extract_action_items", "orchestrate"),
    ]
    children = [s["childRunId"] for s in starts]
    ends = {
        _payload(e)["childRunId"]: _payload(e)["status"]
        for e in logs[parent]
        if _kind(e) == SUB_RUN_ENDED
    }
    assert ends == dict.fromkeys(children, "completed")
    for child, workflow_id in zip(children, CHILD_WORKFLOWS, strict=True):
        logs[child] = list_events(child)
        kinds = Counter(_kind(e) for e in logs[child])
        assert kinds["RunStarted"] == 1 and kinds["RunCompleted"] == 1, (child, kinds)
        (started,) = [_payload(e) for e in logs[child] if _kind(e) == "RunStarted"]
        assert started["parentRunId"] == parent
        assert started["parentStepPath"] == "orchestrate"
        # Each of the child's steps ran once.
        attempts = Counter(
            _payload(e)["stepPath"] for e in logs[child] if _kind(e) == "StepAttemptStarted"
        )
        assert set(attempts.values()) == {1}, attempts
        calls = sorted(
            str(_payload(e).get("stepPath"))
            for e in logs[child]
            if _kind(e) == "harness.model.responded"
        )
        assert calls == MODEL_CALLS[workflow_id]
    (completed,) = [_payload(e) for e in logs[parent] if _kind(e) == "RunCompleted"]
    assert completed["output"] == example.DIGEST
    # The orchestrator's model got both children's outputs back before it answered (as
    # upstream's harness hands a model a workflow's result: summarized, here whole).
    results = [
        _payload(e)["result"] for e in logs[parent] if _kind(e) == "harness.tool_call.succeeded"
    ]
    assert [(r["runId"], json.loads(r["outputSummary"])) for r in results] == [
        (children[0], example.SUMMARIES),
        (children[1], example.ACTION_ITEMS),
    ]
    return children, logs


def test_the_orchestrator_runs_both_workflows_as_sub_runs_and_combines_them(
    example: ModuleType, tmp_path: Path
) -> None:
    world = LocalWorld(tmp_path / "data")
    try:
        result = run_workflow(example.workflow, example.SAMPLE_INPUT, world=world)
        assert result.output.model_dump(mode="json") == example.DIGEST
        children, logs = _assert_tree(example, result.run_id, world.list_events)
        # The run's own usage is the orchestrator's two turns only.
        own = _usage_from_events(logs[result.run_id])
        assert (result.usage.input_tokens, own["inputTokens"]) == (4480, 4480)
        # Run again with the same id: read back, no child runs twice.
        counts = {run: len(events) for run, events in logs.items()}
        again = run_workflow(
            example.workflow, example.SAMPLE_INPUT, world=world, run_id=result.run_id
        )
        assert again.output == result.output
        assert {run: len(world.list_events(run)) for run in counts} == counts
        assert len(children) == 2
    finally:
        world.close()


def _python_m(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return zygote.run(  # `python -m examples.research_digest`, forked from the test zygote
        ["--data-dir", str(data_dir)],
        module="examples.research_digest",
        cwd=ROOT,
        timeout=180,
        env={k: v for k, v in os.environ.items() if k != "LITTLE_MODEL"},
    )


def _little(*args: str) -> str:
    done = zygote.run(
        args,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_python_dash_m_runs_it_and_little_report_rolls_the_children_up(
    example: ModuleType, tmp_path: Path
) -> None:
    data_dir = tmp_path / "d"
    done = _python_m(data_dir)
    assert done.returncode == 0, done.stderr
    output, rest = done.stdout.split("\n\nrun id: ", 1)
    assert json.loads(output) == example.DIGEST
    parent = rest.split("\n", 1)[0]
    assert f"little report {parent} --data-dir {data_dir}" in rest
    world = LocalWorld(data_dir)
    try:
        children, logs = _assert_tree(example, parent, world.list_events)
    finally:
        world.close()
    # What the command printed: each child, and the tokens of the whole tree.
    for child, workflow_id in zip(children, CHILD_WORKFLOWS, strict=True):
        assert re.search(rf"^(sub-runs:)? *{child}  {workflow_id} \(completed\)$", rest, re.M)
    assert "with sub-runs: 11020 in (6912 cached), 1380 out; cost $0.001963" in rest

    where = ("--data-dir", str(data_dir))
    report = json.loads(_little("report", parent, "--json", *where))
    assert [(row["runId"], row["workflowId"], row["status"]) for row in report["subRuns"]] == [
        (child, workflow_id, "completed")
        for child, workflow_id in zip(children, CHILD_WORKFLOWS, strict=True)
    ]
    # The parent's rollup is its own usage plus each child's, as their events record them.
    usage = {run: _usage_from_events(events) for run, events in logs.items()}
    for row in report["subRuns"]:
        for key in ("inputTokens", "outputTokens", "cachedInputTokens"):
            assert row["usage"][key] == usage[row["runId"]][key]
    total = report["totalWithSubRuns"]
    assert report["total"]["inputTokens"] == usage[parent]["inputTokens"] == 4480
    for key in ("inputTokens", "outputTokens", "cachedInputTokens"):
        assert total[key] == sum(run[key] for run in usage.values())
    assert (total["inputTokens"], total["outputTokens"]) == (11020, 1380)
    assert total["costUsd"] == pytest.approx(sum(run["costUsd"] for run in usage.values()))
    assert total["costUsd"] == pytest.approx(0.001963, abs=5e-7)
    table = _little("report", parent, *where)
    section = table.split("SUB-RUNS\n", 1)[1].splitlines()
    assert [line.split()[:3] for line in section[:2]] == [
        [child, workflow_id, "completed"]
        for child, workflow_id in zip(children, CHILD_WORKFLOWS, strict=True)
    ]
    assert section[2] == "TOTAL WITH SUB-RUNS  in=11020 out=1380 cached=6912  0.001963"

    # little events: the parent's log names each child, each child's names the parent.
    lines = _little("events", parent, "--type", "little.subrun.*", *where).splitlines()
    assert [line.rsplit("child=", 1)[1] for line in lines] == [
        children[0],
        children[0],
        children[1],
        children[1],
    ]
    # An end names the step whose call waited for it, in the step's column.
    ended = [line for line in lines if " little.subrun.ended " in line]
    assert [re.sub(r"^ +\d+  \S+  ", "", line) for line in ended] == [
        f"little.subrun.ended{' ' * 14}orchestrate  child={child}" for child in children
    ]
    for child in children:
        (started,) = [
            line for line in _little("events", child, *where).splitlines() if "RunStarted" in line
        ]
        assert started.endswith(f"parent={parent}")


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_on_the_fleet_the_digest_runs_its_children_once_each(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    from examples import research_digest

    start_scheduler(fleet_env)
    # Three slots: enough that the orchestrator's step and its children's steps are never
    # all waiting on each other, however the children are run.
    for _ in range(2):
        start_worker(fleet_env, app="examples.research_digest", concurrency=3)
    view = json.loads(
        _ok(
            little(
                fleet_env,
                "submit",
                "examples.research_digest:workflow",
                "--input",
                "examples/inputs/research_digest.json",
                "--wait",
                "--timeout",
                "150",
                "--json",
                timeout=180,
            )
        )
    )
    assert view["status"] == "completed", view
    assert view["output"] == research_digest.DIGEST
    parent = view["runId"]
    world = fleet_env.world()
    children, logs = _assert_tree(research_digest, parent, world.list_events)

    report = json.loads(_ok(little(fleet_env, "report", parent, "--json")))
    assert [row["runId"] for row in report["subRuns"]] == children
    assert [row["status"] for row in report["subRuns"]] == ["completed", "completed"]
    usage = {run: _usage_from_events(events) for run, events in logs.items()}
    for key in ("inputTokens", "outputTokens", "cachedInputTokens"):
        assert report["totalWithSubRuns"][key] == sum(run[key] for run in usage.values())
    assert report["totalWithSubRuns"]["inputTokens"] == 11020
    child_started = _ok(little(fleet_env, "events", children[0], "--type", "RunStarted"))
    assert child_started.strip().endswith(f"parent={parent}")
