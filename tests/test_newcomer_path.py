"""The issue's newcomer path, as ``examples/README.md`` writes it in one checked block, run
from a fresh temporary folder, offline: ``little init``, ``little run .``, ``little test .``,
``little add workflow second``, ``little eval run``. The eval run finds the starter eval set
``init`` wrote, runs it with the scripted model, has the judge score the rubric, and keeps
the set, its bodies and its result (with the judge's priced calls as its events) in the
project's world."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from little_dist.pricing import price_model_call
from scripts.fresh_clone import checked_blocks

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## Your own project: `little init`"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_the_readme_block_is_the_issues_path() -> None:
    readme = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    block = checked_blocks(readme, SECTION)[0]  # (the section's first: its eval sets follow)
    commands = [line.split("little ", 1)[1] for line in block.splitlines() if "little " in line]
    assert commands == [
        "init .little-project-demo",
        "run . --input input.example.json",
        "test . --input input.example.json",
        "add workflow second",
        "run second --input input.example.json",
        "eval run",
    ]


def test_the_newcomer_path_runs_from_a_fresh_folder(tmp_path: Path) -> None:
    readme = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    block = checked_blocks(readme, SECTION)[0]
    # The block runs from a clone's root, with its virtual environment in .venv: here, an
    # empty folder whose .venv is this interpreter's, importing this checkout.
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LITTLE_", "AWS_")) and k != "PYTHONPATH"
    }
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        ["bash", "-e", "-c", block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    project = tmp_path / ".little-project-demo"
    assert (project / "workflows" / "second" / "workflow.py").is_file()
    table = done.stdout[done.stdout.index("ITEM  ") :].splitlines()
    rows = [line for line in table[1:] if line.strip() and "$workflow" in line]
    assert sorted(row.split()[2:5] for row in rows) == [
        ["gate", "1/1", "passed"],
        ["regression", "1/1", "passed"],
    ]
    summary = next(line for line in table if line.startswith("evset_"))
    assert ": 2/2 passed, 0 failed, 0 errored; cost " in summary
    assert summary.endswith(", 2 calls)") and "(judge " in summary
    # The set, its bodies and the run's result are in the project's world.
    world = project / ".little-workflow"
    (stored,) = (world / "eval-sets").glob("evset_*.json")
    assert len(list((world / "eval-items").rglob("*.json"))) == 2
    (result_file,) = (world / "eval-runs" / stored.stem).glob("*.json")
    result = json.loads(result_file.read_text("utf-8"))
    assert result["evalSetId"] == stored.stem and result["evalRunId"].startswith("evrun_")
    events = result["events"]
    assert [e["sequence"] for e in events] == [1, 2]
    judged = {case["itemSha"]: case for case in result["cases"]}
    for event in events:
        payload = event["payload"]
        assert event["type"] == "harness.model.responded" and payload["role"] == "judge"
        assert payload["itemSha"] in judged and payload["criterionId"] == "next-step"
        # Priced as the workflow's model slot the judge model is (openai/gpt-4o-mini).
        assert payload["model"] == {"provider": "openai", "modelId": "gpt-4o-mini"}
        usage = payload["response"]["usage"]
        assert usage["inputTokens"] > 0
        expected = price_model_call("openai/gpt-4o-mini", usage).cost_usd
        assert expected is not None and payload["costUsd"] == expected
        case = judged[payload["itemSha"]]
        assert case["judgeCostUsd"] == round(expected, 10)
        (sample,) = case["samples"]
        assert sample["rubric"] == [{"criterionId": "next-step", "expected": True, "verdict": True}]
        assert case["costUsd"] == round(sample["costUsd"] + expected, 10)
    assert result["summary"]["judgeCostUsd"] == round(
        sum(e["payload"]["costUsd"] for e in events), 10
    )
