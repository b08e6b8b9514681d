"""Upstream's MCP tool policy beyond include / exclude: ``rename`` and configured ``schemas``
(``HarnessMcpToolPolicy``), against a real server (tests/mcp_server.py over stdio). The
cases are upstream's (little-harness ``mcp.test.ts``), where Python has them: renamed names
in manifests, listings and calls; unsafe or colliding visible names refused; schema maps
that must match ``include`` exactly; configured schemas shown instead of the server's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from little_dist import run_workflow
from little_dist.canonical import sha256_digest
from little_dist.errors import InvalidInputError
from little_dist.mcp import McpGateway, mcp_servers
from little_dist.testing import ScriptedModel
from little_dist.world.local import LocalWorld
from tests.harness_helpers import of_type
from tests.mcp_server import calls
from tests.test_mcp import SERVER_SCRIPT, mcp_workflow

QUERY_INPUT = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
ROWS_OUTPUT = {"type": "object", "properties": {"rows": {"type": "array"}}, "required": ["rows"]}


def server(count: Path, dotted: bool = False, **tools: Any) -> dict[str, Any]:
    transport: dict[str, Any] = {
        "type": "stdio",
        "command": sys.executable,
        "args": [SERVER_SCRIPT, str(count)],
    }
    if dotted:
        transport["env"] = {"LITTLE_TEST_MCP_DOTTED": "1"}
    config: dict[str, Any] = {"id": "calc", "description": "A calculator.", "transport": transport}
    if tools:
        config["tools"] = tools
    return config


def gateway(config: dict[str, Any]) -> McpGateway:
    return McpGateway(mcp_servers([config], "mcp"), timeout=30)


def names(listing: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in listing["servers"][0]["tools"]]


def test_renamed_tools_are_listed_and_called_by_their_new_names(tmp_path: Path) -> None:
    count = tmp_path / "calls"
    mcp = gateway(server(count, rename={"add": "plus"}))
    assert names(mcp.list()) == ["plus", "delete_account"]
    assert [tool["name"] for tool in mcp.capability_manifest()["servers"][0]["tools"]] == [
        "plus",
        "delete_account",
    ]
    assert mcp.call("calc", "plus", {"a": 2, "b": 3})["structuredContent"] == {"result": 5}
    assert calls(count) == ["add"]  # the server's own name
    with pytest.raises(InvalidInputError, match="MCP server 'calc' has no visible tool 'add'"):
        mcp.call("calc", "add", {"a": 2, "b": 3})
    assert calls(count) == ["add"]


def test_a_session_offers_and_calls_the_renamed_tool(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    count = tmp_path / "calls"
    scripted_model.on(step="sum").call_tool(
        "mcp_call_tool", {"server": "calc", "tool": "plus", "args": {"a": 2, "b": 3}}
    ).then_reply_text("5")
    world = LocalWorld(tmp_path / "data")
    workflow = mcp_workflow([server(count, rename={"add": "plus"})])
    result = run_workflow(workflow, {}, world=world)
    assert result.output == "5" and calls(count) == ["add"]
    session = of_type(world.list_events(result.run_id), "harness.session.started")[0].payload
    tools = session["manifest"]["mcp"]["servers"][0]["tools"]
    assert [tool["name"] for tool in tools] == ["plus", "delete_account"]
    seen = json.loads(scripted_model.calls[1].tool_results[-1]["content"])
    assert seen["structuredContent"] == {"result": 5}


def test_a_server_tool_name_models_cannot_call_must_be_renamed(tmp_path: Path) -> None:
    count = tmp_path / "calls"
    with pytest.raises(InvalidInputError, match=r"tool 'legacy\.sum' is not a valid tool name"):
        gateway(server(count, dotted=True)).list()
    mcp = gateway(server(count, dotted=True, rename={"legacy.sum": "legacy_sum"}))
    assert names(mcp.list()) == ["add", "delete_account", "legacy_sum"]
    assert mcp.call("calc", "legacy_sum", {"a": 1, "b": 1})["structuredContent"] == {"result": 2}
    assert calls(count) == ["legacy.sum"]


def test_a_rename_onto_another_tool_is_refused(tmp_path: Path) -> None:
    mcp = gateway(server(tmp_path / "calls", rename={"delete_account": "add"}))
    with pytest.raises(InvalidInputError, match=r"tools\.rename makes two tools named 'add'"):
        mcp.list()


def test_configured_schemas_replace_the_servers_in_listings_and_manifests(
    tmp_path: Path,
) -> None:
    count = tmp_path / "calls"
    configured = {"add": {"inputSchema": QUERY_INPUT, "outputSchema": ROWS_OUTPUT}}
    mcp = gateway(server(count, include=["add"], schemas=configured))
    (listed,) = mcp.list()["servers"][0]["tools"]
    assert listed["inputSchema"] == QUERY_INPUT
    assert listed["inputSchemaHash"] == sha256_digest(QUERY_INPUT)
    assert listed["outputSchema"] == ROWS_OUTPUT
    assert listed["outputSchemaHash"] == sha256_digest(ROWS_OUTPUT)
    (manifest,) = mcp.capability_manifest()["servers"][0]["tools"]
    assert manifest == listed
    # Key order does not change a schema's hash (canonical JSON).
    reordered = {"add": {"inputSchema": dict(reversed(list(QUERY_INPUT.items())))}}
    other = gateway(server(count, include=["add"], schemas=reordered))
    assert other.list()["servers"][0]["tools"][0]["inputSchemaHash"] == sha256_digest(QUERY_INPUT)
    # The call still goes to the server as it is.
    assert mcp.call("calc", "add", {"a": 2, "b": 3})["structuredContent"] == {"result": 5}


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (
            {"include": ["add", "delete_account"], "schemas": {"add": {"inputSchema": {}}}},
            r"MCP tool schemas must exactly match included tool names \(include: "
            r"\['add', 'delete_account'\], schemas: \['add'\]\)",
        ),
        (
            {"schemas": {"add": {"inputSchema": {}}}},
            r"MCP tool schemas must exactly match included tool names \(include: None",
        ),
        (
            {"include": ["add", "add"], "schemas": {"add": {"inputSchema": {}}}},
            "MCP tool schemas must exactly match included tool names",
        ),
        (
            {"include": ["add"], "schemas": {"add": {"outputSchema": {}}}},
            r"mcp\[0\]\.tools\.schemas\['add'\] requires an inputSchema",
        ),
        (
            {"include": ["add"], "schemas": {"add": {"inputSchema": "object"}}},
            r"schemas\['add'\]\.inputSchema must be a JSON schema \(an object or a boolean\)",
        ),
        (
            {"include": ["add"], "schemas": {"add": {"inputSchema": {"x": float("nan")}}}},
            r"schemas\['add'\]\.inputSchema must hold only JSON values",
        ),
        ({"rename": {"add": "bad.name"}}, r"'bad\.name' \(for 'add'\) is not a valid tool name"),
        ({"rename": {"add": "constructor"}}, "'constructor' .* is not a valid tool name"),
        ({"rename": {"add": "__proto__"}}, "'__proto__' .* is not a valid tool name"),
        ({"rename": {"add": "bash"}}, "'bash' .* is not a valid tool name"),
        ({"rename": {"add": "x", "delete_account": "x"}}, "both renamed to 'x'"),
        ({"rename": {"": "x"}}, "MCP tool policy names cannot be empty"),
        ({"include": [""]}, "MCP tool policy names cannot be empty"),
        ({"rename": ["add"]}, r"mcp\[0\]\.tools\.rename must map strings to strings"),
        ({"aliases": True}, r"mcp\[0\]\.tools: unsupported field\(s\) \['aliases'\]"),
    ],
)
def test_a_bad_tool_policy_is_refused_naming_where(tools: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        mcp_servers([server(Path("calls"), **tools)], "mcp")
