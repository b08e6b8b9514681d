"""A small MCP server for the tests (the official SDK's ``MCPServer``), no tests here.

``python -m tests.mcp_server COUNT_FILE [PORT [sse|websocket|ws-close|ws-garbage]]``: serves
over stdio, or over streamable HTTP on 127.0.0.1:PORT (HTTP+SSE with ``sse``; a WebSocket,
subprotocol ``mcp``, with ``websocket``, which adds a ``blob`` tool returning SIZE bytes).
``ws-close`` accepts WebSocket connections and closes each at once; ``ws-garbage`` answers
the first frame with one that is not JSON-RPC. With LITTLE_TEST_MCP_DOTTED set, a tool
named ``legacy.sum`` too (not a valid name for a model's tool). Every tool call appends its
name and a newline to COUNT_FILE, so a test counts the calls the server really served
(across processes and attempts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def calls(count_file: Path) -> list[str]:
    """The tool calls the server served, in order."""
    return count_file.read_text().split() if count_file.exists() else []


def main() -> None:
    from mcp.server.mcpserver import MCPServer

    count_file = Path(sys.argv[1])
    app = MCPServer("little-test")

    def served(name: str) -> None:
        with count_file.open("a") as out:
            out.write(name + "\n")

    @app.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        served("add")
        return a + b

    @app.tool()
    def delete_account(account_id: str) -> str:
        """Delete an account (a side effect no test should let through)."""
        served("delete_account")
        return f"deleted {account_id}"

    if os.environ.get("LITTLE_TEST_MCP_DOTTED"):

        @app.tool(name="legacy.sum")
        def legacy_sum(a: int, b: int) -> int:
            """Add two numbers (a name with a dot, as some servers have)."""
            served("legacy.sum")
            return a + b

    mode = sys.argv[3] if len(sys.argv) > 3 else None
    if mode is not None and (mode == "websocket" or mode.startswith("ws-")):

        @app.tool()
        def blob(size: int) -> str:
            """A string of SIZE letters (a large result)."""
            served("blob")
            return "x" * size

        import anyio

        anyio.run(serve_websocket, app, int(sys.argv[2]), mode)
    elif mode == "sse":
        app.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    elif len(sys.argv) > 2:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()


async def serve_websocket(app: Any, port: int, mode: str) -> None:
    """The SDK's server session over a WebSocket (the SDK 2.x has no WebSocket server)."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.typing import Subprotocol

    lowlevel = app._lowlevel_server

    async def connection(socket: ServerConnection) -> None:
        if socket.subprotocol != "mcp":
            await socket.close(1002, "the mcp subprotocol is required")
            return
        if mode == "ws-close":
            await socket.close(1011, "going away")
            return
        if mode == "ws-garbage":
            await socket.recv()
            await socket.send("this is not JSON-RPC")
            await socket.wait_closed()
            return
        read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
        write_stream, write_reader = anyio.create_memory_object_stream[Any](0)

        async def reader() -> None:
            async with read_writer:
                async for frame in socket:
                    message = types.jsonrpc_message_adapter.validate_json(frame, by_name=False)
                    await read_writer.send(SessionMessage(message))

        async def writer() -> None:
            async with write_reader:
                async for item in write_reader:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await socket.send(data)

        async with anyio.create_task_group() as group:
            group.start_soon(reader)
            group.start_soon(writer)
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()

    async with serve(
        connection,
        "127.0.0.1",
        port,
        subprotocols=[Subprotocol("mcp")],
        max_size=None,
        ping_interval=None,
    ) as server:
        await server.serve_forever()


if __name__ == "__main__":
    main()
