"""code.run calls tools: ``little.callTool`` through the tool channel (caller "code").

First what a hostile program can do to the channel (huge, endless and malformed requests, a
program that never reads its answers), then the harness: events with ``caller: "code"``, a
tool the step was not given, the permission rules, and the memo on a retried attempt."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from little_dist import define_workflow, run_workflow, tool
from little_dist.event_types import parse_event
from little_dist.lwir.step_checks import code_file_digest
from little_dist.sandbox import SandboxLimits
from little_dist.sandbox.code_run import CodeRunError, run_code
from little_dist.world import LocalWorld
from tests import zygote

DENIED = {"network": "deny", "env": "deny", "fs": "deny"}


def code(source: str) -> dict[str, Any]:
    return {
        "entrypoint": "main.ts",
        "files": {"main.ts": {"content": source, "sha256": code_file_digest(source)}},
        "sandbox": DENIED,
    }


class Echo:
    """A tool handler recording what it was asked."""

    def __init__(self, result_bytes: int = 0) -> None:
        self.asked: list[tuple[int, str, Any]] = []
        self.padding = "x" * result_bytes

    def __call__(self, number: int, name: str, args: Any) -> dict[str, Any]:
        self.asked.append((number, name, args))
        if name == "fails":
            return {"ok": False, "error": {"message": "it failed", "causeCode": "tool_error"}}
        return {"ok": True, "result": {"args": args, "pad": self.padding}}


def test_a_program_calls_tools_and_catches_their_errors() -> None:
    program = (
        "const a = little.callTool('lookup', { q: 1 });\n"
        "let caught = null;\n"
        "try { little.callTool('fails', {}); }\n"
        "catch (e) {\n"
        "  caught = [e.name, e.message, e.causeCode, e instanceof little.ToolCallError];\n"
        "}\n"
        "console.log(JSON.stringify({ a: a.args, caught }));\n"
    )
    handler = Echo()
    result = run_code(code(program), {}, tools=handler)
    assert result.output == {
        "a": {"q": 1},
        "caught": ["ToolCallError", "it failed", "tool_error", True],
    }
    assert handler.asked == [(1, "lookup", {"q": 1}), (2, "fails", {})]


def test_without_tools_there_is_no_bridge() -> None:
    with pytest.raises(CodeRunError, match="little is not defined"):
        run_code(code("little.callTool('x', {})"), {})


# --- what a hostile program can do to the channel ---------------------------------------------


def test_a_huge_request_stops_the_program() -> None:
    program = "little.callTool('lookup', { big: 'x'.repeat(3 * 1024 * 1024) });"
    handler = Echo()
    started = time.monotonic()
    with pytest.raises(CodeRunError, match="a tool request is over 1048576 bytes"):
        run_code(code(program), {}, tools=handler, step_id="add")
    assert handler.asked == [] and time.monotonic() - started < 10


def test_endless_requests_stop_at_the_limit_even_when_the_program_catches_errors() -> None:
    program = "for (;;) { try { little.callTool('fails', {}); } catch (e) {} }"
    handler = Echo()
    with pytest.raises(CodeRunError) as caught:
        run_code(code(program), {}, tools=handler, step_id="add", max_tool_calls=7)
    assert str(caught.value) == (
        "code.run step 'add': more than 7 tool calls in one run of the program "
        "(causeCode max_tool_calls)"
    )
    assert [number for number, _, _ in handler.asked] == list(range(1, 8))


#: A program that finds its requests pipe itself (the one /dev/fd path it may write) and
#: writes ``FRAME`` on it raw. The pipes keep the host's descriptor numbers, which are high
#: in a test process that has opened many files: the search goes up to ``FD_SEARCH``.
FD_SEARCH = 4096
RAW = f"""
let pipe = null;
for (let fd = 3; fd < {FD_SEARCH} && pipe === null; fd++) {{
  try {{ pipe = Deno.openSync(`/dev/fd/${{fd}}`, {{ write: true }}); }} catch (e) {{}}
}}
pipe.writeSync(new TextEncoder().encode(FRAME));
Deno.stdin.readSync(new Uint8Array(1));
for (;;) {{}}
"""


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        ("not json\n", "not one JSON document"),
        ("[1, 2]\n", "not a JSON object"),
        ('{"args": {}}\n', "'tool' must be a tool's name"),
        ('{"tool": ""}\n', "'tool' must be a tool's name"),
        ('{"tool": 7}\n', "'tool' must be a tool's name"),
        (json.dumps({"tool": "t" * 300}) + "\n", "'tool' must be a tool's name"),
        ('{"tool": "lookup", "run": "rm -rf /"}\n', "unknown fields 'run'"),
        ("\xff\xfe\n", "not one JSON document"),
    ],
)
def test_a_malformed_request_stops_the_program(frame: str, why: str) -> None:
    program = "const FRAME = " + json.dumps(frame) + ";\n" + RAW
    handler = Echo()
    started = time.monotonic()
    with pytest.raises(CodeRunError) as caught:
        run_code(code(program), {}, tools=handler, step_id="add")
    assert str(caught.value).startswith("code.run step 'add': malformed tool request: ")
    assert why in str(caught.value)
    assert handler.asked == [] and time.monotonic() - started < 10


def test_the_program_may_open_no_other_descriptor() -> None:
    program = (
        "const opened = [];\n"
        f"for (let fd = 0; fd < {FD_SEARCH}; fd++) {{\n"
        "  for (const [kind, how] of [['r', { read: true }], ['w', { write: true }]]) {\n"
        "    try { Deno.openSync(`/dev/fd/${fd}`, how); opened.push([kind, fd]); } catch (e) {}\n"
        "  }\n"
        "}\n"
        "console.log(JSON.stringify(opened));\n"
    )
    opened = run_code(code(program), {}, tools=Echo()).output
    assert sorted(kind for kind, _ in opened) == ["r", "w"]  # its two pipes: no more


def test_a_program_that_never_reads_its_answers_does_not_hang_the_host() -> None:
    # Each answer is 200 KB: the answers pipe is full after the first, the host waits on it,
    # the program keeps writing requests until its own pipe is full: the wall clock ends it.
    program = "const FRAME = " + json.dumps('{"tool": "lookup"}\n') + ";\n"
    program += RAW.replace("pipe.writeSync", "for (;;) pipe.writeSync")
    handler = Echo(result_bytes=200_000)
    started = time.monotonic()
    # (5 s: on a loaded CI machine deno took more than 2 s to start and write its first request.)
    with pytest.raises(CodeRunError, match=r"stopped by the sandbox \(timeout\)"):
        run_code(code(program), {}, tools=handler, limits=SandboxLimits(wall_seconds=5))
    assert time.monotonic() - started < 15
    assert 1 <= len(handler.asked) < 100


def test_an_answer_over_the_cap_is_an_error_the_program_reads() -> None:
    program = (
        "let message = null;\n"
        "try { little.callTool('lookup', {}); } catch (e) { message = e.message; }\n"
        "console.log(JSON.stringify(message));\n"
    )
    handler = Echo(result_bytes=5 * 1024 * 1024)
    message = run_code(code(program), {}, tools=handler).output
    assert message == "the tool's result is over 4194304 bytes; ask for less"


# --- through the harness: events, permissions, memo -----------------------------------------

CALLS = (
    "const input = JSON.parse(await new Response(Deno.stdin.readable).text());\n"
    "const found = little.callTool('lookup', { key: input.key });\n"
    "let refused = null;\n"
    "try { little.callTool(input.other, { key: 'x' }); }\n"
    "catch (e) { refused = e.causeCode; }\n"
    "console.log(JSON.stringify({ found, refused }));\n"
)


def tools_plan(source: str, tools: list[str], retries: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "code.tools"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "object"}},
        "permissions": {"models": [], "tools": tools, "secrets": [], "network": []},
        "steps": [
            {
                "id": "look",
                "uses": "code.run",
                "input": "{{ input }}",
                "with": code(source),
                "retry": {"maxAttempts": retries},
                "output": {"mode": "object", "schema": {"type": "object"}},
            }
        ],
    }


def tool_events(events: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (e.type, e.payload)
        for e in events
        if e.type.startswith(("harness.tool_call.", "harness.permission.", "little.harness.tool"))
    ]


def test_a_code_run_step_calls_its_tools_recorded_with_caller_code(tmp_path: Any) -> None:
    seen: list[str] = []

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        seen.append(key)
        return f"value of {key}"

    @tool
    def secret(key: str) -> str:
        """Not offered to the step."""
        seen.append("secret!")
        return "leaked"

    workflow = define_workflow(
        id="code.tools",
        input={"type": "object"},
        output={"type": "object"},
        model="scripted/none",
        tools=[lookup, secret],
        plan=tools_plan(CALLS, ["lookup"]),
    )
    world = LocalWorld(tmp_path)
    result = run_workflow(workflow, {"key": "k1", "other": "secret"}, world=world)
    assert result.output == {"found": "value of k1", "refused": "runtime_config_error"}
    assert seen == ["k1"]
    events = world.list_events(result.run_id)
    for event in events:
        parse_event(event.model_dump(by_alias=True))
    recorded = tool_events(events)
    assert [(kind, p["caller"], p["toolName"]) for kind, p in recorded] == [
        ("harness.tool_call.started", "code", "lookup"),
        ("harness.tool_call.succeeded", "code", "lookup"),
        ("harness.tool_call.started", "code", "secret"),
        ("harness.tool_call.failed", "code", "secret"),
    ]
    assert [p["callIndex"] for _, p in recorded] == [1, 1, 2, 2]
    assert all("turn" not in p for _, p in recorded)
    assert recorded[1][1]["result"] == "value of k1"
    assert "is not available to step look" in recorded[3][1]["error"]["message"]
    # little events --caller code shows them, --caller model none.
    listed = zygote.run(
        ["events", result.run_id, "--data-dir", str(tmp_path), "--caller", "code", "--json"],
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    shown = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(e["type"], e["payload"]["toolName"]) for e in shown] == [
        (kind, p["toolName"]) for kind, p in recorded
    ]
    by_model = zygote.run(
        ["events", result.run_id, "--data-dir", str(tmp_path), "--caller", "model"], timeout=60
    )
    assert by_model.returncode == 0 and by_model.stdout == ""


def test_the_permission_rules_decide_a_programs_calls(tmp_path: Any) -> None:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    @tool
    def remove(key: str) -> str:
        """Remove a key."""
        raise AssertionError("a denied tool was called")

    workflow = define_workflow(
        id="code.tools",
        input={"type": "object"},
        output={"type": "object"},
        model="scripted/none",
        tools=[lookup, remove],
        permissions=[{"tool": "remove", "action": "deny"}],
        plan=tools_plan(CALLS, ["lookup", "remove"]),
    )
    world = LocalWorld(tmp_path)
    result = run_workflow(workflow, {"key": "k1", "other": "remove"}, world=world)
    assert result.output == {"found": "value of k1", "refused": "permission_denied"}
    decided = [
        p
        for kind, p in tool_events(world.list_events(result.run_id))
        if kind == "harness.permission.decided"
    ]
    assert [(p["toolName"], p["caller"], p["decision"]) for p in decided] == [
        ("lookup", "code", "allow"),
        ("remove", "code", "deny"),
    ]
    assert all("turn" not in p for p in decided)


def test_a_retried_attempt_replays_the_calls_that_succeeded(tmp_path: Any) -> None:
    counts = {"lookup": 0, "flaky": 0}

    @tool
    def lookup(key: str) -> str:
        """Look a key up (a side effect: counted)."""
        counts["lookup"] += 1
        return f"value of {key}"

    @tool
    def flaky(key: str) -> str:
        """Fails the first time."""
        counts["flaky"] += 1
        if counts["flaky"] == 1:
            raise RuntimeError("try again")
        return "ok"

    program = (
        "const a = little.callTool('lookup', { key: 'k' });\n"
        "const b = little.callTool('flaky', { key: 'k' });\n"  # throws in the first attempt
        "console.log(JSON.stringify({ a, b }));\n"
    )
    workflow = define_workflow(
        id="code.tools",
        input={"type": "object"},
        output={"type": "object"},
        model="scripted/none",
        tools=[lookup, flaky],
        plan=tools_plan(program, ["lookup", "flaky"], retries=2),
    )
    world = LocalWorld(tmp_path)
    result = run_workflow(workflow, {}, world=world)
    assert result.output == {"a": "value of k", "b": "ok"}
    assert counts == {"lookup": 1, "flaky": 2}
    events = world.list_events(result.run_id)
    memoized = [e for e in events if e.type == "little.harness.tool_call.memoized"]
    assert [(e.payload["toolName"], e.payload["attempt"]) for e in memoized] == [("lookup", 2)]
    failed = [e for e in events if e.type == "StepFailed"]
    assert len(failed) == 1 and "try again" in failed[0].payload["error"]["message"]


def test_a_program_calls_a_workflow_as_a_tool_and_reads_a_failed_child_as_an_error(
    tmp_path: Any,
) -> None:
    from little_dist.subruns import SUB_RUN_STARTED, as_tool

    @tool
    def halve(n: int) -> int:
        """Halve an even number."""
        if n % 2:
            raise ValueError(f"{n} is odd")
        return n // 2

    number = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    child = define_workflow(
        id="math.halve",
        input=number,
        output={"type": "integer"},
        model="scripted/none",
        tools=[halve],
        plan={
            "apiVersion": "littleworkflow.dev/v0.1",
            "kind": "Workflow",
            "metadata": {"name": "math.halve"},
            "input": {"schema": number},
            "output": {"schema": {"type": "integer"}},
            "permissions": {"models": [], "tools": ["halve"]},
            "steps": [
                {
                    "id": "halve",
                    "uses": "tool.call",
                    "input": {"n": "{{ input.n }}"},
                    "with": {"tool": "halve"},
                    "output": {"mode": "json"},
                }
            ],
        },
    )
    program = (
        "const ok = little.callTool('math.halve', { n: 8 });\n"
        "let failed = null;\n"
        "try { little.callTool('math.halve', { n: 7 }); }\n"
        "catch (e) { failed = [e.causeCode, e.message.includes('7 is odd')]; }\n"
        "console.log(JSON.stringify({ status: ok.status, output: ok.output, failed }));\n"
    )
    workflow = define_workflow(
        id="code.tools",
        input={"type": "object"},
        output={"type": "object"},
        model="scripted/none",
        tools=[as_tool(child)],
        plan=tools_plan(program, ["math.halve"]),
    )
    world = LocalWorld(tmp_path)
    result = run_workflow(workflow, {}, world=world)
    assert result.output == {
        "status": "completed",
        "output": 4,
        "failed": ["workflow_failed", True],
    }
    events = world.list_events(result.run_id)
    assert len([e for e in events if e.type == SUB_RUN_STARTED]) == 2
    (failed,) = [e for e in events if e.type == "harness.tool_call.failed"]
    assert failed.payload["caller"] == "code"
    assert failed.payload["error"]["name"] == "SubRunFailedError"
