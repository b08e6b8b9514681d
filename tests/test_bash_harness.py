"""The bash tool offered to a harness role's model: recorded, replayed on resume, its bad
input shown to the model, a host without a sandbox a clear step failure (in process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_dist import define_workflow, model
from little_dist.authoring.errors import RunFailedError
from little_dist.event_types import parse_event
from little_dist.events import Event
from little_dist.harness import EventRecorder, HarnessRegistry, ModelCallError
from little_dist.harness.bash_tool import BashTool
from little_dist.runtime import CapabilityError
from little_dist.sandbox import bash as bash_module
from little_dist.sandbox.bash import BashState
from little_dist.sandbox.bash_capabilities import BashCapabilities
from little_dist.sandbox.process import run_sandboxed
from little_dist.testing import ScriptedModel, ToolCall
from little_dist.world.local import LocalWorld
from tests.bash_fleet_app import shell_plan
from tests.harness_helpers import RUN, ai_step, execute, make_ctx, of_type
from tests.sandbox_helpers import refusing_bwrap

FIRST = "mkdir -p work && cd work && export GREETING=hello && echo one > a.txt && pwd"
SECOND = "echo $GREETING; cat a.txt; pwd"


def bash_plan(step: dict[str, Any] | None = None) -> dict[str, Any]:
    return shell_plan("bash.demo", step)


def bash_workflow(**kwargs: Any) -> Any:
    options: dict[str, Any] = {"bash": {}, "plan": bash_plan(), "output": {"type": "string"}}
    options.update(kwargs)
    return define_workflow(
        id="bash.demo",
        input={"type": "object"},
        model=model("scripted/bash", id="default"),
        **options,
    )


def of(events: list[Event], kind: str) -> list[Event]:
    return [event for event in events if event.type == kind]


def test_a_model_runs_two_commands_that_share_a_shell_and_sees_their_output(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="shell").call_tool("bash", {"cmd": FIRST}, id="b1").then_call_tool(
        "bash", {"cmd": SECOND}, id="b2"
    ).then_reply_text("done")
    world = LocalWorld(tmp_path / "data")
    result = bash_workflow().run({}, world=world)
    assert result.status == "completed" and result.output == "done"
    # The model saw each command's output, the second run where the first left off.
    seen = [json.loads(call.tool_results[-1]["content"]) for call in scripted_model.calls[1:]]
    assert seen[0] == {"stdout": "/mnt/scratch/own/work\n", "stderr": "", "exitCode": 0}
    assert seen[1]["stdout"] == "hello\none\n/mnt/scratch/own/work\n"
    assert "sandbox" not in seen[1]  # the state is recorded, not shown
    assert [tool["function"]["name"] for tool in scripted_model.calls[0].tools] == ["bash"]

    events = world.list_events(result.run_id)
    for event in events:
        parse_event(event.model_dump(by_alias=True))  # every event in upstream's shapes
    started = of(events, "harness.runtime.command.started")
    ended = of(events, "harness.runtime.command.succeeded")
    assert [e.payload["command"] for e in started] == [FIRST, SECOND]
    assert [e.payload["cwd"] for e in started] == ["/mnt/scratch/own", "/mnt/scratch/own/work"]
    assert [e.occurrence_id for e in ended] == ["command-end:shell:1:1", "command-end:shell:1:2"]
    assert ended[1].payload["exitCode"] == 0 and ended[1].payload["stopped"] is None
    assert ended[1].payload["isolation"] == "namespaces"
    assert ended[1].payload["stdout"]["preview"] == seen[1]["stdout"]
    calls = of(events, "harness.tool_call.succeeded")
    assert [e.payload["toolName"] for e in calls] == ["bash", "bash"]
    assert calls[1].payload["result"] == seen[1]
    sandbox = calls[0].payload["sandbox"]
    assert sandbox["isolation"] == "namespaces" and sandbox["stopped"] is None
    state = BashState.from_json(sandbox["state"])
    assert state.cwd == "/mnt/scratch/own/work" and "GREETING" in state.exports
    # Each command sits between its call's start and its result.
    order = [e.type for e in events if e.type.startswith(("harness.tool_call", "harness.runtime"))]
    assert order[:4] == [
        "harness.tool_call.started",
        "harness.runtime.command.started",
        "harness.runtime.command.succeeded",
        "harness.tool_call.succeeded",
    ]


def test_a_stopped_command_and_a_failing_one_are_recorded_as_such(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    scripted_model.on(step="shell").call_tool(
        "bash", {"cmd": "sleep 5", "timeoutMs": 300}
    ).then_call_tool("bash", {"cmd": "exit 3"}).then_reply_text("ok")
    world = LocalWorld(tmp_path / "data")
    result = bash_workflow().run({}, world=world)
    assert result.status == "completed"
    events = world.list_events(result.run_id)
    failed = of(events, "harness.runtime.command.failed")
    assert [e.payload["exitCode"] for e in failed] == [124, 3]
    assert [e.payload["stopped"] for e in failed] == ["timeout", None]
    assert failed[0].payload["timeoutMs"] == 300
    # A non-zero exit is a result the model reads, not a failed call (and it is memoized).
    calls = of(events, "harness.tool_call.succeeded")
    assert [c.payload["sandbox"]["stopped"] for c in calls] == ["timeout", None]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"cmd": "ls", "shell": "zsh"}, "Additional properties are not allowed ('shell'"),
        ({"cmd": "ls", "cwd": "/etc"}, "cwd must be inside a writable mount"),
        ({"cmd": "ls", "cwd": "../../.."}, "cwd must be inside a writable mount"),
        ({"cmd": "ls", "cwd": "/mnt/scratch/own/../../../etc"}, "must be inside a writable"),
        ({"cmd": "ls", "cwd": "a\0b"}, "cwd must not contain NUL bytes"),
        ({"cmd": "ls", "cwd": "d/" * 2100}, "cwd is too long"),
        ({"cmd": "ls", "cwd": "n" * 256}, "cwd is too long"),
        ({"cmd": ""}, "non-empty cmd string"),
    ],
)
def test_bad_input_is_a_tool_error_the_model_sees(
    tmp_path: Path, scripted_model: ScriptedModel, args: dict[str, Any], message: str
) -> None:
    scripted_model.on(step="shell").call_tool("bash", args).then_reply_text("gave up")
    world = LocalWorld(tmp_path / "data")
    result = bash_workflow().run({}, world=world)
    assert result.status == "completed" and result.output == "gave up"
    shown = json.loads(scripted_model.calls[1].tool_results[-1]["content"])
    assert message in shown["error"]
    events = world.list_events(result.run_id)
    assert len(of(events, "harness.tool_call.failed")) == 1
    assert not of(events, "harness.runtime.command.started")  # nothing ran


def test_without_define_workflow_bash_no_model_is_offered_it(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    step = {
        "id": "shell",
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": "Answer."},
        "output": {"mode": "text"},
    }
    scripted_model.on(step="shell").reply_text("plain")
    off = bash_workflow(bash=None, plan=bash_plan(step))
    assert off.run({}, world=LocalWorld(tmp_path / "off")).output == "plain"
    assert scripted_model.calls[0].tools == []
    assert off.definition_hash() == bash_workflow(plan=bash_plan(step)).definition_hash()
    # Enabled, a text step without a tools list is offered bash (upstream's rule), beside
    # the tools permissions.tools allows (none here) ...
    scripted_model.on(step="shell").reply_text("plain")
    bash_workflow(plan=bash_plan(step)).run({}, world=LocalWorld(tmp_path / "on"))
    assert [t["function"]["name"] for t in scripted_model.calls[1].tools] == ["bash"]
    # ... but a structured step is offered no tool at all (upstream's rule).
    structured = {**step, "output": {"mode": "object", "schema": {"type": "object"}}}
    plan = {**bash_plan(structured), "output": {"schema": {"type": "object"}}}
    scripted_model.on(step="shell").reply_json({"a": 1})
    wf = bash_workflow(plan=plan, output={"type": "object"})
    assert wf.run({}, world=LocalWorld(tmp_path / "structured")).output == {"a": 1}
    assert scripted_model.calls[2].tools == []
    # ... and a document naming bash for a workflow that does not enable it is refused.
    refused = bash_workflow(bash=None)
    with pytest.raises(CapabilityError, match="offers its model tool 'bash', which workflow"):
        refused.run({}, world=LocalWorld(tmp_path / "refused"))


def test_a_retried_attempt_replays_the_recorded_command_and_takes_up_its_state(
    tmp_path: Path, scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What really ran in the sandbox: every command the session handed to it, in order (a
    # writable probe folder would be a writable mount the host does not list, and refuses).
    ran: list[str] = []

    def counted(argv: Any, **options: Any) -> Any:
        ran.append(argv[-2])  # the session's script is bash -c SCRIPT bash CWD CMD STATE_FD
        return run_sandboxed(argv, **options)

    monkeypatch.setattr(bash_module, "run_sandboxed", counted)
    first = "mkdir -p w && cd w && export COLOR=blue"
    scripted_model.on(step="shell").call_tools(
        [ToolCall("bash", {"cmd": first}, id="b1")]
    ).then_raise_error("server").then_call_tool(
        "bash", {"cmd": "pwd; echo $COLOR"}, id="b2"
    ).then_reply_text("done")
    world = LocalWorld(tmp_path / "data")
    step = ai_step("shell", prompt="Use bash.")
    registry = HarnessRegistry()

    def attempt(number: int) -> Any:
        recorder = EventRecorder(world, RUN, "shell", number)
        probed = BashTool(BashCapabilities(), recorder)
        ctx = make_ctx(world, step_path="shell", attempt=number, tools=[probed])
        try:
            return registry.run_step(execute(step, "go"), ctx)
        finally:
            probed.close()

    with pytest.raises(ModelCallError):  # attempt 1 dies after its command was recorded
        attempt(1)
    assert ran == [first]
    result = attempt(2)
    assert result.output == "done"
    assert ran == [first, "pwd; echo $COLOR"]  # the first not run again
    shown = json.loads(scripted_model.calls[-1].tool_results[-1]["content"])
    assert shown["stdout"] == "/mnt/scratch/own/w\nblue\n"  # the state was taken up
    events = world.list_events(RUN)
    assert [e.occurrence_id for e in of_type(events, "little.harness.tool_call.memoized")] == [
        "tool-end:shell:2:1"
    ]
    started = of_type(events, "harness.runtime.command.started")
    assert [e.occurrence_id for e in started] == ["command:shell:1:1", "command:shell:2:2"]


def test_a_host_without_a_sandbox_fails_the_step_with_a_readable_cause(
    tmp_path: Path, scripted_model: ScriptedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITTLE_SANDBOX_BWRAP", str(refusing_bwrap(tmp_path)))
    scripted_model.on(step="shell").call_tool("bash", {"cmd": "echo hi"}).then_reply_text("no")
    world = LocalWorld(tmp_path / "data")
    with pytest.raises(RunFailedError) as caught:
        bash_workflow().run({}, world=world)
    assert caught.value.cause_code == "runtime_config_error"
    assert caught.value.failed_step_path == "shell"
    assert "the sandbox cannot isolate commands here" in str(caught.value)
    events = world.list_events(caught.value.run_id)
    (failed,) = of(events, "StepFailed")
    error = failed.payload["error"]
    assert error["causeCode"] == "runtime_config_error" and error["retriable"] is False
    assert error["name"] == "SandboxUnavailableError"
    assert "No permissions to create new namespace" in error["message"]
    assert "LITTLE_SANDBOX_ISOLATION=rlimits" in error["message"]
    assert "Traceback" not in error["message"]
    assert len(scripted_model.calls) == 1  # the model was not asked to work around it
    assert of(events, "harness.runtime.error")[0].payload["error"]["name"] == (
        "SandboxUnavailableError"
    )


def test_a_run_whose_attempt_died_after_a_command_resumes_without_running_it_again(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    first = "mkdir -p w && cd w && export COLOR=blue"
    scripted_model.on(step="shell").call_tool("bash", {"cmd": first}).then_raise_error(
        "server"
    ).then_call_tool("bash", {"cmd": "pwd; echo $COLOR"}).then_reply_text("done")
    step = {
        "id": "shell",
        "uses": "ai.generate",
        "with": {"model": "default", "prompt": "Use bash.", "tools": ["bash"]},
        "output": {"mode": "text"},
        "retry": {"maxAttempts": 2},
    }
    world = LocalWorld(tmp_path / "data")
    result = bash_workflow(plan=bash_plan(step)).run({}, world=world)
    assert result.status == "completed" and result.output == "done"
    events = world.list_events(result.run_id)
    assert [e.payload["attempt"] for e in of(events, "StepFailed")] == [1]
    started = of(events, "harness.runtime.command.started")
    assert [(e.payload["command"], e.payload["attempt"]) for e in started] == [
        (first, 1),
        ("pwd; echo $COLOR", 2),
    ]
    (reused,) = of(events, "little.harness.tool_call.memoized")
    assert reused.payload["attempt"] == 2
    shown = json.loads(scripted_model.calls[-1].tool_results[-1]["content"])
    assert shown["stdout"] == "/mnt/scratch/own/w\nblue\n"


def test_the_fixer_model_may_try_its_fix_with_bash(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    from little_dist.harness import FixStepResult, FixStepTask

    fixed = {"fixedSource": "export default () => 42", "output": {"value": 42}}
    scripted_model.on(step="compute").call_tool(
        "bash", {"cmd": "echo 'print(6*7)' > t.py && python3 t.py"}
    ).then_reply_json(fixed)
    step = {
        "id": "compute",
        "uses": "code.run",
        "with": {},
        "onFailure": {"fixer": {"model": "model.fast", "maxAttempts": 2}},
        "output": {"mode": "object", "schema": {"type": "object"}},
    }
    world = LocalWorld(tmp_path / "data")
    recorder = EventRecorder(world, RUN, "compute", 1)
    bash = BashTool(BashCapabilities(), recorder)
    ctx = make_ctx(world, step_path="compute", role="fixer", tools=[bash])
    task = FixStepTask(step, {}, {"name": "Error", "message": "compute failed"}, 0)
    try:
        result = HarnessRegistry().run(task, ctx)
    finally:
        bash.close()
    assert isinstance(result, FixStepResult) and result.output == {"value": 42}
    shown = json.loads(scripted_model.calls[1].tool_results[-1]["content"])
    assert shown == {"stdout": "42\n", "stderr": "", "exitCode": 0}
    assert of_type(world.list_events(RUN), "harness.runtime.command.succeeded")


def test_with_network_granted_each_request_the_proxy_saw_is_recorded(
    tmp_path: Path, scripted_model: ScriptedModel
) -> None:
    cmd = "curl -sS --max-time 10 http://example.com/page; echo"
    scripted_model.on(step="shell").call_tool("bash", {"cmd": cmd}).then_reply_text("ok")
    world = LocalWorld(tmp_path / "data")
    network = {"allow": ["https://api.example.org/"], "methods": ["GET"]}
    result = bash_workflow(bash={"network": network}).run({}, world=world)
    assert result.status == "completed"
    events = world.list_events(result.run_id)
    (ended,) = [
        e
        for e in events
        if e.type.startswith("harness.runtime.command.") and "stopped" in e.payload
    ]
    (decision,) = ended.payload["egress"]
    assert decision["target"] == "http://example.com/page" and decision["allowed"] is False
    (call,) = of(events, "harness.tool_call.succeeded")
    assert call.payload["sandbox"]["egress"] == ended.payload["egress"]
