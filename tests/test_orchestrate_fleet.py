"""The orchestrator on the fleet: its ``run_workflow`` / ``start_workflow`` calls start their
sub-runs on the fleet and suspend the orchestrator's step (no slot held, no thread blocked),
``maxConcurrentSubRuns`` holds calls back without a thread (``resumeOn: "any"``), and the
results reach the model, inline or as files over bash. Real ``little worker`` /
``little scheduler`` processes, Redis and S3; the app is :mod:`tests.orchestrate_fleet_app`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from little_dist.canonical import sha256_digest
from little_dist.events import Event
from little_dist.fleet.app_registry import load_registry
from little_dist.subruns import SUB_RUN_ENDED, SUB_RUN_STARTED
from little_dist.subruns.links import STEP_SUSPENDED
from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.orchestrate_fleet_app import DONE, READ_RESULTS, SCRIPT_ENV
from tests.subrun_fleet_app import FX_PREFIX_ENV, kid_key

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

APP = "tests.orchestrate_fleet_app"


def _configure(fleet: FleetEnv) -> None:
    fleet.env.update({SCRIPT_ENV: "1", FX_PREFIX_ENV: fleet.key_prefix, "LITTLE_APP": APP})


def _types(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def _awaited(events: list[Event]) -> list[str]:
    """The children the orchestrator's calls ran (not their planning runs), in order."""
    return [
        e.payload["childRunId"]
        for e in _types(events, SUB_RUN_STARTED)
        if e.payload.get("disposition") == "await"
    ]


def _wait_until(what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _submit(fleet: FleetEnv, workflow: Any, scenario: str) -> str:
    return fleet.client().submit(workflow, {"scenario": scenario})


def _completed(fleet: FleetEnv, run_id: str, timeout: float = 180) -> list[Event]:
    state = fleet.client().wait(run_id, timeout=timeout)
    assert state.status == "completed", state.error
    assert state.output == DONE
    return fleet.world().list_events(run_id)


def _check_children(fleet: FleetEnv, parent: str, expected: int) -> dict[str, list[Event]]:
    """Each child started once, linked to the orchestrator's step, and completed."""
    events = fleet.world().list_events(parent)
    children = _awaited(events)
    assert len(children) == len(set(children)) == expected
    logs = {child: fleet.world().list_events(child) for child in children}
    for events_of_child in logs.values():
        (started,) = _types(events_of_child, "RunStarted")
        assert started.payload["parentRunId"] == parent
        assert started.payload["parentStepPath"] == "orchestrate"
        assert events_of_child[-1].type == "RunCompleted"
    return logs


def _calls(events: list[Event]) -> dict[int, dict[str, Any]]:
    """The ``start_workflow`` results by the kid's ``n``: each call answered once."""
    succeeded = [
        e
        for e in _types(events, "harness.tool_call.succeeded")
        if e.payload["toolName"] == "start_workflow"
    ]
    by_n = {e.payload["args"]["input"]["n"]: e.payload["result"] for e in succeeded}
    assert len(by_n) == len(succeeded)
    return by_n


def _open_counts(fleet: FleetEnv, events: list[Event]) -> list[int]:
    """How many children ran at once at each suspension: started and not ended before it."""
    counts = []
    for index, event in enumerate(events):
        if event.type != STEP_SUSPENDED:
            continue
        before = events[:index]
        started = set(_awaited(before))
        ended = {e.payload["childRunId"] for e in _types(before, SUB_RUN_ENDED)}
        counts.append(len(started - ended))
    return counts


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_one_slot_completes_an_orchestration_of_four_children_behind_a_gate_of_two(
    fleet_env: FleetEnv,
) -> None:
    # One worker, one slot: were the orchestrator's step to wait for its children in the
    # worker's thread, none of them could ever run.
    from tests.orchestrate_fleet_app import gated

    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=1)
    run_id = _submit(fleet_env, gated, "four-kids")
    events = _completed(fleet_env, run_id)
    _check_children(fleet_env, run_id, 4)
    by_n = _calls(events)
    assert sorted(by_n) == [1, 2, 3, 4]
    for n, result in by_n.items():
        assert result["status"] == "completed"
        assert result["output"] == {"n": n, "step": "second", "value": 2 * n}
        assert result["workflowVersionId"].startswith("wfver_")
    suspended = _types(events, STEP_SUSPENDED)
    # The first suspension held two calls back: it resumes at the first child's end.
    assert suspended[0].payload["resumeOn"] == "any"
    assert len(suspended[0].payload["waitingFor"]) == 2
    # Never more than the gate's two children at once.
    assert max(_open_counts(fleet_env, events)) <= 2
    # The held-back children started in the order of their calls.
    started = [
        e.payload["inputHash"]
        for e in _types(events, SUB_RUN_STARTED)
        if e.payload["disposition"] == "await"
    ]
    assert started == [sha256_digest({"n": n, "sleep": 0.5}) for n in range(1, 5)]
    # The model's first turn was asked once; each resume replayed it from the memo.
    assert len(_types(events, "harness.model.responded")) == 2
    for n in range(1, 5):
        for step in ("first", "second"):
            assert _count(fleet_env, kid_key(fleet_env.key_prefix, n, step)) == 1


def _count(fleet: FleetEnv, key: str) -> int:
    import redis

    client = redis.Redis.from_url(fleet.redis_url)
    try:
        value = client.get(key)
    finally:
        client.close()
    return int(value) if value is not None else 0


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_sigkill_of_the_orchestrators_worker_loses_no_result_and_starts_no_child_twice(
    fleet_env: FleetEnv,
) -> None:
    from tests.orchestrate_fleet_app import gated

    _configure(fleet_env)
    start_scheduler(fleet_env)
    worker = start_worker(fleet_env, app=APP, concurrency=2)
    run_id = _submit(fleet_env, gated, "slow-kids")

    def mid_orchestration() -> bool:
        # Resumed once (a held-back child started) and waiting again: two children
        # running, one held back still.
        events = fleet_env.world().list_events(run_id)
        return len(_types(events, STEP_SUSPENDED)) >= 2 and len(_awaited(events)) >= 3

    _wait_until("the orchestration midway", mid_orchestration)
    worker.kill()
    start_worker(fleet_env, app=APP, concurrency=2)
    events = _completed(fleet_env, run_id, timeout=200)
    logs = _check_children(fleet_env, run_id, 4)
    by_n = _calls(events)
    assert sorted(by_n) == [1, 2, 3, 4]
    for n, result in by_n.items():
        assert result["output"] == {"n": n, "step": "second", "value": 2 * n}
    for child_events in logs.values():
        completed = [e.payload["stepPath"] for e in _types(child_events, "StepCompleted")]
        assert completed == ["first", "second"]
    assert len(_types(events, SUB_RUN_STARTED)) == 8  # four planning runs, four children
    assert max(_open_counts(fleet_env, events)) <= 2


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_sigkill_of_the_orchestrators_worker_before_its_suspension_commits(
    fleet_env: FleetEnv,
) -> None:
    # The orchestrator's turn starts two children, then runs a bash command: its worker is
    # killed in that command, before the attempt suspended. The retry replays the turn,
    # takes the planned versions from the log, finds the two children (the same ids) and
    # starts no other.
    from tests.orchestrate_fleet_app import SLEEP_IN_BASH, files

    _configure(fleet_env)
    start_scheduler(fleet_env)
    worker = start_worker(fleet_env, app=APP, concurrency=2)
    run_id = _submit(fleet_env, files, "kill-in-bash")

    def in_bash() -> bool:
        # (the call's write-ahead record; the command's own events are written with its end)
        events = fleet_env.world().list_events(run_id)
        return any(
            e.type == "harness.tool_call.started" and e.payload.get("toolName") == "bash"
            for e in events
        )

    _wait_until("the bash command running", in_bash)
    time.sleep(1.0)  # (well inside its eight seconds)
    worker.kill()
    start_worker(fleet_env, app=APP, concurrency=2)
    events = _completed(fleet_env, run_id, timeout=200)
    _check_children(fleet_env, run_id, 2)
    assert sorted(_calls(events)) == [1, 2]
    commands = _types(events, "harness.runtime.command.started")
    assert [e.payload["command"] for e in commands] == [SLEEP_IN_BASH]  # (the retry's)
    assert commands[0].payload["attempt"] == 2
    failed = _types(events, "StepFailed")
    assert [e.payload["error"]["causeCode"] for e in failed] == ["lease_expired"]
    # two planning runs and two children, each recorded once
    assert len(_types(events, SUB_RUN_STARTED)) == 4


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_with_bash_the_outputs_come_as_files_the_orchestrators_bash_reads(
    fleet_env: FleetEnv,
) -> None:
    from tests.orchestrate_fleet_app import files

    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=2)
    run_id = _submit(fleet_env, files, "file-kids")
    events = _completed(fleet_env, run_id)
    children = _check_children(fleet_env, run_id, 3)
    by_n = _calls(events)
    assert sorted(by_n) == [1, 2, 3]
    for result in by_n.values():
        assert "output" not in result
        assert result["outputPath"] == (
            f"/mnt/scratch/own/workflow-results/{result['runId']}/output.json"
        )
        assert result["outputSummary"]["kind"] == "object"
        assert result["runId"] in children
    (read,) = [
        e for e in _types(events, "harness.tool_call.succeeded") if e.payload["toolName"] == "bash"
    ]
    assert read.payload["args"] == {"cmd": READ_RESULTS}
    assert sorted(item["value"] for item in _json_values(read.payload["result"]["stdout"])) == [
        2,
        4,
        6,
    ]


def _json_values(text: str) -> list[Any]:
    decoder, values, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        value, at = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        values.append(value)
    return values


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_run_workflow_runs_the_version_plan_workflow_planned_on_the_fleet(
    fleet_env: FleetEnv,
) -> None:
    from tests.orchestrate_fleet_app import (
        PLAN_THEN_RUN,
        PLANNED_INPUT,
        RUN_INPUTS,
        gated,
        planned_kid_version_id,
    )

    _configure(fleet_env)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app=APP, concurrency=1)
    run_id = _submit(fleet_env, gated, PLAN_THEN_RUN)
    events = _completed(fleet_env, run_id)
    planned = planned_kid_version_id(PLANNED_INPUT)
    (plan,) = [e for e in _types(events, SUB_RUN_ENDED) if e.payload["status"] == "planned"]
    assert plan.payload["workflowVersionId"] == planned
    logs = _check_children(fleet_env, run_id, len(RUN_INPUTS))
    for child_events in logs.values():
        (started,) = _types(child_events, "RunStarted")
        assert started.payload["workflowVersionId"] == planned
    succeeded = [
        e
        for e in _types(events, "harness.tool_call.succeeded")
        if e.payload["toolName"] == "run_workflow"
    ]
    outputs = sorted(e.payload["result"]["output"]["value"] for e in succeeded)
    assert outputs == [2, 4, 6]
    assert max(_open_counts(fleet_env, events)) <= 2
    assert _types(events, STEP_SUSPENDED)[0].payload["resumeOn"] == "any"


def test_the_fleet_registry_knows_an_orchestrator_and_the_workflows_its_tools_run() -> None:
    registry = load_registry(APP)
    assert sorted(registry.workflows) == ["orch.files", "orch.gated", "sub.kid"]
    tools = registry.capabilities_for_workflow("orch.gated").tools
    assert {"plan_workflow", "run_workflow", "start_workflow"} <= set(tools.names())


def test_start_many_submits_one_batch_per_workflow_and_planned_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from little_dist.fleet import submission
    from little_dist.fleet.sub_runs import FleetSubRuns
    from little_dist.subruns.engine import ChildToStart
    from tests.orchestrate_fleet_app import files, gated

    batches: list[tuple[Any, list[str]]] = []

    def submit_runs(world: Any, workflow: Any, inputs: Any, **options: Any) -> list[str]:
        batches.append((workflow, list(options["run_ids"])))
        return list(options["run_ids"])

    monkeypatch.setattr(submission, "submit_runs", submit_runs)
    one = SimpleNamespace(id="wfver_one")
    two = SimpleNamespace(id="wfver_two")
    runtime = SimpleNamespace(world=None, settings=None, registry=None)
    starts = [
        ChildToStart("run_sub_a", gated, {}, {}, one),
        ChildToStart("run_sub_b", gated, {}, {}, two),
        ChildToStart("run_sub_c", gated, {}, {}, one),
        ChildToStart("run_sub_d", gated, {}, {}),
        ChildToStart("run_sub_e", files, {}, {}),
    ]
    FleetSubRuns(runtime).start_many(starts)
    assert batches == [
        (one, ["run_sub_a", "run_sub_c"]),
        (two, ["run_sub_b"]),
        (gated, ["run_sub_d"]),
        (files, ["run_sub_e"]),
    ]
