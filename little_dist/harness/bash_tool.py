"""The ``bash`` tool a harness role's model is offered: one sandboxed shell per step attempt.

Who is offered it. Upstream's runtime gives every worker and fixer harness context a bash
tool (``createRuntimeHarnessContext`` in ``runtime.ts``) and its workflow harness adds it to
the tools of a text ``ai.generate`` step and of the fixer's loop unless a registered tool is
already called ``bash`` (``workflowToolsForContext``); a structured step gets no tools at
all. Here the tool is offered only when the workflow enables it: ``define_workflow(bash=...)``
(upstream's option, any capabilities, ``bash={}`` for the defaults) puts
:class:`~little_dist.sandbox.bash_capabilities.BashCapabilities` into the run's
:class:`~little_dist.runtime.Capabilities`, and without it no model is offered bash. Why not
always, as upstream: upstream's bash is an in-memory interpreter that cannot touch the
machine; ours runs real programs on the worker (isolated, but still a kernel sandbox an
operator must provide), so running commands is something a workflow asks for, not a
default. With it enabled, the roles and steps are upstream's: ``worker.ai-generate`` text
steps and the ``fixer``, beside whatever tools ``permissions.tools`` allows (a list of
registered tools, where upstream's compiler refuses ``bash``); never ``tool.call`` steps or
the orchestrator. The planner gets one of its own whatever the workflow says, only when it
reviews a reuse candidate, and over that candidate's read-only files only
(:mod:`little_dist.planner.reuse_files`): reading them is what the review brief asks. A
step's own ``with.tools`` list (ours) offers exactly what it names: bash only if it names
``bash``. A registered tool named ``bash`` wins, as upstream.

What it sees. The attempt's run scratch (:mod:`little_dist.scratch`), made on its first
command by the ``scratch`` factory the attempt runtime gives it: ``/mnt/scratch/own``
(writable, where each command starts; the step's files as of its last completed attempt),
``/mnt/scratch/from-*`` and ``/mnt/scratch/peer-steps/<step>/`` (read-only). What the
commands change in ``own`` is published with the attempt's commit, by the runtime
(:func:`~little_dist.runtime.harness_run.run_and_judge`), not here. Without a factory (a
tool built by hand, as in tests) ``/mnt/scratch/own`` is a temporary folder removed when the
tool is closed.

What it records. Each command is a tool call (``harness.tool_call.*``, memoized like any)
and, between its start and end, upstream's ``harness.runtime.command.started`` and
``.succeeded`` (exit code 0) / ``.failed`` (any other) with upstream's payload (``command``,
``cwd``, ``timeoutMs``, ``exitCode``, ``durationMs``, ``stdout``/``stderr`` as captured-content
refs) plus ``isolation`` (``namespaces`` or ``rlimits``), ``limits`` (what held its memory,
processes and CPU: ``cgroup2`` or ``cgroup1``, the whole command; ``rlimits``, each process)
and ``stopped`` (why the sandbox ended it: ``timeout``, ``cpu``, ``memory``, ``disk``,
``file_size``, ``output``; null when it ended on its own). The call's
``harness.tool_call.succeeded`` carries, besides the result the model sees, ``sandbox:
{isolation, limits, stopped, durationMs, state}`` where ``state`` is the session's
:class:`~little_dist.sandbox.bash.BashState` after the command (cwd, exports). A resumed
session (a retried attempt, on any worker) replays recorded results from the memo and takes
up the state of the last replayed call, so its next command runs where the last one left
off and nothing already run runs again. With the attempt's scratch, ``sandbox`` also holds
``own``: the manifest of ``/mnt/scratch/own`` after the command (every file's size, digest and
the ``artifactRef`` its bytes were stored under; ``ownRef`` instead, the manifest stored as an
artifact, when it is over the recorder's inline limit). A replayed session's ``own`` is made
to match the last replayed command's manifest before anything else runs or commits
(:mod:`little_dist.scratch.snapshots`), so the files the replayed commands wrote are there.
When the workflow mounts a read-write memory store, the manifest also holds ``memory``: each
such store's folder after the command, taken up the same way and published with the retry's
commit (:mod:`little_dist.memory.attempt`).

Bad input (an unknown key, a ``cwd`` outside the writable mount) is a failed call the model
sees. A sandbox the host cannot provide (no namespaces, no weaker mode opted into) fails the
step attempt instead, cause ``runtime_config_error``, with the sandbox's one-line reason.

Network. Off unless the workflow's capabilities grant it; then the session's egress proxy
(:mod:`little_dist.sandbox.egress`) is the commands' only route out, and each command's end
event and its call's ``sandbox`` record also carry ``egress``: every request the proxy saw
during the command (``method``, ``target``, ``allowed``, ``reason``).
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from little_dist.harness.errors import envelope_for
from little_dist.harness.tool_calls import RecordedResult
from little_dist.sandbox import DEFAULT_LIMITS, Mount, SandboxLimits, SandboxUnavailableError
from little_dist.sandbox.bash import BASH_INPUT_SCHEMA, BashInputError, BashSession, BashState
from little_dist.sandbox.bash_capabilities import BashCapabilities
from little_dist.sandbox.writable import remove_tree
from little_dist.tools import Tool

if TYPE_CHECKING:
    from little_dist.harness.recorder import EventRecorder

__all__ = ["BASH_TOOL", "OWN_SCRATCH", "BashTool", "ScratchSource", "captured"]

BASH_TOOL: Final = "bash"
#: Where the attempt's own scratch folder is mounted, and where commands start.
OWN_SCRATCH: Final = "/mnt/scratch/own"
#: Upstream's description of the tool (``bash-tool.ts``).
DESCRIPTION: Final = (
    "Execute a sandboxed bash command in the mounted harness environment. Use to inspect "
    "files, run scripts, test code, and read memory."
)
#: Characters of stdout/stderr kept as a command event's preview (the whole output is the
#: tool call's result).
PREVIEW_CHARS: Final = 1024


class ScratchSource(Protocol):
    """The attempt's scratch as the bash tool uses it (the runtime's, see
    :mod:`little_dist.runtime.harness_run`)."""

    def mounts(self) -> Sequence[Mount]:
        """The scratch mounts (made on first use), one of them writable at ``OWN_SCRATCH``."""
        ...

    def snapshot(self) -> Mapping[str, Any]:
        """The manifest of ``own`` now, its files' bytes stored."""
        ...

    def resume(self, record: Mapping[str, Any]) -> None:
        """Take up the ``own``/``ownRef`` of a replayed command's ``sandbox`` record."""
        ...


class BashTool(Tool):
    """The bash tool of one step attempt (see the module docstring). :meth:`close` it when
    the attempt ends. ``scratch`` is the attempt's scratch (its mounts made on the first
    command; its ``own`` recorded after each command and taken up on replay), else
    ``/mnt/scratch/own`` is a temporary folder; ``mounts`` adds folders beside them."""

    def __init__(
        self,
        capabilities: BashCapabilities,
        recorder: EventRecorder,
        *,
        limits: SandboxLimits = DEFAULT_LIMITS,
        mounts: Sequence[Mount] = (),
        scratch: ScratchSource | None = None,
    ) -> None:
        super().__init__(BASH_TOOL, None, description=DESCRIPTION, input_schema=BASH_INPUT_SCHEMA)
        self.capabilities = capabilities
        self.limits = limits
        self.mounts = tuple(mounts)
        self._recorder = recorder
        self._source = scratch
        self._session: BashSession | None = None
        self._scratch: Path | None = None
        self._resumed: BashState | None = None
        self._commands = 0

    def call(self, arguments: Mapping[str, Any]) -> RecordedResult:
        self.validate(arguments)
        session = self._open()
        command = session.check(arguments)
        self._commands += 1
        number = self._commands
        shown: dict[str, Any] = {"command": command.cmd, "cwd": command.cwd}
        if command.timeout_ms is not None:
            shown["timeoutMs"] = command.timeout_ms
        recorder = self._recorder
        recorder.trace("harness.runtime.command.started", shown, "command", number)
        started = time.monotonic()
        try:
            output = session.execute(command)
        except SandboxUnavailableError as exc:
            recorder.trace(
                "harness.runtime.error", {"error": envelope_for(exc)}, "command-end", number
            )
            raise
        result = session.last
        assert result is not None  # execute() keeps what it ran
        duration = round((time.monotonic() - started) * 1000, 3)
        code = output["exitCode"]
        egress = {} if self.capabilities.network is False else {"egress": _egress(session)}
        recorder.trace(
            "harness.runtime.command.succeeded" if code == 0 else "harness.runtime.command.failed",
            {
                **shown,
                "exitCode": code,
                "durationMs": duration,
                "stdout": captured(output["stdout"]),
                "stderr": captured(output["stderr"]),
                "isolation": result.isolation,
                "limits": result.limits,
                "stopped": result.stopped,
                **egress,
            },
            "command-end",
            number,
        )
        sandbox = {
            "isolation": result.isolation,
            "limits": result.limits,
            "stopped": result.stopped,
            "durationMs": duration,
            "state": session.state.to_json(),
            **egress,
        }
        if self._source is not None:
            own = dict(self._source.snapshot())
            ref = recorder.offload(own, "harness.bash.own")
            sandbox.update({"own": own} if ref is None else {"own": None, "ownRef": ref})
        return RecordedResult(output, {"sandbox": sandbox})

    def replayed(self, payload: Mapping[str, Any]) -> None:
        """A call reused from the log: count it, and continue from the state it recorded."""
        self._commands += 1
        sandbox = payload.get("sandbox")
        if (
            self._source is not None
            and isinstance(sandbox, Mapping)
            and (sandbox.get("own") is not None or sandbox.get("ownRef") is not None)
        ):
            self._source.resume(sandbox)
        state = sandbox.get("state") if isinstance(sandbox, Mapping) else None
        if not isinstance(state, Mapping) or not isinstance(state.get("cwd"), str):
            return
        resumed = BashState.from_json(state)
        if self._session is not None:
            try:
                self._session.restore(resumed)
            except BashInputError:
                return  # a state this session cannot take (another mount layout): start afresh
        self._resumed = resumed

    def close(self) -> None:
        """End the session and remove its own files (and its temporary ``own`` folder)."""
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._scratch is not None:
            remove_tree(self._scratch)  # however deep, never through a link (a command's)
            self._scratch = None

    def own_folder(self) -> Path:
        """The host folder its commands see at ``OWN_SCRATCH``: what another tool of the
        attempt writes there (an orchestrator's sub-run output) they can read."""
        if self._source is not None:
            for mount in self._source.mounts():
                if mount.target == OWN_SCRATCH and mount.writable:
                    return Path(mount.source)
            raise BashInputError(f"the attempt's scratch has no writable {OWN_SCRATCH}")
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="little-scratch-"))
        return self._scratch

    def _open(self) -> BashSession:
        if self._session is None:
            if self._source is not None:
                mounts = [*self._source.mounts(), *self.mounts]
            else:
                mounts = [Mount(self.own_folder(), OWN_SCRATCH, writable=True), *self.mounts]
            self._session = BashSession(
                mounts, OWN_SCRATCH, limits=self.limits, capabilities=self.capabilities
            )
            if self._resumed is not None:
                # a state this session cannot take (another mount layout): start afresh
                with contextlib.suppress(BashInputError):
                    self._session.restore(self._resumed)
        return self._session


def captured(text: str) -> dict[str, Any]:
    """Upstream's captured-content ref of a command's output (``trace/content.ts``)."""
    data = text.encode("utf-8")
    return {
        "captured": True,
        "preview": text[:PREVIEW_CHARS],
        "truncated": len(text) > PREVIEW_CHARS,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "mediaType": "text/plain",
    }


def _egress(session: BashSession) -> list[dict[str, Any]]:
    return [decision.to_json() for decision in session.last_egress]
