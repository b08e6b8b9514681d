"""App module for the MCP fleet test: a workflow whose model reaches the test MCP server
(tests/mcp_server.py, over stdio) through the gateway, with permission rules; no tests here.

``LITTLE_TEST_MCP_CALLS`` names the file the server appends its served calls to (the worker
process and the server it starts inherit it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from little_dist import define_workflow, model

__all__ = ["CALLS_ENV", "build_script", "mcp_sum"]

CALLS_ENV = "LITTLE_TEST_MCP_CALLS"
_SERVER = str(Path(__file__).with_name("mcp_server.py"))
_GATEWAY = ["mcp_list_tools", "mcp_call_tool"]

mcp_sum = define_workflow(
    id="fleet.mcp-sum",
    description="A model that adds with an MCP server's tool.",
    input={"type": "object"},
    output={"type": "string"},
    model=model("scripted/fleet", id="default", description="Scripted model."),
    plan={
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "fleet.mcp-sum", "version": "1.0.0"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": ["default"], "tools": _GATEWAY, "secrets": [], "network": []},
        "steps": [
            {
                "id": "sum",
                "uses": "ai.generate",
                "with": {"model": "default", "prompt": "Add 2 and 3.", "tools": _GATEWAY},
                "output": {"mode": "text"},
            }
        ],
    },
    mcp=[
        {
            "id": "calc",
            "description": "A calculator.",
            "transport": {
                "type": "stdio",
                "command": sys.executable,
                "args": [_SERVER, os.environ.get(CALLS_ENV, os.devnull)],
            },
        }
    ],
    # No approver runs on a fleet worker: this 'ask' waits for a person, and nobody decides
    # within its timeout, so it is denied (onTimeout's default).
    permissions=[
        {"tool": "mcp_call_tool", "args": {"tool": "delete_*"}, "action": "ask", "timeout": "1s"}
    ],
)


def build_script() -> Any:
    from little_dist.testing import ScriptedModel, ToolCall

    script = ScriptedModel()
    script.on(step="sum").call_tools(
        [
            ToolCall(
                "mcp_call_tool",
                {"server": "calc", "tool": "delete_account", "args": {"account_id": "A1"}},
            ),
            ToolCall("mcp_call_tool", {"server": "calc", "tool": "add", "args": {"a": 2, "b": 3}}),
        ]
    ).then_reply_text("5")
    return script
