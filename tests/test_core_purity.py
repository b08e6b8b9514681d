"""The pure core imports no IO-bound dependency: no litellm, celery, boto3, redis or sqlite3."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE_MODULES = [
    "little_dist.canonical",
    "little_dist.ids",
    "little_dist.expressions",
    "little_dist.lwir",
    "little_dist.compiler",
    "little_dist.events",
    "little_dist.event_types",
    "little_dist.run_state",
    "little_dist.scheduling",
    "little_dist.step_context",
    "little_dist.pricing",
    "little_dist.limits",
    "little_dist.lru",
    "little_dist.permissions",
    "little_dist.mcp.config",
    "little_dist.outer_loop.manifest",
    "little_dist.outer_loop.decisions",
]
FORBIDDEN = {
    *("litellm", "celery", "kombu", "boto3", "botocore", "redis", "sqlite3", "_sqlite3"),
    *("mcp", "httpx2", "anyio"),  # the MCP SDK and its transport
}


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_module_imports_nothing_io_bound(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]", f"{module} pulls in {result.stdout.strip()}"
