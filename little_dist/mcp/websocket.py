"""MCP over a WebSocket: the client transport the official SDK dropped in 2.x.

The SDK's 1.x line had ``mcp.client.websocket.websocket_client`` (subprotocol ``mcp``, one
JSON-RPC message per text frame); 2.x ships no WebSocket transport at all, client or server.
:func:`websocket_client` is that transport again, over the ``websockets`` library, with the
same interface as the SDK's other transports: an async context manager yielding the
``(read_stream, write_stream)`` pair :class:`mcp.ClientSession` takes.

What a server may do to us is bounded: a frame larger than ``max_message_bytes`` closes the
connection (close code 1009) rather than being buffered, a frame that is not a JSON-RPC
message ends the session with a clear error, and a server that closes the connection ends
it too — a pending request fails at once instead of waiting for its timeout.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

__all__ = ["MAX_MESSAGE_BYTES", "WebSocketTransportError", "websocket_client"]

#: The largest frame accepted from a server (a tool's result travels in one frame).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class WebSocketTransportError(ConnectionError):
    """The server sent something that is not MCP, or went away mid-session."""


@asynccontextmanager
async def websocket_client(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    max_message_bytes: int | None = None,
    open_timeout: float = 30.0,
) -> AsyncIterator[tuple[Any, Any]]:
    """Connect to the MCP server at ``url`` (``ws://`` or ``wss://``) and yield its streams.

    Messages sent on the write stream go out one per text frame; ``max_message_bytes``
    defaults to :data:`MAX_MESSAGE_BYTES` (read at each connection)."""
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed
    from websockets.typing import Subprotocol

    if max_message_bytes is None:
        max_message_bytes = MAX_MESSAGE_BYTES
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async with connect(
        url,
        subprotocols=[Subprotocol("mcp")],
        additional_headers=dict(headers or {}),
        max_size=max_message_bytes,
        open_timeout=open_timeout,
        # One session per operation: no keep-alive pings to wait on at close.
        ping_interval=None,
    ) as socket:

        async def reader() -> None:
            try:
                async for frame in socket:
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(frame, by_name=False)
                    except ValueError as error:
                        raise WebSocketTransportError(
                            f"the server sent a frame that is not a JSON-RPC message: {error}"
                        ) from error
                    await read_writer.send(SessionMessage(message))
            except ConnectionClosed as error:
                raise WebSocketTransportError(_closed(error, max_message_bytes)) from error
            reason = socket.close_reason or "no reason given"
            raise WebSocketTransportError(
                f"the server closed the connection ({socket.close_code}: {reason})"
            )

        async def writer() -> None:
            async with write_reader:
                async for session_message in write_reader:
                    message = session_message.message
                    data = message.model_dump_json(by_alias=True, exclude_unset=True)
                    try:
                        await socket.send(data)
                    except ConnectionClosed as error:
                        raise WebSocketTransportError(_closed(error, max_message_bytes)) from error

        # A task's error cancels the session using the streams and leaves this block (the
        # caller sees it); a normal exit cancels the tasks before the socket closes.
        async with read_writer, read_stream, write_stream, anyio.create_task_group() as group:
            group.start_soon(reader)
            group.start_soon(writer)
            yield read_stream, write_stream
            group.cancel_scope.cancel()


def _closed(error: BaseException, max_message_bytes: int) -> str:
    """Why a connection closed, in words: a frame over the bound says so."""
    from websockets.exceptions import ConnectionClosed
    from websockets.frames import CloseCode

    if isinstance(error, ConnectionClosed):
        frame = error.sent if error.sent is not None else error.rcvd
        if frame is not None and frame.code == CloseCode.MESSAGE_TOO_BIG:
            return (
                f"the server sent a frame over the {max_message_bytes}-byte limit; "
                "the connection was closed"
            )
        if frame is not None:
            return f"the connection closed ({frame.code}: {frame.reason or 'no reason given'})"
        return "the connection closed without a close frame"
    return str(error)
