"""``code.run``: a step's pinned TypeScript, run by Deno inside the kernel sandbox.

The contract (upstream's LWIR fixes the step's shape; upstream's default harness refuses to
run it without an isolated runtime, which this is):

* ``with.files`` maps safe relative paths to ``{content, sha256}``; every digest is checked
  (sha256 of the raw UTF-8 text) before anything is written or run; so is a path inside
  another file (``a`` and ``a/b.ts``). The files are written read-only at ``/mnt/code``, the
  working directory. No error names the host folder they are written to.
* ``with.entrypoint`` (a ``.ts`` file among them) runs with ``deno run``: no permission granted
  (``--no-prompt``: reading a file, the network, the environment, subprocesses and FFI are all
  refused), no remote or npm imports, no config or lock file. ``with.sandbox`` must deny
  network, env and fs (the LWIR validator says so); the kernel sandbox holds the same line
  underneath.
* The step input is the program's stdin, as JSON. The program prints the step output as one
  JSON document on stdout (``console.log(JSON.stringify(output))``); anything it wants to log
  goes to stderr (``console.error``). The output is then checked like any step output.
* A non-zero exit, output that is not one JSON document, and a sandbox stop (time, memory,
  output size) fail the attempt with :class:`CodeRunError`, whose message carries the exit
  code and the end of stderr — what a fixer needs to repair the program.

Memory: V8 reserves far more address space than it uses, so ``memory_bytes`` bounds the
JavaScript heap (``--max-old-space-size``) and writable memory (``RLIMIT_DATA``, with room for
V8's own reservations), not the address space.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from little_dist.errors import InvalidInputError, LittleError
from little_dist.lwir.step_checks import code_file_digest, code_path_clashes
from little_dist.sandbox.code_tools import BRIDGE_TARGET, bridge_arguments, write_bridge
from little_dist.sandbox.limits import DEFAULT_LIMITS, SandboxLimits
from little_dist.sandbox.mounts import Mount
from little_dist.sandbox.process import SandboxResult, run_sandboxed
from little_dist.sandbox.supervise import STOP
from little_dist.sandbox.tool_channel import DEFAULT_MAX_CALLS, ToolChannel, ToolHandler

__all__ = ["CODE_TARGET", "CodeRunError", "CodeRunResult", "deno_binary", "run_code"]

CODE_TARGET: Final = "/mnt/code"
_DENO_TARGET: Final = "/mnt/.runtime/deno"
_MIB: Final = 1024 * 1024
#: Writable memory V8 needs beyond its heap (code range, isolate, Deno's runtime).
_V8_OVERHEAD: Final = 768 * _MIB
_STDERR_SHOWN: Final = 2000


class CodeRunError(LittleError):
    """The program failed, printed no JSON, or the sandbox stopped it (``result`` says how)."""

    def __init__(self, message: str, result: SandboxResult | None = None) -> None:
        super().__init__(message)
        self.result = result


@dataclass(frozen=True, slots=True)
class CodeRunResult:
    """The step output the program printed, and how its run went."""

    output: Any
    run: SandboxResult


def deno_binary() -> Path:
    """The Deno binary of the ``deno`` package (installed with little-dist)."""
    try:
        import deno  # type: ignore[import-untyped]  # ships no type information
    except ImportError as exc:  # a broken install
        raise CodeRunError("code.run needs the 'deno' package: pip install deno") from exc
    return Path(deno.find_deno_bin())


def run_code(
    config: Mapping[str, Any],
    step_input: Any,
    *,
    step_id: str = "code",
    limits: SandboxLimits = DEFAULT_LIMITS,
    tools: ToolHandler | None = None,
    max_tool_calls: int = DEFAULT_MAX_CALLS,
) -> CodeRunResult:
    """Run a ``code.run`` step's ``with`` (``config``) on ``step_input``.

    ``tools``: the program may call tools (``little.callTool``, see
    :mod:`little_dist.sandbox.code_tools`), each answered by ``tools`` on the host, at most
    ``max_tool_calls`` per run; a broken channel (:mod:`little_dist.sandbox.tool_channel`)
    stops the program and fails the run with its reason, and what ``tools`` raised is raised
    again here."""
    entrypoint, files = _checked(config, step_id)
    program_limits = replace(
        limits, memory_kind="data", memory_bytes=limits.memory_bytes + _V8_OVERHEAD
    )
    heap_mib = max(16, limits.memory_bytes // _MIB)
    with (
        tempfile.TemporaryDirectory(prefix="little-code-") as folder,
        tempfile.TemporaryDirectory(prefix="little-bridge-") as bridge,
    ):
        root = Path(folder)
        root.chmod(0o755)
        for name, content in files.items():
            try:
                path = root / name
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                path.write_text(content, encoding="utf-8")
                path.chmod(0o644)
            except OSError as exc:  # its text names the host's folder: the step's name only
                raise InvalidInputError(
                    f"code.run step '{step_id}': cannot write file {name!r}: {exc.strerror}"
                ) from None
        argv = [_DENO_TARGET, "run", "--no-prompt", "--no-config", "--no-lock", "--no-remote"]
        argv += ["--no-npm", f"--v8-flags=--max-old-space-size={heap_mib}"]
        mounts = [Mount(root, CODE_TARGET), Mount(deno_binary(), _DENO_TARGET)]
        with _tool_channel(tools, max_tool_calls) as channel:
            if channel is None:
                argv.append(entrypoint)
            else:
                answers, requests = channel.child_fds
                argv += bridge_arguments(answers, requests)
                argv.append(
                    write_bridge(Path(bridge), f"{CODE_TARGET}/{entrypoint}", answers, requests)
                )
                mounts.append(Mount(Path(bridge), BRIDGE_TARGET))
            try:
                run = run_sandboxed(
                    argv,
                    mounts=mounts,
                    cwd=CODE_TARGET,
                    env={"DENO_DIR": "/tmp/deno", "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1"},
                    stdin=json.dumps(step_input).encode(),
                    limits=program_limits,
                    pass_fds=() if channel is None else channel.child_fds,
                )
            except LittleError as exc:  # (a mount's complaint names its source: the host folder)
                if folder in str(exc):
                    exc.args = (str(exc).replace(folder, CODE_TARGET),)
                raise
    if folder in run.stderr:  # (the sandbox's own complaints may name its mounts' sources)
        run = replace(run, stderr=run.stderr.replace(folder, CODE_TARGET))
    if channel is not None and channel.raised is not None:
        raise channel.raised
    if channel is not None and channel.failure is not None:
        raise CodeRunError(f"code.run step '{step_id}': {channel.failure}", run)
    return CodeRunResult(output=_output_of(run, step_id), run=run)


@contextlib.contextmanager
def _tool_channel(tools: ToolHandler | None, max_calls: int) -> Iterator[ToolChannel | None]:
    """The run's tool channel (none without ``tools``), serving while the program runs; the
    program is stopped as soon as the channel breaks (the sandbox's stop check)."""
    if tools is None:
        yield None
        return
    channel = ToolChannel(tools, max_calls=max_calls)
    outer = STOP.get()

    def stop() -> bool:
        return channel.broken() or (outer is not None and outer())

    token = STOP.set(stop)
    try:
        channel.start()
        yield channel
    finally:
        STOP.reset(token)
        channel.close()


def _checked(config: Mapping[str, Any], step_id: str) -> tuple[str, dict[str, str]]:
    where = f"code.run step '{step_id}'"
    if not isinstance(config, Mapping):
        raise InvalidInputError(f"{where}: 'with' must be an object")
    entrypoint = config.get("entrypoint")
    files = config.get("files")
    if not isinstance(entrypoint, str) or not entrypoint.endswith(".ts"):
        raise InvalidInputError(f"{where}: entrypoint must be a .ts file")
    if not isinstance(files, Mapping) or entrypoint not in files:
        raise InvalidInputError(f"{where}: entrypoint {entrypoint!r} is not among its files")
    checked: dict[str, str] = {}
    for name, file in files.items():
        if not _safe(name):
            raise InvalidInputError(f"{where}: file path {name!r} is not a safe relative path")
        content = file.get("content") if isinstance(file, Mapping) else None
        digest = file.get("sha256") if isinstance(file, Mapping) else None
        if not isinstance(content, str):
            raise InvalidInputError(f"{where}: file {name!r} has no text content")
        if digest != code_file_digest(content):
            raise InvalidInputError(
                f"{where}: file {name!r} does not match its pinned sha256 (nothing was run)"
            )
        checked[name] = content
    clash = next(iter(code_path_clashes(checked)), None)
    if clash is not None:
        raise InvalidInputError(f"{where}: file {clash[1]!r} is inside {clash[0]!r}, a file too")
    return entrypoint, checked


def _safe(name: object) -> bool:
    if not isinstance(name, str) or not name or "\0" in name or "\\" in name:
        return False
    if name.startswith("/") or len(name.encode()) > 1024:
        return False
    normal = posixpath.normpath(name)
    return normal == name and not normal.startswith("..") and "/../" not in f"/{normal}/"


def _output_of(run: SandboxResult, step_id: str) -> Any:
    where = f"code.run step '{step_id}'"
    tail = run.stderr[-_STDERR_SHOWN:].strip()
    said = f"; stderr: {tail}" if tail else ""
    if run.stopped is not None:
        raise CodeRunError(f"{where}: stopped by the sandbox ({run.stopped}){said}", run)
    if run.exit_code != 0:
        raise CodeRunError(f"{where}: the program exited with code {run.exit_code}{said}", run)
    if run.stdout_dropped:
        raise CodeRunError(
            f"{where}: the output is over the sandbox's output cap "
            f"({run.stdout_dropped} bytes dropped)",
            run,
        )
    try:
        return json.loads(run.stdout)
    except json.JSONDecodeError as exc:
        shown = run.stdout.strip()[:200] or "nothing"
        raise CodeRunError(
            f"{where}: the program must print its output as one JSON document on stdout; "
            f"it printed {shown!r} ({exc.msg}){said}",
            run,
        ) from None
