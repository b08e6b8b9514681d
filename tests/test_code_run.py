"""code.run: pinned TypeScript run by Deno in the kernel sandbox (little_dist.sandbox.code_run),
and through the default harness and a whole run."""

from __future__ import annotations

import time
from typing import Any

import pytest

from little_dist import define_workflow, model, run_workflow
from little_dist.authoring.errors import RunFailedError
from little_dist.errors import InvalidInputError
from little_dist.event_types import parse_event
from little_dist.lwir.step_checks import code_file_digest
from little_dist.sandbox import SandboxLimits
from little_dist.sandbox.code_run import CodeRunError, run_code
from little_dist.testing import ScriptedModel
from little_dist.world import LocalWorld

SUM = (
    "const input = JSON.parse(await new Response(Deno.stdin.readable).text());\n"
    "console.error('adding', input.a, input.b);\n"
    "console.log(JSON.stringify({ sum: input.a + input.b }));\n"
)
DENIED = {"network": "deny", "env": "deny", "fs": "deny"}


def code(source: str, **more: str) -> dict[str, Any]:
    files = {
        name: {"content": text, "sha256": code_file_digest(text)} for name, text in more.items()
    }
    files["main.ts"] = {"content": source, "sha256": code_file_digest(source)}
    return {"entrypoint": "main.ts", "files": files, "sandbox": DENIED}


def test_the_program_reads_the_input_on_stdin_and_prints_the_output() -> None:
    result = run_code(code(SUM), {"a": 2, "b": 40})
    assert result.output == {"sum": 42}
    assert result.run.isolation == "namespaces" and "adding 2 40" in result.run.stderr


def test_local_imports_among_the_pinned_files_work() -> None:
    lib = "export const double = (n: number): number => n * 2;\n"
    main = "import { double } from './lib/math.ts';\nconsole.log(JSON.stringify(double(21)));\n"
    assert run_code(code(main, **{"lib/math.ts": lib}), {}).output == 42


@pytest.mark.parametrize(
    ("source", "refused"),
    [
        ("console.log(JSON.stringify(Deno.env.get('HOME')))", "Requires env access"),
        ("await fetch('https://example.com')", "Requires net access"),
        ("console.log(await Deno.readTextFile('/etc/passwd'))", "Requires read access"),
        ("await Deno.writeTextFile('x.txt', 'x')", "Requires write access"),
        ("new Deno.Command('sh').outputSync()", "Requires run access"),
    ],
)
def test_every_deno_permission_is_denied(source: str, refused: str) -> None:
    with pytest.raises(CodeRunError, match=refused):
        run_code(code(source), {})


def test_a_pin_that_does_not_match_runs_nothing() -> None:
    config = code("console.log('1')")
    config["files"]["main.ts"]["content"] = "console.log('2')"
    with pytest.raises(InvalidInputError, match="does not match its pinned sha256"):
        run_code(config, {})


@pytest.mark.parametrize("name", ["../main.ts", "/abs.ts", "a/../../b.ts", "a\\b.ts"])
def test_unsafe_file_paths_are_refused(name: str) -> None:
    config = code("console.log('1')", **{name: "x"})
    with pytest.raises(InvalidInputError, match="not a safe relative path"):
        run_code(config, {})


def test_failures_say_what_a_fixer_needs() -> None:
    with pytest.raises(CodeRunError, match=r"exited with code 1; stderr: .*Error: boom"):
        run_code(code("throw new Error('boom')"), {})
    with pytest.raises(CodeRunError, match="one JSON document on stdout; it printed 'hello'"):
        run_code(code("console.log('hello')"), {})


def test_the_sandbox_stops_a_program_that_runs_forever_or_eats_memory() -> None:
    started = time.monotonic()
    with pytest.raises(CodeRunError, match=r"stopped by the sandbox \(timeout\)"):
        run_code(code("while (true) {}"), {}, limits=SandboxLimits(wall_seconds=1.5))
    assert time.monotonic() - started < 10
    hog = "const a = []; while (true) a.push(new Array(1e6).fill(1));"
    with pytest.raises(CodeRunError) as caught:
        run_code(code(hog), {}, limits=SandboxLimits(memory_bytes=128 * 1024 * 1024))
    assert caught.value.result is not None and caught.value.result.exit_code != 0


def sum_plan(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "littleworkflow.dev/v0.1",
        "kind": "Workflow",
        "metadata": {"name": "code.sum"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "object"}},
        "permissions": {"models": [], "tools": [], "secrets": [], "network": []},
        "steps": [
            {
                "id": "add",
                "uses": "code.run",
                "input": {"a": "{{ input.a }}", "b": "{{ input.b }}"},
                "with": config,
                "output": {
                    "mode": "object",
                    "schema": {
                        "type": "object",
                        "required": ["sum"],
                        "properties": {"sum": {"type": "number"}},
                    },
                },
            }
        ],
    }


def test_a_workflow_with_a_code_run_step_runs_end_to_end(tmp_path: Any) -> None:
    workflow = sum_workflow(SUM)
    result = run_workflow(workflow, {"a": 5, "b": 6}, world=LocalWorld(tmp_path))
    assert result.output == {"sum": 11}


def test_a_scripted_fixer_repairs_a_failing_program_on_its_second_attempt(
    tmp_path: Any, scripted_model: ScriptedModel
) -> None:
    # The fixer's claimed outputs are wrong on purpose: the repaired program's output counts.
    (
        scripted_model.on(step="add")
        .reply_json({"fixedSource": "console.log('not json')", "output": {"sum": 0}})
        .reply_json({"fixedSource": SUM, "output": {"sum": -1}})
    )
    plan = sum_plan(code("throw new Error('off by one')"))
    plan["permissions"]["models"] = ["model.fixer"]
    plan["steps"][0]["onFailure"] = {
        "fixer": {"model": "model.fixer", "maxAttempts": 2, "system": "Fix the program."}
    }
    workflow = define_workflow(
        id="code.sum",
        input={"type": "object"},
        output={"type": "object"},
        model=model("scripted/fixer", id="model.fixer"),
        plan=plan,
    )
    world = LocalWorld(tmp_path)
    result = run_workflow(workflow, {"a": 5, "b": 6}, world=world)
    assert result.output == {"sum": 11}
    events = world.list_events(result.run_id)
    fixer_sessions = [
        e for e in events if e.type == "harness.session.started" and e.payload["role"] == "fixer"
    ]
    assert len(fixer_sessions) == 1  # one fix_step attempt, two tries inside it
    (failed,) = [e.payload["error"]["message"] for e in events if e.type == "StepFailed"]
    assert "off by one" in failed
    completed = [e for e in events if e.type == "harness.session.completed"][-1]
    assert completed.payload["output"]["result"]["fixedSource"] == SUM
    assert completed.payload["output"]["result"]["attempts"] == 2
    second_try = scripted_model.calls[1].last_user_text
    assert "The repaired program failed" in second_try and "one JSON document" in second_try
    # Every run is in the log: the pinned program's, then each repair's.
    runs = [(kind, oid) for kind, oid, _ in command_events(events) if kind != "started"]
    assert runs == [
        ("failed", "code-run-end:add:1:1"),
        ("failed", "code-run-end:add:2:1"),
        ("succeeded", "code-run-end:add:2:2"),
    ]


def sum_workflow(source: str) -> Any:
    """A workflow of one ``code.run`` step, ``add``, running ``source``."""
    return define_workflow(
        id="code.sum",
        input={"type": "object"},
        output={"type": "object"},
        model="scripted/none",
        plan=sum_plan(code(source)),
    )


def command_events(events: list[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (e.type.rsplit(".", 1)[1], e.occurrence_id, e.payload)
        for e in events
        if e.type.startswith("harness.runtime.command.")
    ]


def test_each_program_run_is_recorded_like_a_bash_command(tmp_path: Any) -> None:
    workflow = sum_workflow(SUM)
    world = LocalWorld(tmp_path)
    result = run_workflow(workflow, {"a": 5, "b": 6}, world=world)
    events = world.list_events(result.run_id)
    for event in events:
        parse_event(event.model_dump(by_alias=True))  # upstream's shapes
    (started, ended) = command_events(events)
    assert started[:2] == ("started", "code-run:add:1:1")
    assert started[2]["command"] == "deno run main.ts" and started[2]["source"] == "code.run"
    assert ended[:2] == ("succeeded", "code-run-end:add:1:1")
    assert ended[2]["exitCode"] == 0 and ended[2]["stopped"] is None
    assert ended[2]["isolation"] == "namespaces"
    assert ended[2]["stdout"]["preview"] == '{"sum":11}\n'
    assert "adding 5 6" in ended[2]["stderr"]["preview"]


def test_a_program_the_sandbox_stops_is_recorded_with_why(tmp_path: Any) -> None:
    flood = "while (true) console.log('x'.repeat(65536));"
    workflow = sum_workflow(flood)
    world = LocalWorld(tmp_path)
    with pytest.raises(RunFailedError) as caught:
        run_workflow(workflow, {"a": 1, "b": 2}, world=world)
    (_, (kind, _, ended)) = command_events(world.list_events(caught.value.run_id))
    assert kind == "failed" and ended["stopped"] == "output"
    assert ended["stdout"]["truncated"] is True


# --- file names that cannot all be written, and host paths --------------------------------------

CLASHES = [
    pytest.param({"a": "x", "a/b.ts": "y"}, ("a", "a/b.ts"), id="file-then-inside"),
    pytest.param({"lib/x/y.ts": "y", "lib/x": "x"}, ("lib/x", "lib/x/y.ts"), id="inside-then-file"),
    pytest.param({"main.ts/deep.ts": "y"}, ("main.ts", "main.ts/deep.ts"), id="inside-entrypoint"),
]


@pytest.mark.parametrize(("files", "pair"), CLASHES)
def test_a_file_that_is_also_a_folder_is_refused_by_validation(
    files: dict[str, str], pair: tuple[str, str]
) -> None:
    from little_dist.lwir import validate_lwir

    findings = validate_lwir(sum_plan(code(SUM, **files)))
    (clash,) = [f for f in findings if f.code == "code.invalid_file_path"]
    assert clash.path == f'$.steps[0].with.files["{pair[1]}"]'
    assert repr(pair[0]) in clash.message and repr(pair[1]) in clash.message


@pytest.mark.parametrize(("files", "pair"), CLASHES)
def test_a_file_that_is_also_a_folder_is_refused_before_anything_is_written(
    files: dict[str, str], pair: tuple[str, str]
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        run_code(code(SUM, **files), {"a": 1, "b": 2}, step_id="add")
    message = str(caught.value)
    assert message.startswith("code.run step 'add': ")
    assert repr(pair[0]) in message and repr(pair[1]) in message
    assert "/tmp" not in message and "little-code-" not in message


def test_a_file_that_cannot_be_written_is_named_without_the_hosts_folder(tmp_path: Any) -> None:
    long_name = "n" * 300 + ".ts"  # a safe path, but longer than a file name may be
    with pytest.raises(InvalidInputError) as caught:
        run_code(code(SUM, **{long_name: "x"}), {"a": 1, "b": 2}, step_id="add")
    message = str(caught.value)
    assert message.startswith("code.run step 'add': ") and "name too long" in message.lower()
    assert "/tmp" not in message and "little-code-" not in message
    # Through a whole run: the step fails with the same message, and no event names the folder.
    world = LocalWorld(tmp_path)
    with pytest.raises(RunFailedError) as failed:
        run_workflow(
            define_workflow(
                id="code.sum",
                input={"type": "object"},
                output={"type": "object"},
                model="scripted/none",
                plan=sum_plan(code(SUM, **{long_name: "x"})),
            ),
            {"a": 1, "b": 2},
            world=world,
        )
    logged = " ".join(e.model_dump_json() for e in world.list_events(failed.value.run_id))
    assert "name too long" in logged.lower()
    assert "little-code-" not in logged and "/tmp/" not in logged
