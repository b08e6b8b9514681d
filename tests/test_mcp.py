"""MCP tools: servers over stdio and streamable HTTP (a real SDK server, tests/mcp_server.py)
reached through upstream's gateway tools, their tool lists in the session manifest, MCP
calls recorded and replayed like any tool call, permission rules applied to them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow
from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError
from little_dist.event_types import typed
from little_dist.mcp import McpGateway, McpServerError, mcp_servers
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.world.local import LocalWorld
from tests.harness_helpers import of_type
from tests.mcp_server import calls

SERVER_SCRIPT = str(Path(__file__).with_name("mcp_server.py"))
GATEWAY = ["mcp_list_tools", "mcp_call_tool"]


def stdio_server(count_file: Path, server_id: str = "calc") -> dict[str, Any]:
    return {
        "id": server_id,
        "description": "A calculator.",
        "transport": {
            "type": "stdio",
            "command": sys.executable,
            "args": [SERVER_SCRIPT, str(count_file)],
        },
    }


def mcp_plan(name: str, **step_extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": name, "version": "0.1.0-alpha"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"tools": GATEWAY, "models": ["default"], "secrets": [], "network": []},
        "steps": [
            {
                "id": "sum",
                "uses": "ai.generate",
                "with": {"model": "default", "prompt": "Add 2 and 3.", "tools": GATEWAY},
                "output": {"mode": "text"},
                **step_extra,
            }
        ],
    }


def mcp_workflow(servers: list[dict[str, Any]], **options: Any) -> Any:
    return define_workflow(
        id="mcp.sum",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/mcp", id="default"),
        mcp=servers,
        **{"plan": mcp_plan("mcp.sum"), **options},
    )


def check_round_trip(world: LocalWorld, result: Any, script: ScriptedModel, server: str) -> None:
    assert result.output == "5"
    listed = json.loads(script.calls[1].tool_results[-1]["content"])
    (entry,) = listed["servers"]
    assert entry["id"] == server and entry["description"] == "A calculator."
    assert [tool["name"] for tool in entry["tools"]] == ["add", "delete_account"]
    add = entry["tools"][0]
    assert add["inputSchemaHash"] == sha256_digest(add["inputSchema"])
    called = json.loads(script.calls[2].tool_results[-1]["content"])
    assert called["structuredContent"] == {"result": 5} and called["isError"] is False
    assert called["content"][0]["text"] == "5"
    events = world.list_events(result.run_id)
    for event in events:
        if not event.type.startswith("little."):
            typed(event)
    succeeded = of_type(events, "harness.tool_call.succeeded")
    assert [e.payload["toolName"] for e in succeeded] == GATEWAY
    assert succeeded[1].payload["args"] == {
        "server": server,
        "tool": "add",
        "args": {"a": 2, "b": 3},
    }
    # The session manifest holds each server's tool list (upstream's manifest shape).
    session = of_type(events, "harness.session.started")[0].payload
    mcp = session["manifest"]["mcp"]
    assert mcp["gateway"] == {"listToolName": "mcp_list_tools", "callToolName": "mcp_call_tool"}
    assert mcp["servers"][0]["tools"] == entry["tools"]
    assert session["manifestHash"] == sha256_digest(session["manifest"])


def script_sum(script: ScriptedModel, server: str) -> None:
    script.on(step="sum").call_tool("mcp_list_tools", {}).then_call_tool(
        "mcp_call_tool", {"server": server, "tool": "add", "args": {"a": 2, "b": 3}}
    ).then_reply_text("5")


def test_a_stdio_server_round_trip(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    count = tmp_path / "calls"
    script_sum(scripted_model, "calc")
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(mcp_workflow([stdio_server(count)]), {}, world=world)
    check_round_trip(world, result, scripted_model, "calc")
    assert calls(count) == ["add"]
    assert sorted(t["function"]["name"] for t in scripted_model.calls[0].tools) == sorted(GATEWAY)


def free_port() -> int:
    from tests.ports import reserve_port

    return reserve_port()


def _serve(tmp_path: Path, *mode: str) -> Iterator[tuple[int, Path]]:
    count, port = tmp_path / "http-calls", free_port()
    process = subprocess.Popen(
        [sys.executable, SERVER_SCRIPT, str(count), str(port), *mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the test MCP server did not start") from None
                time.sleep(0.1)
        yield port, count
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    for port, count in _serve(tmp_path):
        yield f"http://127.0.0.1:{port}/mcp", count


@pytest.fixture
def sse_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    for port, count in _serve(tmp_path, "sse"):
        yield f"http://127.0.0.1:{port}/sse", count


def test_a_streamable_http_server_round_trip(
    tmp_path: Path, scripted_model: ScriptedModel, http_server: tuple[str, Path]
) -> None:
    url, count = http_server
    script_sum(scripted_model, "remote")
    server = {
        "id": "remote",
        "description": "A calculator.",
        "transport": {"type": "http", "url": url, "headers": {"Authorization": "Bearer t0ken"}},
    }
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(mcp_workflow([server]), {}, world=world)
    check_round_trip(world, result, scripted_model, "remote")
    assert calls(count) == ["add"]
    session = of_type(world.list_events(result.run_id), "harness.session.started")[0].payload
    # Headers (credentials) never reach the manifest.
    assert session["manifest"]["mcp"]["servers"][0]["transport"] == {"type": "http", "url": url}
    assert "t0ken" not in json.dumps(session)


def test_an_sse_server_round_trip(
    tmp_path: Path, scripted_model: ScriptedModel, sse_server: tuple[str, Path]
) -> None:
    url, count = sse_server
    script_sum(scripted_model, "legacy")
    server = {
        "id": "legacy",
        "description": "A calculator.",
        "transport": {"type": "sse", "url": url, "headers": {"Authorization": "Bearer t0ken"}},
    }
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(mcp_workflow([server]), {}, world=world)
    check_round_trip(world, result, scripted_model, "legacy")
    assert calls(count) == ["add"]
    session = of_type(world.list_events(result.run_id), "harness.session.started")[0].payload
    assert session["manifest"]["mcp"]["servers"][0]["transport"] == {"type": "sse", "url": url}
    assert "t0ken" not in json.dumps(session)


def test_a_retried_attempt_replays_the_mcp_call_instead_of_calling_again(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    count = tmp_path / "calls"
    # Attempt 1 calls the server, then its model call fails (retriable): attempt 2 runs.
    scripted_model.on(step="sum").call_tool(
        "mcp_call_tool", {"server": "calc", "tool": "add", "args": {"a": 2, "b": 3}}
    ).then_raise_error("server").then_reply_text("5")
    world = LocalWorld(tmp_path / "data")
    workflow = mcp_workflow(
        [stdio_server(count)], plan=mcp_plan("mcp.sum", retry={"maxAttempts": 2})
    )
    result = run_workflow(workflow, {}, world=world)
    assert result.output == "5"
    events = world.list_events(result.run_id)
    assert [e.payload["attempt"] for e in of_type(events, "StepAttemptStarted")] == [1, 2]
    assert calls(count) == ["add"]  # the server served the call once
    replayed = of_type(events, "little.harness.tool_call.memoized")
    assert [e.payload["toolName"] for e in replayed] == ["mcp_call_tool"]
    # Attempt 2's model saw the recorded result.
    assert json.loads(scripted_model.calls[-1].tool_results[-1]["content"])[
        "structuredContent"
    ] == {"result": 5}


def test_permission_rules_apply_to_mcp_calls(tmp_path: Path, scripted_model: ScriptedModel) -> None:
    count = tmp_path / "calls"
    scripted_model.on(step="sum").call_tools(
        [
            ToolCall(
                "mcp_call_tool",
                {"server": "calc", "tool": "delete_account", "args": {"account_id": "A1"}},
            ),
            ToolCall("mcp_call_tool", {"server": "calc", "tool": "add", "args": {"a": 2, "b": 3}}),
        ]
    ).then_reply_text("5")
    workflow = mcp_workflow(
        [stdio_server(count)],
        permissions=[{"tool": "mcp_call_tool", "args": {"tool": "delete_*"}, "action": "deny"}],
    )
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(workflow, {}, world=world)
    assert result.output == "5"
    assert calls(count) == ["add"]  # the denied call never reached the server
    seen = json.loads(scripted_model.calls[1].tool_results[0]["content"])
    assert "denied by the workflow's permission rules" in seen["error"]


def test_define_workflow_registers_the_gateway_without_connecting(tmp_path: Path) -> None:
    count = tmp_path / "calls"
    missing = {
        "id": "gone",
        "description": "Never started.",
        "transport": {"type": "stdio", "command": str(tmp_path / "no-such-server")},
    }
    workflow = mcp_workflow([stdio_server(count), missing])
    assert set(workflow.tools.names()) == set(GATEWAY)
    assert not count.exists()  # nothing connected yet
    call_tool = workflow.tools.get("mcp_call_tool")
    assert call_tool is not None and "calc: A calculator." in call_tool.description
    # The server configs are part of what the planner sees, so of the definition's hash.
    other = mcp_workflow([stdio_server(count, "calc2")])
    assert other.definition_hash() != workflow.definition_hash()
    with pytest.raises(InvalidInputError, match="already registered"):
        from little_dist.tools import tool

        @tool
        def mcp_call_tool(x: int) -> int:
            """Not the gateway."""
            return x

        mcp_workflow([stdio_server(count)], tools=[mcp_call_tool])


def test_an_unreachable_server_is_a_clear_retriable_error(tmp_path: Path) -> None:
    (server,) = mcp_servers(
        [
            {
                "id": "gone",
                "description": "Never started.",
                "transport": {"type": "stdio", "command": str(tmp_path / "no-such-server")},
            }
        ],
        "mcp",
    )
    gateway = McpGateway([server], timeout=20)
    with pytest.raises(McpServerError, match="MCP server 'gone': listing tools failed") as caught:
        gateway.capability_manifest()
    assert caught.value.retryable is True
    with pytest.raises(InvalidInputError, match=r"unknown MCP server 'nope' \(servers: gone\)"):
        gateway.call("nope", "add")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ([{"id": "a b", "description": "x", "transport": {}}], r"mcp\[0\]\.id must match"),
        ([{"id": "a", "description": " ", "transport": {}}], r"mcp\[0\]\.description is required"),
        (
            [{"id": "a", "description": "x", "transport": {"type": "ws", "url": "ws://h"}}],
            r"mcp\[0\]\.transport\.type must be 'stdio', 'http', 'sse' or 'websocket', got 'ws'",
        ),
        (
            [{"id": "a", "description": "x", "transport": {"type": "http", "url": "ftp://h"}}],
            r"mcp\[0\]\.transport\.url must be an http\(s\) URL, got 'ftp://h'",
        ),
        (
            {"servers": [], "gateway": {"listToolName": "list_mcp"}},
            r"mcp: unsupported field\(s\) \['gateway'\]",
        ),
        (
            {"servers": [stdio_server(Path("c")), stdio_server(Path("d"))]},
            r"mcp\.servers: MCP server ids must be unique \('calc'\)",
        ),
        ("calc", "must be a list of MCP servers"),
    ],
)
def test_bad_mcp_config_is_refused_naming_where(given: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        mcp_servers(given, "mcp")
