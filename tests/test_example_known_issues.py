"""``examples.known_issues``: a workflow that learns across runs through
``/mnt/memory/workflow/`` — offline on the embedded default, and on the fleet, where the
second run, on another worker process, reads what the first wrote."""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from types import ModuleType

import pytest

from little_dist.api import run_workflow
from little_dist.memory import memory_store_for
from little_dist.world.local import LocalWorld
from tests import zygote
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.test_cli_fleet import _ok, little

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

STORE = "workflow:support-known-issues"
ROOT = Path(__file__).parent.parent


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.delenv("LITTLE_MODEL", raising=False)
    module = importlib.import_module("examples.known_issues")
    assert module.SCRIPT is not None
    return module


def _commands(world: object, run_id: str) -> list[str]:
    events = world.list_events(run_id)  # type: ignore[attr-defined]
    return [e.payload["command"] for e in events if e.type == "harness.runtime.command.started"]


@pytest.mark.parametrize("planner", [False, True])
def test_the_second_run_knows_what_the_first_learned(
    example: ModuleType, tmp_path: Path, planner: bool
) -> None:
    world = LocalWorld(tmp_path / "data")
    flow = example.planned_workflow if planner else example.workflow
    first = run_workflow(flow, example.SAMPLE_INPUT, world=world)
    assert first.output == example.NEW_ANSWER
    assert len(_commands(world, first.run_id)) == 2  # read, then record
    (created,) = [e for e in world.list_events(first.run_id) if e.type == "harness.file.created"]
    assert created.payload["path"] == example.NOTES and created.payload["root"] == "memory"
    second = run_workflow(flow, example.SAMPLE_INPUT, world=world)
    assert second.output == example.KNOWN_ANSWER
    assert len(_commands(world, second.run_id)) == 1  # read only: nothing new to record
    store = memory_store_for(world)
    notes = store.read(STORE, store.entries(STORE)["known-issues.md"]).decode()
    assert notes == f"- {example.ISSUE}: CSV export of large reports times out\n"


def test_the_module_runs_twice_from_the_command_line(tmp_path: Path) -> None:
    def run() -> str:
        done = zygote.run(  # `python -m examples.known_issues`, forked from the test zygote
            ["--data-dir", str(tmp_path / "d")],
            module="examples.known_issues",
            cwd=ROOT,
            timeout=120,
            env={k: v for k, v in os.environ.items() if k != "LITTLE_MODEL"},
        )
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout.split("\n\nrun id:")[0]))

    assert run().startswith("New issue")
    assert run().startswith("Known issue")


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_on_the_fleet_a_run_on_another_worker_reads_what_the_first_wrote(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    from examples import known_issues

    start_scheduler(fleet_env)
    submit = (
        "submit",
        "examples.known_issues:workflow",
        "--input",
        "examples/inputs/known_issues.json",
        "--wait",
        "--timeout",
        "60",
        "--json",
    )
    outputs, ran_on = [], []
    for name in ("first", "second"):
        temp = tmp_path / name
        temp.mkdir()
        worker = start_worker(
            fleet_env, roles=["worker"], app="examples.known_issues", env={"TMPDIR": str(temp)}
        )
        view = json.loads(_ok(little(fleet_env, *submit)))
        assert view["status"] == "completed", view
        outputs.append(view["output"])
        ran_on.append(worker.name)
        worker.stop()  # the second run gets a worker process that never saw the first
    assert outputs == [known_issues.NEW_ANSWER, known_issues.KNOWN_ANSWER]
    assert ran_on[0] != ran_on[1]
    notes = _ok(
        little(fleet_env, "memory", "cat", "--workflow", "support.known-issues", "known-issues.md")
    )
    assert notes == f"- {known_issues.ISSUE}: CSV export of large reports times out\n"


def test_the_model_reads_the_skill_folder(example: ModuleType, tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    run = run_workflow(example.workflow, example.SAMPLE_INPUT, world=world)
    events = world.list_events(run.run_id)
    first = next(e for e in events if e.type == "harness.tool_call.succeeded")
    assert first.payload["args"]["cmd"].startswith(f"cat {example.SKILL_FILE};")
    skill_text = (ROOT / "examples/skills/known-issues/SKILL.md").read_text()
    assert first.payload["result"]["exitCode"] == 0
    assert first.payload["result"]["stdout"].startswith(skill_text)
