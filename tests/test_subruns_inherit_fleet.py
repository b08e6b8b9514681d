"""What a sub-run inherits, on the fleet (real ``little worker`` / ``little scheduler``
processes, Redis and S3; the app is :mod:`tests.inherit_fleet_app`): a child started by a
fleet worker runs, on whichever worker takes it, under its parent's denies and with the
orchestration's pipeline store mounted read-only — both read from the child's own
``RunStarted``, never from the parent's process."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from little_dist.events import Event
from little_dist.memory import memory_store_for
from little_dist.memory.layout import pipeline_store_id
from little_dist.subruns import SUB_RUN_STARTED
from little_dist.subruns.links import STEP_SUSPENDED
from tests.fleet_processes import FleetEnv, FleetProcess, fleet_env, start_scheduler, start_worker
from tests.inherit_fleet_app import LOOKUP_DENY, NOTE, SCRIPT_ENV

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

APP = "tests.inherit_fleet_app"


def _of(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def _child_of(fleet: FleetEnv, parent: str) -> str | None:
    started = _of(fleet.world().list_events(parent), SUB_RUN_STARTED)
    return str(started[0].payload["childRunId"]) if started else None


def _wait_for(what: str, check: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _names(worker: FleetProcess) -> str:
    """The prefix of the ``workerId`` of every attempt ``worker`` runs (it names its pid)."""
    return f"worker:{socket.gethostname()}:{worker.pid}:"


def _submit(fleet: FleetEnv, workflow: Any, scenario: str, run_id: str) -> str:
    return fleet.client().submit(workflow, {"scenario": scenario}, run_id=run_id)


def test_a_child_on_another_worker_reads_the_pipeline_store_read_only(
    fleet_env: FleetEnv,
) -> None:
    from tests.inherit_fleet_app import pipeline_boss, reader

    fleet_env.env.update({"LITTLE_APP": APP, SCRIPT_ENV: "normal"})
    start_scheduler(fleet_env)
    # Worker one's reader model never answers: the reader's command can only run elsewhere.
    one = start_worker(
        fleet_env, app=APP, concurrency=2, env={SCRIPT_ENV: "hang-reader"}, timeout=120
    )
    client = fleet_env.client()
    world = fleet_env.world()
    # An earlier orchestration wrote the pipeline's notes (published when it completed).
    wrote = _submit(fleet_env, pipeline_boss, "write", "run_inherit_write")
    assert client.wait(wrote, timeout=90).status == "completed"
    parent = _submit(fleet_env, pipeline_boss, "read", "run_inherit_read")

    def child_in_its_model_call() -> bool:
        child = _child_of(fleet_env, parent)
        return child is not None and bool(_of(world.list_events(child), "harness.model.called"))

    _wait_for("the reader in its model call on worker one", child_in_its_model_call)
    one.kill()
    two = start_worker(fleet_env, app=APP, concurrency=2, timeout=120)
    state = client.wait(parent, timeout=150)
    assert state.status == "completed", state.error
    assert state.output == "boss done"
    parent_events = world.list_events(parent)
    assert len(_of(parent_events, STEP_SUSPENDED)) == 1
    child = _child_of(fleet_env, parent)
    assert child is not None
    events = world.list_events(child)
    pipeline = pipeline_store_id([reader.definition_hash()])
    # The reader's attempt on worker one was lost; the one on worker two ran the command.
    attempts = [e.payload["workerId"] for e in _of(events, "StepAttemptStarted")]
    assert [w.startswith(_names(one)) for w in attempts] == [True, False]
    assert attempts[-1].startswith(_names(two))
    (call,) = _of(events, "harness.tool_call.succeeded")
    assert call.payload["attempt"] == 2
    result = call.payload["result"]
    assert result["stdout"] == NOTE + "\n"
    assert result["exitCode"] != 0 and "Read-only file system" in result["stderr"]
    # Its session manifest names the store; the store is as the orchestrator left it.
    sessions = _of(events, "harness.session.started")
    assert all(pipeline in s.payload["manifest"]["memoryStoreIds"] for s in sessions)
    store = memory_store_for(world)
    entries = store.entries(pipeline)
    assert sorted(entries) == ["plan.md"] and entries["plan.md"].version == 1
    assert store.read(pipeline, entries["plan.md"]) == (NOTE + "\n").encode()
    # What the child inherits is in its own log, whichever worker reads it.
    (started,) = _of(events, "RunStarted")
    assert started.payload["parentRunId"] == parent
    assert started.payload["inherited"] == {"pipelineMemoryStore": pipeline}


def test_a_child_on_the_fleet_cannot_call_a_tool_its_parent_denies(fleet_env: FleetEnv) -> None:
    from tests.inherit_fleet_app import guarded

    fleet_env.env.update({"LITTLE_APP": APP, SCRIPT_ENV: "normal"})
    start_scheduler(fleet_env)
    for _ in range(2):
        start_worker(fleet_env, app=APP, concurrency=1, timeout=120)
    parent = _submit(fleet_env, guarded, "deny", "run_inherit_deny")
    state = fleet_env.client().wait(parent, timeout=120)
    assert state.status == "completed", state.error
    child = _child_of(fleet_env, parent)
    assert child is not None
    events = fleet_env.world().list_events(child)
    decided = [
        e.payload
        for e in _of(events, "harness.permission.decided")
        if e.payload["toolName"] == "lookup"
    ]
    assert [(d["decision"], d["reason"], d["rule"]) for d in decided] == [
        ("deny", "rule", LOOKUP_DENY)
    ]
    (failed,) = _of(events, "harness.tool_call.failed")
    error = failed.payload["error"]
    assert error["causeCode"] == "permission_denied"
    assert "denied by the workflow's permission rules" in error["message"]
    assert _of(events, "harness.tool_call.succeeded") == []
    # The finder's model was told so, and answered; the parent got the child's answer.
    (finished,) = _of(events, "RunCompleted")
    assert finished.payload["output"] == "child done"
    (answered,) = [
        e
        for e in _of(fleet_env.world().list_events(parent), "harness.tool_call.succeeded")
        if e.payload["toolName"] == "inherit.finder"
    ]
    assert answered.payload["result"]["outputSummary"] == "child done"
    (started,) = _of(events, "RunStarted")
    assert started.payload["inherited"] == {"permissionDenies": [LOOKUP_DENY]}
