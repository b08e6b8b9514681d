"""A small MCP server for the tests (the official SDK's ``MCPServer``), no tests here.

``python -m tests.mcp_server COUNT_FILE [PORT [sse]]``: serves over stdio, or over streamable
HTTP on 127.0.0.1:PORT (HTTP+SSE with ``sse``). Every tool call appends its name and a
newline to COUNT_FILE, so a test counts the calls the server really served (across processes
and attempts).
"""

from __future__ import annotations

import sys
from pathlib import Path


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

    if len(sys.argv) > 3 and sys.argv[3] == "sse":
        app.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    elif len(sys.argv) > 2:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()


if __name__ == "__main__":
    main()
