"""MCP on the fleet: a real ``little worker`` process starts the test MCP server over stdio,
lists its tools into the session manifest and calls one through the gateway; an ``ask``
rule waits for a person there (no approver runs on a worker), and its timeout denies it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.mcp_fleet_app import CALLS_ENV, build_script, mcp_sum
from tests.mcp_server import calls

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def test_a_fleet_worker_calls_an_mcp_tool_and_denies_an_ask(
    fleet_env: FleetEnv, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    script = build_script().save(tmp_path / "script.json")
    fleet_env.env.update(
        {
            "LITTLE_APP": "tests.mcp_fleet_app",
            "LITTLE_SCRIPTED_MODEL": str(script),
            CALLS_ENV: str(served),
        }
    )
    start_scheduler(fleet_env)
    start_worker(fleet_env, app="tests.mcp_fleet_app")
    client = fleet_env.client()
    run_id = client.submit(mcp_sum, {})
    state = client.wait(run_id, timeout=90)
    assert state.status == "completed", state
    assert state.output == "5"
    assert calls(served) == ["add"]  # the denied call never reached the server
    events = fleet_env.world().list_events(run_id)
    decided = [e.payload for e in events if e.type == "harness.permission.decided"]
    # The allowed call runs in the first attempt, which then suspends for the ask; the
    # attempt that resumes takes it from the memo and applies the ask's timeout.
    assert [(d["action"], d["decision"], d["reason"]) for d in decided] == [
        ("allow", "allow", "no_rule"),
        ("ask", "deny", "timed_out"),
    ]
    (result,) = [e for e in events if e.type == "harness.tool_call.succeeded"]
    assert result.payload["result"]["structuredContent"] == {"result": 5}
    session = next(e for e in events if e.type == "harness.session.started")
    (server,) = session.payload["manifest"]["mcp"]["servers"]
    assert [tool["name"] for tool in server["tools"]] == ["add", "delete_account"]
    failed = [e for e in events if e.type == "harness.tool_call.failed"]
    assert "nobody decided its approval in time" in failed[0].payload["error"]["message"]
