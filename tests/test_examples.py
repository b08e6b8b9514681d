"""Every example runs offline end to end, with its fixed plan and with the planner."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import jsonschema
import pytest

from little_dist.api import run_workflow
from little_dist.world.in_process import MemoryWorld
from tests import zygote

ROOT = Path(__file__).parent.parent
EXAMPLES = [
    "support_triage",
    "candidate_screening",
    "draft_review",
    "order_totals",
    "research_digest",
]


@pytest.fixture(params=EXAMPLES)
def example(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    monkeypatch.delenv("LITTLE_MODEL", raising=False)
    module = importlib.import_module(f"examples.{request.param}")
    script = module.SCRIPT
    assert script is not None, "the example must install its script when LITTLE_MODEL is unset"
    # Importing installed it for the example's own model only: it answers no other test's
    # calls, and stays installed for the next test that imports the example.
    yield module


def test_the_fixed_plan_runs_offline_and_the_output_validates(example: ModuleType) -> None:
    world = MemoryWorld()
    workflow = example.workflow
    result = run_workflow(workflow, example.SAMPLE_INPUT, world=world)
    assert result.status == "completed"
    raw = result.state.output
    jsonschema.Draft7Validator(workflow.output_schema).validate(raw)
    assert result.output == workflow.output_adapter.validate_python(raw)
    # Scripted usage is realistic and priced under the example's pricing key.
    assert result.usage.cached_input_tokens > 0
    assert result.usage.cost_usd is not None and result.usage.cost_usd > 0
    types = [event.type for event in world.list_events(result.run_id)]
    assert "harness.model.called" in types
    assert "PlannerDraftedWorkflow" in types  # the fixed plan is the only draft
    assert "PlannerStarted" in types and types.count("harness.model.called") == len(
        [c for c in example.SCRIPT.calls if c.run_id == result.run_id]
    )


def test_the_planner_designs_it_offline_and_reviews_it_on_a_second_run(
    example: ModuleType,
) -> None:
    world = MemoryWorld()
    first = run_workflow(example.planned_workflow, example.SAMPLE_INPUT, world=world)
    second = run_workflow(example.planned_workflow, example.SAMPLE_INPUT, world=world)
    assert first.status == second.status == "completed"
    assert first.output == second.output
    # The module's script outlives this test (other tests run the same example): count only
    # the calls of these two runs.
    ours = {first.run_id, second.run_id}
    planner_calls = [
        c for c in example.SCRIPT.calls if c.step_path == "planner" and c.run_id in ours
    ]
    assert [c.run_id for c in planner_calls] == [first.run_id, second.run_id]
    # The second planner call is shown the first run's version (planner-reviewed reuse);
    # the scripted planner answers with the same plan, so the same version runs.
    review = "".join(str(m.get("content")) for m in planner_calls[1].messages)
    assert f"Candidate WorkflowVersion: {first.workflow_version_id}" in review
    assert first.workflow_version_id == second.workflow_version_id


def test_examples_loop_and_fan_out_as_described() -> None:
    screening = importlib.import_module("examples.candidate_screening")
    review = importlib.import_module("examples.draft_review")
    world = MemoryWorld()
    result = run_workflow(screening.workflow, screening.SAMPLE_INPUT, world=world)
    branches = {path for path in result.state.steps if path.startswith("screen[")}
    assert branches == {"screen[c-101].score", "screen[c-102].score", "screen[c-103].score"}
    result = run_workflow(review.workflow, review.SAMPLE_INPUT, world=world)
    visits = sorted(path for path in result.state.steps if ".visit[" in path)
    assert visits == [
        "draft.visit[0]",
        "draft.visit[1]",
        "review.visit[0]",
        "review.visit[1]",
        "route.visit[0]",
        "route.visit[1]",
    ]
    assert result.output.review_notes.startswith("All three points")


def test_order_totals_passes_a_scratch_file_between_steps_and_the_fixer_repairs_the_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LITTLE_MODEL", raising=False)
    totals = importlib.import_module("examples.order_totals")
    world = MemoryWorld()
    result = run_workflow(totals.workflow, totals.SAMPLE_INPUT, world=world)
    assert result.output.totals == {"north": 162.75, "south": 80.0, "west": 300.0}
    events = world.list_events(result.run_id)
    # collect wrote orders.csv with bash; check read it from peer-steps with python3.
    (created,) = [e for e in events if e.type == "harness.file.created"]
    assert created.payload["path"] == "/mnt/scratch/own/orders.csv"
    assert created.payload["stepPath"] == "collect"
    calls = {
        e.payload["stepPath"]: e.payload["result"]
        for e in events
        if e.type == "harness.tool_call.succeeded"
    }
    assert calls["check"] == {"stdout": "4 542.75\n", "stderr": "", "exitCode": 0}
    # The pinned program failed; the fixer's second try is the program that ran.
    (failed,) = [e for e in events if e.type == "StepFailed"]
    assert failed.payload["stepPath"] == "totals"
    assert "input.order is not iterable" in failed.payload["error"]["message"]
    fixer = [
        c for c in totals.SCRIPT.calls if c.run_id == result.run_id and c.step_path == "totals"
    ]
    assert len(fixer) == 2 and "The repaired program failed" in fixer[1].last_user_text
    session = [
        e
        for e in events
        if e.type == "harness.session.completed" and e.payload["stepPath"] == "totals"
    ][-1]
    fix = session.payload["output"]["result"]
    assert fix["fixedSource"] == totals.FIXED_PROGRAM and fix["attempts"] == 2


def test_examples_imported_into_one_process_each_answer_their_own_model(tmp_path: Path) -> None:
    # Each example installs its script for its own model name: importing all three (as a
    # worker with three --app modules does) leaves every one of them runnable.
    env = {key: value for key, value in os.environ.items() if key != "LITTLE_MODEL"}
    env["PYTHONPATH"] = str(ROOT)
    result = zygote.run(list(EXAMPLES), module="tests.examples_together", cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:-1] == [
        f"examples.{name} completed" for name in EXAMPLES for _ in range(2)
    ]


@pytest.mark.parametrize("name", EXAMPLES)
def test_python_dash_m_runs_the_example_and_points_at_the_report(name: str, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "LITTLE_MODEL"}
    env["PYTHONPATH"] = str(ROOT)
    # `python -m examples.NAME`, forked from the test zygote (tests/zygote.py)
    result = zygote.run(
        ["--data-dir", str(tmp_path / "world")],
        module=f"examples.{name}",
        cwd=ROOT,
        env=env,
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert "run id: run_" in result.stdout
    assert "little report run_" in result.stdout
    assert "little events run_" in result.stdout
    assert (tmp_path / "world" / "events" / "events.db").exists()


def _python(args: list[str]) -> subprocess.CompletedProcess[str]:
    """This interpreter, offline (no ``LITTLE_MODEL``), from the repository root."""
    env = {key: value for key, value in os.environ.items() if key != "LITTLE_MODEL"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_documented_sample_input_is_the_built_in_one(name: str) -> None:
    module = importlib.import_module(f"examples.{name}")
    sample = ROOT / "examples" / "inputs" / f"{name}.json"
    assert json.loads(sample.read_text(encoding="utf-8")) == module.SAMPLE_INPUT
    readme = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    assert f"little run examples.{name}:workflow --input examples/inputs/{name}.json" in readme


@pytest.mark.parametrize(
    ("args", "code", "expected"),
    [
        (["--input", "{bad"], 2, "--input: invalid JSON at line 1 column 2"),
        (["--input", "missing.json"], 2, "--input: cannot read missing.json: no such file"),
        (["--input", '{"topic": 3}'], 1, "invalid input: input: 'audience' is a required"),
        (["--run-id", "not a run id"], 2, "--run-id: Invalid run id: 'not a run id'"),
    ],
    ids=["not-json", "no-file", "schema", "run-id"],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    args: list[str], code: int, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    review = importlib.import_module("examples.draft_review")
    assert review.main(["--data-dir", str(tmp_path / "w"), *args]) == code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("python -m examples.draft_review: ") and expected in last
    assert len(err.splitlines()) == 1
    assert out == ""


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_the_printed_run_id_resumes_the_run(tmp_path: Path) -> None:
    world = str(tmp_path / "world")
    env = {key: value for key, value in os.environ.items() if key != "LITTLE_MODEL"}
    env["PYTHONPATH"] = str(ROOT)
    # The model answers slowly, so the interrupt lands while a step is in flight.
    code = (
        "import sys, examples.support_triage as m\n"
        "m.SCRIPT.latency = 30\n"
        "raise SystemExit(m.main(sys.argv[1:]))\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, "--data-dir", world],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    first = process.stderr.readline()
    assert "run id run_" in first, first
    run_id = first.rsplit(" ", 1)[-1].strip()
    # Wait until a model call is in flight (the tools ran; their events are in the log).
    from little_dist.world.local import LocalWorld

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        reader = LocalWorld(world)
        try:
            if any(e.type == "harness.model.called" for e in reader.list_events(run_id)):
                break
        except Exception:  # the world is still being created
            pass
        finally:
            reader.close()
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail("the run never reached a model call")
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 130
    assert stdout == ""
    assert stderr.splitlines() == [
        "python -m examples.support_triage: interrupted; the run is kept, resume it with: "
        f"python -m examples.support_triage --run-id {run_id} --data-dir {world}"
    ]
    resumed = _python(["-m", "examples.support_triage", "--run-id", run_id, "--data-dir", world])
    assert resumed.returncode == 0, resumed.stderr
    assert f"run id: {run_id}" in resumed.stdout
