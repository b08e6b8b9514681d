"""Skills and capability drift on the fleet: real ``little worker`` processes (Redis + S3).

A worker reads the ``refund-policy`` skill folder when it imports the app module, mounts its
files read-only for the model's bash commands and runs the step. Then a worker is SIGKILLed
mid-step (its model turn recorded, a tool call in flight) and the step's retry lands on a
worker started with another ``lookup_order`` (its description changed): the retry fails with
``capability_drift`` and the event naming the changed section, instead of running on.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.skills_fleet_app import NOTE_ENV, SLEEP_ENV, build_script, refunds

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

SKILL = Path(__file__).parent / "skills_fixture" / "refund-policy"
FAST_FAILOVER = {
    "LITTLE_LEASE_TTL": "2",
    "LITTLE_HEARTBEAT_INTERVAL": "0.5",
    "LITTLE_DISPATCH_RESEND_AFTER": "5",
    "LITTLE_SIGNAL_CLAIM_IDLE": "1",
    "LITTLE_SOFT_SHUTDOWN_TIMEOUT": "0",
}


def setup(fleet_env: FleetEnv, tmp_path: Path) -> None:
    script = build_script().save(tmp_path / "script.json")
    fleet_env.env.update(
        {"LITTLE_APP": "tests.skills_fleet_app", "LITTLE_SCRIPTED_MODEL": str(script)}
    )
    fleet_env.env.update(FAST_FAILOVER)


def test_a_fleet_worker_gives_the_model_the_skill_files_read_only(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    setup(fleet_env, tmp_path)
    start_scheduler(fleet_env)
    start_worker(fleet_env, app="tests.skills_fleet_app")
    client = fleet_env.client()
    run_id = client.submit(refunds, {})
    state = client.wait(run_id, timeout=90)
    assert state.status == "completed", state
    assert state.output == "refund it"
    events = fleet_env.world().list_events(run_id)
    calls = [e for e in events if e.type == "harness.tool_call.succeeded"]
    assert [e.payload["toolName"] for e in calls] == ["bash", "lookup_order"]
    expected = (SKILL / "SKILL.md").read_text() + (SKILL / "references" / "limits.md").read_text()
    assert calls[0].payload["result"]["stdout"] == expected
    (started,) = [e for e in events if e.type == "harness.session.started"]
    assert started.payload["manifest"]["skillsHash"].startswith("sha256:")


def test_a_retry_on_a_worker_with_another_tool_fails_with_capability_drift(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    setup(fleet_env, tmp_path)
    start_scheduler(fleet_env)
    first = start_worker(fleet_env, app="tests.skills_fleet_app", env={SLEEP_ENV: "60"})
    client = fleet_env.client()
    run_id = client.submit(refunds, {})
    world = fleet_env.world()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        events = world.list_events(run_id)
        if any(
            e.type == "harness.tool_call.started" and e.payload["toolName"] == "lookup_order"
            for e in events
        ):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"the step never called lookup_order: {[e.type for e in events]}")
    first.kill()  # mid-call: the model's turns are recorded, the tool call is in flight
    start_worker(
        fleet_env,
        app="tests.skills_fleet_app",
        env={SLEEP_ENV: "0", NOTE_ENV: "Look an order up (now with its refunds)."},
    )

    state = client.wait(run_id, timeout=90)

    assert state.status == "failed", state
    events = world.list_events(run_id)
    failed = [e.payload for e in events if e.type == "StepFailed"]
    assert [f["error"]["causeCode"] for f in failed] == ["lease_expired", "capability_drift"]
    assert "allowedToolsHash" in failed[1]["error"]["message"]
    (drift,) = [e for e in events if e.type == "little.harness.capability_drift"]
    assert [c["section"] for c in drift.payload["changes"]] == ["allowedToolsHash"]
    assert drift.payload["attempt"] == 2
    # The retry ran no model turn and no tool with the other tool registry.
    attempt_two = [e for e in events if e.payload.get("attempt") == 2]
    assert not [e for e in attempt_two if e.type.startswith(("harness.model", "harness.tool"))]
