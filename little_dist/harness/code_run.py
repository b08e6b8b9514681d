"""``code.run`` in the default harness: the step's program, and a fixer's repair of it, run in
the kernel sandbox (:mod:`little_dist.sandbox.code_run`).

Upstream's default harness refuses ``code.run`` for want of an isolated runtime; this is one.
A program that fails (exit code, no JSON output, a sandbox limit) is a retriable
``step_failed`` — the failure a fixer repairs; a pin mismatch, a bad sandbox policy or a
machine where the sandbox cannot run is ``runtime_config_error`` (no retry, no fixer).

Each run of a program (the step's, and each repair the fixer tries) is recorded as the bash
tool records a command: upstream's ``harness.runtime.command.started`` and ``.succeeded``
(exit code 0 and JSON printed) / ``.failed``, ``command`` ``deno run <entrypoint>``, ``cwd``
the program's folder, ``source`` ``code.run``, ``exitCode``, ``durationMs``, ``stdout`` and
``stderr`` as captured-content refs, ``isolation``, ``limits`` (``cgroup2``, ``cgroup1`` or
``rlimits``: see :mod:`little_dist.sandbox.cgroups`) and ``stopped`` (why the sandbox ended it:
``timeout``, ``cpu``, ``memory``, ``disk``, ``file_size``, ``output``; null when it ended on
its own). Their occurrences are ``code-run:{step}:{attempt}:{n}`` / ``code-run-end:...``,
``n`` counting the attempt's runs (apart from its bash commands). A program refused before it
runs (a pin mismatch, no sandbox) records none.

Tools. When the step has tools (``ctx.tools``: the workflow's tools its permissions let the
step call), the program may call them with ``little.callTool(name, args)`` through a narrow
channel of pipes (:mod:`little_dist.sandbox.tool_channel`, not the network). Each call goes
through :func:`~little_dist.harness.tool_calls.run_tool_call` with ``caller: "code"`` (as
upstream records calls made by workflow code): the permission rules decide it and
``harness.permission.decided`` records the decision, ``harness.tool_call.started`` /
``.succeeded`` / ``.failed`` record it, and the memo replays a call that succeeded before, so
a retried attempt that runs the program again does not call a tool twice. A call's memo key
is its place among the step's code calls: ``callIndex`` is ``k`` for the program's ``k``-th
call, ``100 * n + k`` in a fixer's ``n``-th repair of it, so two runs never share keys. One
run may make :data:`MAX_CODE_TOOL_CALLS` calls (upstream's ``maxToolCallsPerTurn``); one
more, a request over 1 MiB or a malformed request stops the program and fails the attempt,
saying which (a fixer may repair it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_dist.errors import InvalidInputError
from little_dist.harness.errors import HarnessConfigError, HarnessError
from little_dist.lwir.step_checks import code_file_digest

if TYPE_CHECKING:
    from little_dist.harness.recorder import EventRecorder
    from little_dist.harness.types import HarnessContext
    from little_dist.sandbox import SandboxResult
    from little_dist.sandbox.tool_channel import ToolHandler

__all__ = [
    "MAX_CODE_TOOL_CALLS",
    "check_code_sandbox",
    "run_code_step",
    "run_fixed_code",
    "runnable_code",
]

#: The tool calls one run of a program may make (upstream's ``maxToolCallsPerTurn``).
MAX_CODE_TOOL_CALLS = 100


def check_code_sandbox(step: Mapping[str, Any]) -> None:
    """Upstream's checks of a ``code.run`` step's sandbox policy: every key denied."""
    step_id = step.get("id")
    config = step.get("with")
    sandbox = config.get("sandbox") if isinstance(config, Mapping) else None
    if not isinstance(sandbox, Mapping):
        raise HarnessConfigError(f"Workflow code.run step '{step_id}' requires a sandbox policy.")
    unsupported = [key for key in sandbox if key not in ("network", "env", "fs")]
    if unsupported:
        raise HarnessConfigError(
            f"Workflow code.run step '{step_id}' has unsupported sandbox keys: "
            f"{', '.join(unsupported)}."
        )
    for key in ("network", "env", "fs"):
        value = sandbox.get(key, "deny" if key != "network" else None)
        if value != "deny" and value is not False:
            raise HarnessConfigError(
                f"Workflow code.run step '{step_id}' only supports sandbox.{key} deny."
            )


def run_code_step(
    step: Mapping[str, Any],
    step_input: Any,
    recorder: EventRecorder | None = None,
    run_number: int = 1,
    ctx: HarnessContext | None = None,
    *,
    repair: int = 0,
) -> Any:
    """Run a ``code.run`` step in the kernel sandbox (:mod:`little_dist.sandbox.code_run`),
    recorded with ``recorder`` as the attempt's run ``run_number`` (see the module docs);
    with ``ctx``, the program may call ``ctx.tools`` (``repair``: the fixer's repair number,
    0 for the step's own program).

    A program that fails (exit code, no JSON output, a sandbox limit) is a retriable
    ``step_failed`` — the failure a fixer repairs; a pin mismatch, a bad policy or a machine
    where the sandbox cannot run is ``runtime_config_error`` (no retry, no fixer)."""
    from little_dist.sandbox import SandboxUnavailableError
    from little_dist.sandbox.code_run import CodeRunError, run_code

    check_code_sandbox(step)
    step_id = str(step.get("id"))
    config = step.get("with") or {}
    try:
        result = run_code(
            config,
            step_input,
            step_id=step_id,
            tools=_tool_handler(ctx, repair),
            max_tool_calls=MAX_CODE_TOOL_CALLS,
        )
    except CodeRunError as exc:
        if recorder is not None and exc.result is not None:
            _record_run(recorder, config, exc.result, run_number, succeeded=False)
        raise HarnessError(str(exc), cause_code="step_failed", retriable=True) from exc
    except (SandboxUnavailableError, InvalidInputError) as exc:
        raise HarnessConfigError(f"Workflow code.run step '{step_id}': {exc}") from exc
    if recorder is not None:
        _record_run(recorder, config, result.run, run_number, succeeded=True)
    return result.output


def _tool_handler(ctx: HarnessContext | None, repair: int) -> ToolHandler | None:
    """How the program's tool requests are answered: as a model's calls are, with
    ``caller: "code"`` (see the module docs); ``None`` when the step has no tools."""
    if ctx is None or not ctx.tools:
        return None
    from little_dist.harness.tool_calls import run_tool_call

    scope = {"stepPath": ctx.recorder.step_path, "source": "code.run"}
    first = repair * MAX_CODE_TOOL_CALLS

    def handle(number: int, tool_name: str, args: Any) -> dict[str, Any]:
        outcome = run_tool_call(
            ctx,
            tool_name=tool_name,
            args=args,
            caller="code",
            call_index=first + number,
            scope=scope,
        )
        if outcome.ok:
            return {"ok": True, "result": outcome.result}
        error = outcome.error or {}
        return {
            "ok": False,
            "error": {
                "message": str(error.get("message", "tool failed")),
                "causeCode": str(error.get("causeCode", "tool_error")),
            },
        }

    return handle


def _record_run(
    recorder: EventRecorder,
    config: Mapping[str, Any],
    run: SandboxResult,
    number: int,
    *,
    succeeded: bool,
) -> None:
    """The program's run as upstream's command events (recorded once it ended: runtime
    events are pending until the attempt's next write either way)."""
    from little_dist.harness.bash_tool import captured
    from little_dist.sandbox.code_run import CODE_TARGET

    shown = {
        "command": f"deno run {config.get('entrypoint')}",
        "cwd": CODE_TARGET,
        "source": "code.run",
    }
    recorder.trace("harness.runtime.command.started", shown, "code-run", number)
    ended = "succeeded" if succeeded else "failed"
    payload = {
        **shown,
        "exitCode": run.exit_code,
        "durationMs": run.duration_ms,
        "stdout": captured(run.stdout),
        "stderr": captured(run.stderr),
        "isolation": run.isolation,
        "limits": run.limits,
        "stopped": run.stopped,
    }
    recorder.trace(f"harness.runtime.command.{ended}", payload, "code-run-end", number)


def runnable_code(step: Mapping[str, Any]) -> bool:
    """Whether ``step`` is a ``code.run`` step with an entrypoint among pinned files."""
    config = step.get("with")
    if step.get("uses") != "code.run" or not isinstance(config, Mapping):
        return False
    files = config.get("files")
    return isinstance(files, Mapping) and config.get("entrypoint") in files


def run_fixed_code(
    step: Mapping[str, Any],
    step_input: Any,
    fixed_source: str,
    recorder: EventRecorder | None = None,
    run_number: int = 1,
    ctx: HarnessContext | None = None,
) -> Any:
    """Run a fixer's ``fixed_source`` as the step's entrypoint (pinned here, for this run
    only: the LWIR stays as it is) and return the program's output; recorded as
    :func:`run_code_step` records it."""
    step_id = step.get("id")
    if not fixed_source.strip():
        raise HarnessError(
            f"the fixer proposed no fixed source for code.run step '{step_id}'",
            cause_code="step_failed",
            retriable=True,
        )
    config = dict(step["with"])
    files = dict(config["files"])
    files[config["entrypoint"]] = {
        "content": fixed_source,
        "sha256": code_file_digest(fixed_source),
    }
    config["files"] = files
    return run_code_step(
        {**step, "with": config}, step_input, recorder, run_number, ctx, repair=run_number
    )
