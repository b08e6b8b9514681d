"""MCP tools (issue 22 item 4): ``define_workflow(mcp=[...])`` connects MCP servers over
stdio, streamable HTTP or HTTP+SSE with the official ``mcp`` SDK, or over a WebSocket, and
offers their tools to models through upstream's two gateway tools, ``mcp_list_tools`` and
``mcp_call_tool``, with a guide skill per server.

* :mod:`~little_dist.mcp.config` reads the ``mcp`` option (upstream's ``HarnessMcpConfig``);
* :mod:`~little_dist.mcp.client` talks to one server (a session per operation);
* :mod:`~little_dist.mcp.websocket` is the WebSocket client transport the SDK 2.x lacks;
* :mod:`~little_dist.mcp.guides` makes the servers' guide skills;
* :mod:`~little_dist.mcp.gateway` builds the gateway tools and the session manifest's
  ``mcp`` entry (each server's tool list, hashed with the manifest).

MCP calls are tool calls: recorded as ``harness.tool_call.*``, replayed from the log by a
retried or resumed attempt, decided by the workflow's permission rules.
"""

from __future__ import annotations

from little_dist.mcp.client import McpServerError
from little_dist.mcp.config import CALL_TOOL_NAME, LIST_TOOL_NAME, McpServerConfig, mcp_servers
from little_dist.mcp.gateway import GatewayTool, McpGateway, gateway_tools, session_manifest

__all__ = [
    "CALL_TOOL_NAME",
    "LIST_TOOL_NAME",
    "GatewayTool",
    "McpGateway",
    "McpServerConfig",
    "McpServerError",
    "gateway_tools",
    "mcp_servers",
    "session_manifest",
]
