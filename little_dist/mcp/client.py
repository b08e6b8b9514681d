"""Talking to one MCP server with the official ``mcp`` SDK, from synchronous code.

Each operation opens a session (spawn the stdio process, or open the streamable-HTTP,
HTTP+SSE or WebSocket session), initializes it, does one thing and closes it, inside its
own event loop (``anyio.run``): tools run on worker threads with no loop of their own, and
a session held across calls would have to outlive the thread and the attempt. The cost is
one connection (for stdio, one process) per listing and per call.

Errors are translated here: anything the SDK or the transport raises becomes
:class:`McpServerError` (retriable: the server may be back on the next attempt), raised
``from`` the original.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from little_dist.errors import LittleError
from little_dist.mcp.config import McpServerConfig

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["DEFAULT_TIMEOUT", "McpServerError", "call_tool", "list_tools"]

#: Seconds one listing or call may take, connection included.
DEFAULT_TIMEOUT = 60.0

_T = TypeVar("_T")
#: The fields of MCP's ``CallToolResult`` a caller sees (the SDK adds its own).
_RESULT_FIELDS = ("content", "structuredContent", "isError")


class McpServerError(LittleError):
    """An MCP server could not be reached, or failed a request."""

    retryable = True


@asynccontextmanager
async def _session(server: McpServerConfig) -> AsyncIterator[ClientSession]:
    from mcp import ClientSession

    transport = server.transport
    if transport.type == "stdio":
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert transport.command is not None
        params = StdioServerParameters(
            command=transport.command,
            args=list(transport.args),
            env=dict(transport.env) or None,
            cwd=transport.cwd,
        )
        errlog = _errlog()
        async with (
            stdio_client(params, errlog=errlog) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            yield session
        return
    assert transport.url is not None
    if transport.type == "sse":
        from mcp.client.sse import sse_client

        async with (
            sse_client(transport.url, headers=dict(transport.headers)) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            yield session
        return
    if transport.type == "websocket":
        from little_dist.mcp.websocket import websocket_client

        async with (
            websocket_client(transport.url, transport.headers) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await session.initialize()
            yield session
        return
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(
            headers=dict(transport.headers), timeout=httpx2.Timeout(30.0, read=300.0)
        ) as http,
        streamable_http_client(transport.url, http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: ours, or the process's real one when ours is
    not a file (a test's captured stream)."""
    if _has_fileno(sys.stderr) or sys.__stderr__ is None:
        return sys.stderr
    return sys.__stderr__


def _has_fileno(stream: object) -> bool:
    try:
        return isinstance(stream.fileno(), int)  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False


def _run(
    server: McpServerConfig,
    what: str,
    work: Callable[[ClientSession], Awaitable[_T]],
    timeout: float,
) -> _T:
    import anyio

    async def main() -> _T:
        with anyio.fail_after(timeout):
            async with _session(server) as session:
                return await work(session)

    try:
        return anyio.run(main)
    except McpServerError:
        raise
    except TimeoutError as error:
        raise McpServerError(
            f"MCP server {server.id!r}: {what} took longer than {timeout:g} s"
        ) from error
    except BaseException as error:  # an ExceptionGroup from the SDK's task groups, too
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        raise McpServerError(f"MCP server {server.id!r}: {what} failed: {_reason(error)}") from (
            error
        )


def _reason(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}" if text != type(error).__name__ else text


def list_tools(server: McpServerConfig, *, timeout: float = DEFAULT_TIMEOUT) -> list[Any]:
    """The server's tools (``mcp`` ``Tool`` models), every page, in the server's order."""

    async def work(session: ClientSession) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        while True:
            if cursor is None:
                page = await session.list_tools()
            else:
                from mcp.types import PaginatedRequestParams

                page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools

    return _run(server, "listing tools", work, timeout)


def call_tool(
    server: McpServerConfig,
    tool: str,
    args: Mapping[str, Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict[str, Any]:
    """Call ``tool`` with ``args``; the result in MCP's JSON shape (``content``,
    ``structuredContent``, ``isError``), as upstream's gateway returns it."""

    async def work(session: ClientSession) -> dict[str, Any]:
        result = await session.call_tool(tool, dict(args))
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {key: dumped[key] for key in _RESULT_FIELDS if key in dumped}

    return _run(server, f"calling tool {tool!r}", work, timeout)
