"""The ``mcp`` option read into typed server configs (upstream's ``HarnessMcpConfig``).

Upstream's shape, field for field: ``{"servers": [{"id", "description", "transport",
"tools"?}]}`` or just the list of servers; a transport is ``{"type": "stdio", "command",
"args"?, "cwd"?, "env"?}``, ``{"type": "http", "url", "headers"?}`` (streamable HTTP) or
``{"type": "sse", "url", "headers"?}`` (the older HTTP+SSE transport).
``{"type": "websocket", "url", "headers"?}`` is ours (upstream's transports are the three
others): a WebSocket with the ``mcp`` subprotocol, as the SDK 1.x's ``websocket_client``.
``tools`` is upstream's ``HarnessMcpToolPolicy``: ``include`` / ``exclude`` (source names),
``rename`` (source name -> the name models see and call) and ``schemas`` (source name ->
``{"inputSchema", "outputSchema"?}`` shown instead of the server's; its keys must be exactly
``include``), validated as upstream's ``validateToolPolicy`` does. Upstream's ``guide``
skills, gateway name overrides and aliases are not supported: a config naming them is
refused, never half-read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from little_dist.errors import InvalidInputError

__all__ = [
    "CALL_TOOL_NAME",
    "LIST_TOOL_NAME",
    "McpServerConfig",
    "McpTransport",
    "mcp_servers",
]

#: Upstream's default gateway tool names.
LIST_TOOL_NAME = "mcp_list_tools"
CALL_TOOL_NAME = "mcp_call_tool"

_SERVER_ID = re.compile(r"^[A-Za-z0-9_-]+$")
#: Upstream's ``SAFE_NAME`` and reserved names, for a tool name a model sees.
_SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
_RESERVED_NAMES = frozenset({"bash", "__proto__", "constructor", "prototype"})


def safe_tool_name(name: object) -> bool:
    """Whether ``name`` may be a visible MCP tool name (upstream's ``assertSafeToolName``)."""
    return (
        isinstance(name, str) and bool(_SAFE_NAME.fullmatch(name)) and (name not in _RESERVED_NAMES)
    )


@dataclass(frozen=True)
class McpTransport:
    """How to reach one server: a process over stdio, streamable HTTP at ``url``, HTTP+SSE
    at ``url`` (its event-stream endpoint), or a WebSocket at ``url`` (``ws(s)://``)."""

    type: Literal["stdio", "http", "sse", "websocket"]
    command: str | None = None
    args: tuple[str, ...] = ()
    cwd: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        """Upstream's ``HarnessMcpTransportManifest``: no env, no headers, no URL secrets."""
        if self.type == "stdio":
            data: dict[str, Any] = {"type": "stdio", "command": self.command}
            if self.args:
                data["args"] = list(self.args)
            if self.cwd is not None:
                data["cwd"] = self.cwd
            return data
        assert self.url is not None
        parts = urlsplit(self.url)
        host = parts.netloc.rpartition("@")[2]
        return {"type": self.type, "url": urlunsplit((parts.scheme, host, parts.path, "", ""))}


@dataclass(frozen=True)
class McpGuide:
    """A server's guide skill (:mod:`little_dist.mcp.guides`): its name and description, the
    configured ``body`` (None for a default guide) and bundled ``files`` (normalized relative
    path -> bytes)."""

    name: str
    description: str
    body: str | None = None
    files: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class McpServerConfig:
    """One MCP server: its id (what ``mcp_call_tool`` names), description, transport, and
    which of its tools are visible (``include``: only these; ``exclude``: not these; by
    their source names), under which names (``rename``) and with which schemas (``schemas``,
    by source name)."""

    id: str
    description: str
    transport: McpTransport
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    guide: McpGuide | None = None

    def visible(self, tool_name: str) -> bool:
        """Whether the server's tool ``tool_name`` (its source name) is offered."""
        if self.include is not None and tool_name not in self.include:
            return False
        return tool_name not in self.exclude

    def visible_name(self, source_name: str) -> str:
        """The name models see for the server's tool ``source_name``."""
        return self.rename.get(source_name, source_name)

    def source_name(self, visible_name: str) -> str | None:
        """The server's name for the visible tool ``visible_name``; None when no visible tool
        has that name (a renamed tool is called by its new name only)."""
        for source, target in self.rename.items():
            if target == visible_name:
                return source if self.visible(source) else None
        if visible_name in self.rename or not self.visible(visible_name):
            return None
        return visible_name


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidInputError(f"{where} must be a list of strings, got {value!r}")
    items = tuple(value)
    if not all(isinstance(item, str) for item in items):
        raise InvalidInputError(f"{where} must be a list of strings, got {value!r}")
    return items


def _string_map(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidInputError(f"{where} must map strings to strings")
    return dict(value)


def _known(value: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = set(value) - allowed
    if extra:
        raise InvalidInputError(f"{where}: unsupported field(s) {sorted(extra)}")


def _transport(value: Any, where: str) -> McpTransport:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where} must be an object, got {value!r}")
    kind = value.get("type")
    if kind == "stdio":
        _known(value, {"type", "command", "args", "cwd", "env"}, where)
        command = value.get("command")
        if not isinstance(command, str) or not command:
            raise InvalidInputError(f"{where}.command must be a non-empty string")
        cwd = value.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise InvalidInputError(f"{where}.cwd must be a string")
        return McpTransport(
            "stdio",
            command=command,
            args=_strings(value.get("args", ()), f"{where}.args"),
            cwd=cwd,
            env=_string_map(value.get("env", {}), f"{where}.env"),
        )
    if kind in ("http", "sse", "websocket"):
        _known(value, {"type", "url", "headers"}, where)
        url = value.get("url")
        schemes = ("ws", "wss") if kind == "websocket" else ("http", "https")
        scheme, host = _scheme_and_host(url) if isinstance(url, str) else (None, None)
        if scheme not in schemes or not host:
            label = "a ws(s)" if kind == "websocket" else "an http(s)"
            raise InvalidInputError(f"{where}.url must be {label} URL, got {url!r}")
        headers = _string_map(value.get("headers", {}), f"{where}.headers")
        return McpTransport(kind, url=url, headers=headers)
    raise InvalidInputError(
        f"{where}.type must be 'stdio', 'http', 'sse' or 'websocket', got {kind!r}"
    )


def _scheme_and_host(url: str) -> tuple[str | None, str | None]:
    """A URL's scheme and host, ``None`` for a URL that does not even parse."""
    try:
        parts = urlsplit(url)
        return parts.scheme, parts.hostname
    except ValueError:
        return None, None


def _server(value: Any, where: str) -> McpServerConfig:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where} must be an object, got {value!r}")
    _known(value, {"id", "description", "transport", "tools", "guide"}, where)
    server_id = value.get("id")
    if not isinstance(server_id, str) or not _SERVER_ID.fullmatch(server_id):
        raise InvalidInputError(f"{where}.id must match [A-Za-z0-9_-]+, got {server_id!r}")
    description = value.get("description")
    if not isinstance(description, str) or not description.strip():
        raise InvalidInputError(f"{where}.description is required (server {server_id!r})")
    policy = value.get("tools", {})
    if not isinstance(policy, Mapping):
        raise InvalidInputError(f"{where}.tools must be an object")
    _known(policy, {"include", "exclude", "rename", "schemas"}, f"{where}.tools")
    include = policy.get("include")
    config = McpServerConfig(
        id=server_id,
        description=description,
        transport=_transport(value.get("transport"), f"{where}.transport"),
        include=None if include is None else _strings(include, f"{where}.tools.include"),
        exclude=_strings(policy.get("exclude", ()), f"{where}.tools.exclude"),
        rename=_rename(policy.get("rename", {}), f"{where}.tools.rename"),
        schemas=_schemas(policy.get("schemas"), f"{where}.tools.schemas"),
        guide=_guide(value, server_id, description, f"{where}.guide"),
    )
    _check_policy(config, policy, f"{where}.tools")
    return config


def _guide(
    server: Mapping[str, Any], server_id: str, description: str, where: str
) -> McpGuide | None:
    """Upstream's ``guide``: absent, a default guide; ``false``, none; else ``{"name"?,
    "description", "body", "files"?}``."""
    if "guide" not in server:
        return McpGuide(f"{server_id}-mcp", f"Use when the task needs {description}")
    value = server["guide"]
    if value is False:
        return None
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where} must be false or an object, got {value!r}")
    _known(value, {"name", "description", "body", "files"}, where)
    name = value.get("name", f"{server_id}-mcp")
    if not safe_tool_name(name):
        raise InvalidInputError(
            f"{where}.name {name!r} is not a valid guide name ([A-Za-z_][A-Za-z0-9_-]{{0,63}})"
        )
    for key in ("description", "body"):
        if not isinstance(value.get(key), str):
            raise InvalidInputError(f"{where}.{key} is required (a string)")
    files = value.get("files", {})
    if not isinstance(files, Mapping):
        raise InvalidInputError(f"{where}.files must map paths to text or bytes")
    bundled: dict[str, bytes] = {}
    for path, content in files.items():
        if not isinstance(content, str | bytes):
            raise InvalidInputError(f"{where}.files[{path!r}] must be text or bytes")
        normalized = _guide_path(path, f"{where}.files")
        if normalized in bundled:
            raise InvalidInputError(
                f"{where}.files: {path!r} is {normalized!r} again (paths must be unique)"
            )
        bundled[normalized] = content.encode("utf-8") if isinstance(content, str) else content
    return McpGuide(name, value["description"], value["body"], tuple(sorted(bundled.items())))


def _guide_path(path: Any, where: str) -> str:
    """Upstream's ``normalizeGuideFilePath``: relative, no ``..``, no NUL; ``.`` and empty
    segments dropped; never ``SKILL.md`` (the generated one)."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\0" in path:
        raise InvalidInputError(f"{where}: {path!r} is not a valid guide file path")
    segments = [segment for segment in path.split("/") if segment not in ("", ".")]
    if ".." in segments:
        raise InvalidInputError(f"{where}: {path!r} leaves the guide's folder")
    if not segments:
        raise InvalidInputError(f"{where}: {path!r} is not a valid guide file path")
    normalized = "/".join(segments)
    if normalized == "SKILL.md":
        raise InvalidInputError(f"{where}: {path!r} would replace the generated SKILL.md")
    return normalized


def _rename(value: Any, where: str) -> dict[str, str]:
    rename = _string_map(value, where)
    targets: dict[str, str] = {}
    for source, target in rename.items():
        if not safe_tool_name(target):
            raise InvalidInputError(
                f"{where}: {target!r} (for {source!r}) is not a valid tool name "
                "([A-Za-z_][A-Za-z0-9_-]{0,63}, not bash)"
            )
        if target in targets:
            raise InvalidInputError(
                f"{where}: {targets[target]!r} and {source!r} are both renamed to {target!r}"
            )
        targets[target] = source
    return rename


def _schemas(value: Any, where: str) -> dict[str, dict[str, Any]]:
    """Upstream's ``HarnessMcpToolSchemas``: per tool, a JSON schema (object or boolean) for
    its input, and optionally for its output."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where} must be an object, got {value!r}")
    schemas: dict[str, dict[str, Any]] = {}
    for name, schema in value.items():
        if not isinstance(schema, Mapping):
            raise InvalidInputError(f"{where}[{name!r}] must be an object, got {schema!r}")
        _known(schema, {"inputSchema", "outputSchema"}, f"{where}[{name!r}]")
        if "inputSchema" not in schema:
            raise InvalidInputError(f"{where}[{name!r}] requires an inputSchema")
        entry: dict[str, Any] = {}
        for key in ("inputSchema", "outputSchema"):
            if key in schema:
                entry[key] = _json_schema(schema[key], f"{where}[{name!r}].{key}")
        schemas[str(name)] = entry
    return schemas


def _json_schema(value: Any, where: str) -> Any:
    """A JSON schema root (an object or a boolean) of plain JSON values, as a plain copy."""
    import json

    if not isinstance(value, bool | Mapping):
        raise InvalidInputError(f"{where} must be a JSON schema (an object or a boolean)")
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise InvalidInputError(f"{where} must hold only JSON values: {error}") from None


def _check_policy(config: McpServerConfig, policy: Mapping[str, Any], where: str) -> None:
    """Upstream's ``validateToolPolicy``: no empty names; ``schemas`` names exactly the
    ``include`` list (each once)."""
    names = [*(config.include or ()), *config.exclude, *config.rename, *config.schemas]
    if any(not name for name in names):
        raise InvalidInputError(f"{where}: MCP tool policy names cannot be empty")
    if "schemas" not in policy:
        return
    include = config.include
    if include is None or len(set(include)) != len(include) or set(include) != set(config.schemas):
        raise InvalidInputError(
            f"{where}: MCP tool schemas must exactly match included tool names "
            f"(include: {None if include is None else list(include)}, "
            f"schemas: {list(config.schemas)})"
        )


def mcp_servers(value: Any, where: str) -> tuple[McpServerConfig, ...]:
    """The servers of an ``mcp`` option (a list of servers, or ``{"servers": [...]}``)."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        _known(value, {"servers"}, where)
        value = value.get("servers", ())
        where = f"{where}.servers"
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidInputError(f"{where} must be a list of MCP servers, got {value!r}")
    servers = tuple(_server(item, f"{where}[{index}]") for index, item in enumerate(value))
    seen: set[str] = set()
    guides: set[str] = set()
    for server in servers:
        if server.id in seen:
            raise InvalidInputError(f"{where}: MCP server ids must be unique ({server.id!r})")
        seen.add(server.id)
        if server.guide is not None:
            if server.guide.name in guides:
                raise InvalidInputError(
                    f"{where}: MCP guide names must be unique ({server.guide.name!r})"
                )
            guides.add(server.guide.name)
    return servers
