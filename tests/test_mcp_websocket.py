"""MCP over a WebSocket (little_dist/mcp/websocket.py) against a real server: the SDK's
server session served over ``websockets`` by tests/mcp_server.py, and servers that
misbehave (close at once, send garbage, send a frame over the bound)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from little_dist import run_workflow
from little_dist.errors import InvalidInputError
from little_dist.mcp import McpGateway, McpServerError, mcp_servers
from little_dist.mcp.websocket import websocket_client
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.harness_helpers import of_type
from tests.mcp_server import calls
from tests.test_mcp import _serve, check_round_trip, free_port, mcp_workflow, script_sum


def ws_server(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "sock",
        "description": "A calculator.",
        "transport": {"type": "websocket", "url": url, **extra},
        "tools": {"exclude": ["blob"]},
    }


@pytest.fixture
def websocket_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    for port, count in _serve(tmp_path, "websocket"):
        yield f"ws://127.0.0.1:{port}/mcp", count


def gateway_for(url: str, timeout: float = 20) -> McpGateway:
    return McpGateway(mcp_servers([ws_server(url)], "mcp"), timeout=timeout)


def test_a_websocket_server_round_trip(
    tmp_path: Path, scripted_model: ScriptedModel, websocket_server: tuple[str, Path]
) -> None:
    url, count = websocket_server
    script_sum(scripted_model, "sock")
    server = ws_server(url, headers={"Authorization": "Bearer t0ken"})
    world = LocalWorld(tmp_path / "data")
    result = run_workflow(mcp_workflow([server]), {}, world=world)
    check_round_trip(world, result, scripted_model, "sock")
    assert calls(count) == ["add"]
    session = of_type(world.list_events(result.run_id), "harness.session.started")[0].payload
    transport = session["manifest"]["mcp"]["servers"][0]["transport"]
    assert transport == {"type": "websocket", "url": url}
    assert "t0ken" not in json.dumps(session)


def test_a_frame_over_the_bound_closes_the_connection(websocket_server: tuple[str, Path]) -> None:
    url, count = websocket_server

    async def main() -> None:
        from mcp import ClientSession

        async with (
            websocket_client(url, max_message_bytes=64 * 1024) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            small = await session.call_tool("blob", {"size": 1000})
            assert small.content[0].text == "x" * 1000  # type: ignore[union-attr]
            await session.call_tool("blob", {"size": 1_000_000})

    started = time.monotonic()
    with pytest.raises(BaseExceptionGroup) as caught:
        anyio.run(main)
    assert time.monotonic() - started < 15  # failed at once, not at a timeout
    (error,) = caught.value.exceptions
    assert "over the 65536-byte limit" in str(error)
    assert calls(count) == ["blob", "blob"]


def test_the_gateway_bounds_frames_too(
    websocket_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, count = websocket_server
    monkeypatch.setattr("little_dist.mcp.websocket.MAX_MESSAGE_BYTES", 4096)
    gateway = McpGateway(mcp_servers([{**ws_server(url), "tools": {}}], "mcp"), timeout=20)
    assert gateway.call("sock", "blob", {"size": 100})["content"][0]["text"] == "x" * 100
    with pytest.raises(McpServerError, match=r"calling tool 'blob' failed: .*4096-byte limit"):
        gateway.call("sock", "blob", {"size": 100_000})
    assert calls(count) == ["blob", "blob"]


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("ws-close", r"MCP server 'sock': listing tools failed: .*closed.*1011: going away"),
        ("ws-garbage", r"MCP server 'sock': listing tools failed: .*not a JSON-RPC message"),
    ],
)
def test_a_misbehaving_server_is_a_clear_error(tmp_path: Path, mode: str, message: str) -> None:
    for port, _ in _serve(tmp_path, mode):
        gateway = gateway_for(f"ws://127.0.0.1:{port}/mcp")
        started = time.monotonic()
        with pytest.raises(McpServerError, match=message) as caught:
            gateway.capability_manifest()
        assert time.monotonic() - started < 15  # not a wait for the timeout
        assert caught.value.retryable is True


def test_nothing_listening_is_a_clear_retriable_error() -> None:
    gateway = gateway_for(f"ws://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(McpServerError, match="MCP server 'sock': listing tools failed") as caught:
        gateway.capability_manifest()
    assert caught.value.retryable is True


def test_a_plain_http_server_is_not_mistaken_for_a_websocket(tmp_path: Path) -> None:
    for port, _ in _serve(tmp_path):  # streamable HTTP
        gateway = gateway_for(f"ws://127.0.0.1:{port}/mcp")
        with pytest.raises(McpServerError, match=r"listing tools failed: .*HTTP 4\d\d"):
            gateway.capability_manifest()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1/mcp", "'http://127.0.0.1/mcp'"),
        ("ws://", "'ws://'"),
        ("ws://[::1/mcp", "'ws://[::1/mcp'"),
        (42, "42"),
    ],
)
def test_a_bad_websocket_url_is_refused_naming_where(url: Any, shown: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        mcp_servers([ws_server(url)], "mcp")
    assert str(caught.value) == f"mcp[0].transport.url must be a ws(s) URL, got {shown}"
