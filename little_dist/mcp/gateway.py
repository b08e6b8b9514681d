"""Upstream's MCP gateway: two tools through which a model reaches every configured server.

``mcp_list_tools`` (``{"server"?}``) lists the servers and their visible tools (name,
description, input schema and its hash); ``mcp_call_tool`` (``{"server", "tool", "args"?}``)
calls one, returning MCP's result (``content``, ``structuredContent``, ``isError``). They are
ordinary registered tools: a step is offered them like any tool (``with.tools``,
``permissions.tools``), a ``tool.call`` step may call ``mcp_call_tool``, every call goes
through :func:`~little_dist.harness.tool_calls.run_tool_call` — memoized, so a retried or
resumed attempt replays a recorded MCP call instead of calling the server again — and the
workflow's permission rules decide it (match MCP calls with argument globs:
``{"tool": "mcp_call_tool", "args": {"server": "crm", "tool": "delete_*"}, "action": "deny"}``).

:func:`session_manifest` lists every server's tools live when a session starts, in upstream's
``HarnessMcpCapabilityManifest`` shape, for the session manifest (and so its
``manifestHash``): a server whose tools changed between two attempts changes the hash.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError
from little_dist.mcp import client
from little_dist.mcp.config import (
    CALL_TOOL_NAME,
    LIST_TOOL_NAME,
    McpServerConfig,
    safe_tool_name,
)
from little_dist.mcp.guides import guide_files, guide_manifest, guide_skill
from little_dist.skills.descriptor import SkillDescriptor
from little_dist.tools import Tool

__all__ = ["GatewayTool", "McpGateway", "gateway_tools", "session_manifest"]

_LIST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"server": {"type": "string", "description": "Only this server's tools."}},
    "additionalProperties": False,
}
_CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "server": {"type": "string", "description": "The MCP server id."},
        "tool": {"type": "string", "description": "The tool's name on that server."},
        "args": {"type": "object", "description": "The tool's arguments."},
    },
    "required": ["server", "tool"],
    "additionalProperties": False,
}


class McpGateway:
    """The configured servers, and what the gateway tools do with them."""

    def __init__(self, servers: Sequence[McpServerConfig], *, timeout: float | None = None):
        self.servers: dict[str, McpServerConfig] = {server.id: server for server in servers}
        self.timeout = client.DEFAULT_TIMEOUT if timeout is None else timeout

    def _server(self, server_id: object) -> McpServerConfig:
        server = self.servers.get(server_id) if isinstance(server_id, str) else None
        if server is None:
            known = ", ".join(sorted(self.servers)) or "none"
            raise InvalidInputError(f"unknown MCP server {server_id!r} (servers: {known})")
        return server

    def tool_manifests(self, server: McpServerConfig) -> list[dict[str, Any]]:
        """The server's visible tools now, as upstream's ``HarnessMcpToolManifest``: under
        their visible names (``rename``), with the configured ``schemas`` in place of the
        server's. A visible name that is not a safe tool name, or two tools under one name,
        is the config's error (upstream's ``resolveServerTools``)."""
        entries: list[dict[str, Any]] = []
        seen: set[str] = set()
        for item in client.list_tools(server, timeout=self.timeout):
            if not server.visible(item.name):
                continue
            name = server.visible_name(item.name)
            if not safe_tool_name(name):
                raise InvalidInputError(
                    f"MCP server {server.id!r}: tool {name!r} is not a valid tool name "
                    "([A-Za-z_][A-Za-z0-9_-]{0,63}, not bash); rename it (tools.rename)"
                )
            if name in seen:
                raise InvalidInputError(
                    f"MCP server {server.id!r}: tools.rename makes two tools named {name!r}"
                )
            seen.add(name)
            entry: dict[str, Any] = {"name": name}
            if item.description is not None:
                entry["description"] = item.description
            configured = server.schemas.get(item.name)
            schemas = (
                (("input", item.input_schema), ("output", item.output_schema))
                if configured is None
                else (
                    ("input", configured["inputSchema"]),
                    ("output", configured.get("outputSchema")),
                )
            )
            for kind, schema in schemas:
                if schema is not None:
                    entry[f"{kind}SchemaHash"] = sha256_digest(schema)
            for kind, schema in schemas:
                if schema is not None:
                    entry[f"{kind}Schema"] = schema
            entries.append(entry)
        return entries

    def server_manifest(
        self, server: McpServerConfig, skills: list[SkillDescriptor] | None = None
    ) -> dict[str, Any]:
        """Upstream's ``HarnessMcpServerManifest`` (listed live); the server's guide skill,
        made from the same listing, is appended to ``skills``."""
        tools = self.tool_manifests(server)
        entry: dict[str, Any] = {
            "id": server.id,
            "description": server.description,
            "transport": server.transport.manifest(),
        }
        if server.guide is not None:
            files = guide_files(server.guide, server.id, server.description, tools)
            entry["guide"] = guide_manifest(server.guide, files)
            if skills is not None:
                skills.append(guide_skill(server.guide, files))
        entry["tools"] = tools
        return entry

    def capability_manifest(self, skills: list[SkillDescriptor] | None = None) -> dict[str, Any]:
        """Upstream's ``HarnessMcpCapabilityManifest``, listed live (the guide skills go to
        ``skills``)."""
        return {
            "gateway": {"listToolName": LIST_TOOL_NAME, "callToolName": CALL_TOOL_NAME},
            "servers": [self.server_manifest(item, skills) for item in self.servers.values()],
        }

    def list(self, server: str | None = None) -> dict[str, Any]:
        chosen = list(self.servers.values()) if server is None else [self._server(server)]
        listed = []
        for item in chosen:
            entry = self.server_manifest(item)
            del entry["transport"]
            listed.append(entry)
        return {"servers": listed}

    def call(self, server: str, tool: str, args: Any = None) -> dict[str, Any]:
        config = self._server(server)
        source = config.source_name(tool) if isinstance(tool, str) and tool else None
        if source is None:
            raise InvalidInputError(f"MCP server {server!r} has no visible tool {tool!r}")
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            raise InvalidInputError(f"mcp_call_tool: args must be an object, got {args!r}")
        return client.call_tool(config, source, args, timeout=self.timeout)

    def summary(self) -> str:
        return "; ".join(f"{item.id}: {item.description}" for item in self.servers.values())


class GatewayTool(Tool):
    """A gateway tool; ``mcp_gateway`` is what :func:`session_manifest` finds it by."""

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any],
        *,
        description: str,
        input_schema: Mapping[str, Any],
        gateway: McpGateway,
    ) -> None:
        super().__init__(name, fn, description=description, input_schema=input_schema)
        self.mcp_gateway = gateway


def gateway_tools(gateway: McpGateway) -> list[Tool]:
    """``mcp_list_tools`` and ``mcp_call_tool`` over ``gateway``. Their descriptions name
    the configured servers (fixed by the config: part of the workflow's definition hash);
    the servers' tool lists are read live (:func:`session_manifest`, ``mcp_list_tools``)."""
    servers = gateway.summary()
    return [
        GatewayTool(
            LIST_TOOL_NAME,
            gateway.list,
            description=f"List configured MCP servers and their visible tools. Servers: {servers}",
            input_schema=_LIST_SCHEMA,
            gateway=gateway,
        ),
        GatewayTool(
            CALL_TOOL_NAME,
            gateway.call,
            description=(
                "Call one configured MCP tool by server id and tool name, with its arguments "
                f"as args. Servers: {servers}"
            ),
            input_schema=_CALL_SCHEMA,
            gateway=gateway,
        ),
    ]


def session_manifest(
    tools: Mapping[str, Any],
) -> tuple[dict[str, Any] | None, tuple[SkillDescriptor, ...]]:
    """The ``mcp`` entry of a session manifest: the capability manifest of the gateway
    behind the session's gateway tools (listed live), or ``None`` when it has none; and
    the servers' guide skills, made from the same listing."""
    for item in tools.values():
        if isinstance(item, GatewayTool):
            skills: list[SkillDescriptor] = []
            manifest = item.mcp_gateway.capability_manifest(skills)
            return manifest, tuple(skills)
    return None, ()
