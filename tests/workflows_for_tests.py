"""Tools and LWIR documents the runtime, runner and CLI tests share (built with
:mod:`tests.lwir_builder`).

Loaded by ``little run ... --app tests.workflows_for_tests`` in subprocess tests (run from
the repository root), so everything here is importable without pytest.

``record_branch`` is the side-effect probe: each real call appends one line
``<key>`` to the file named by ``$LITTLE_TEST_SIDE_EFFECTS`` (when set) before sleeping, so
a test counts real calls per branch — a memoized replay appends nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any

from little_dist.tools import ToolRegistry, tool

# (API_VERSION and tool_step re-exported: tests import them from here too.)
from tests.lwir_builder import API_VERSION as API_VERSION
from tests.lwir_builder import fan_in_schema, workflow_doc
from tests.lwir_builder import tool_step as tool_step

SIDE_EFFECTS_ENV = "LITTLE_TEST_SIDE_EFFECTS"


@tool
def record_branch(key: str, sleep: float = 0.0) -> dict[str, Any]:
    """Append the key to the side-effect file, then sleep."""
    path = os.environ.get(SIDE_EFFECTS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    if sleep:
        time.sleep(sleep)
    return {"key": key, "pid": os.getpid()}


@tool
def noop(n: int = 0) -> dict[str, Any]:
    """Do nothing."""
    return {"n": n}


@tool
def add(a: int, b: int) -> dict[str, Any]:
    """Add two numbers."""
    return {"sum": a + b}


@tool
def big_text(size: int) -> str:
    """A string of ``size`` characters."""
    return "x" * size


@tool
def explode(message: str = "boom") -> dict[str, Any]:
    """Always raise."""
    raise RuntimeError(message)


tools = ToolRegistry([record_branch, noop, add, big_text, explode])
models = {"model.fast": "scripted/fast"}


#: The fan-in envelope array a parallel step's array output must describe.
FAN_IN_SCHEMA: dict[str, Any] = fan_in_schema()


#: The tools this module registers: what its documents permit.
APP_TOOLS = ["record_branch", "noop", "add", "big_text", "explode"]


def single_tool_lwir(tool_name: str = "add", args: Any = None, **extra: Any) -> dict[str, Any]:
    """One ``tool.call`` step ``only``; its output is the workflow's output."""
    step = tool_step("only", tool_name, {"a": 1, "b": 2} if args is None else args, **extra)
    output_schema = {"type": "string"} if step["output"]["mode"] == "text" else {"type": "object"}
    return workflow_doc("tests.single", [step], output_schema=output_schema, tools=APP_TOOLS)


def chain_lwir(length: int) -> dict[str, Any]:
    """``length`` no-op tool steps, each needing the previous one."""
    steps = []
    for index in range(length):
        extra: dict[str, Any] = {"needs": [f"s{index - 1}"]} if index else {}
        steps.append(tool_step(f"s{index}", "noop", {"n": index}, **extra))
    return workflow_doc("tests.chain", steps, tools=APP_TOOLS)


def fan_out_lwir(
    *,
    tool_name: str = "record_branch",
    max_branches: int = 20,
    max_concurrency: int = 2,
    failure_mode: str = "fail_fast",
) -> dict[str, Any]:
    """One parallel step ``fan`` over ``input.keys``; each branch calls ``tool_name``."""
    args = (
        {"key": "{{ item }}", "sleep": "{{ input.sleep }}"}
        if tool_name == "record_branch"
        else {"n": 1}
    )
    return workflow_doc(
        "tests.fan-out",
        [
            {
                "id": "fan",
                "uses": "parallel",
                "with": {
                    "items": "{{ input.keys }}",
                    "itemKey": "{{ item }}",
                    "cardinality": {"kind": "matches_items"},
                    "maxBranches": max_branches,
                    "maxConcurrency": max_concurrency,
                    "failureMode": failure_mode,
                    "fanIn": {"order": "input", "output": "array"},
                },
                "output": {"mode": "array", "schema": FAN_IN_SCHEMA},
                "steps": [tool_step("work", tool_name, args)],
            }
        ],
        input_schema={
            "type": "object",
            "required": ["keys", "sleep"],
            "properties": {
                "keys": {"type": "array", "items": {"type": "string"}},
                "sleep": {"type": "number"},
            },
        },
        output_schema={"type": "array"},
        tools=APP_TOOLS,
    )


KILL_WORKFLOW = fan_out_lwir(max_concurrency=3)
