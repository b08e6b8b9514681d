"""The bash tool's engine: upstream's contract on the kernel sandbox.

Input ``{cmd, cwd?, timeoutMs?}``, output ``{stdout, stderr, exitCode}`` (upstream's
``bash-tool.ts``). A :class:`BashSession` keeps the working directory and the exported
variables from one command to the next, as one shell would, though each command runs in a
fresh sandbox: the session's state (:class:`BashState`) is written by the command's shell on
exit and read back by the next, and it is plain data, so a resumed session (on this worker or
another) restores it from the last recorded call instead of running anything again.

Upstream runs an in-memory interpreter; here the commands are real bash with the system's
tools, isolated by :mod:`little_dist.sandbox`. Differences from upstream that a model sees:
none in the contract; a command past its time ends with exit code 124 (as upstream's); the
capabilities ``python: false`` / ``javascript: false`` hide the standard interpreters' names;
``network`` (an allowlist, compared as parsed URLs: :mod:`little_dist.sandbox.allowlist`; or
``true`` for HTTPS GET/HEAD, a tunnel to port 443 of a public host) is enforced by an egress
proxy in the worker that is the sandbox's only route out (:mod:`little_dist.sandbox.egress`):
on HTTPS it sees the host and port, not the path or method. The worker opens the proxy's
listener inside each command's network namespace from outside, so nothing of the proxy runs
in the sandbox: no interpreter there for ``python: false`` to leave behind, no background job
for a bare ``wait`` to wait on.
"""

from __future__ import annotations

import glob
import math
import os
import posixpath
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from little_dist.errors import InvalidInputError
from little_dist.sandbox.bash_capabilities import BashCapabilities
from little_dist.sandbox.egress import PROXY_PORT, EgressDecision, EgressPolicy, EgressProxy
from little_dist.sandbox.isolation import SandboxUnavailableError, bwrap_path, isolation_for
from little_dist.sandbox.limits import DEFAULT_LIMITS, SandboxLimits
from little_dist.sandbox.mounts import Mount
from little_dist.sandbox.process import SandboxResult, run_sandboxed
from little_dist.sandbox.state_channel import StateChannel
from little_dist.sandbox.writable import WritableFolder

__all__ = [
    "BASH_INPUT_SCHEMA",
    "BASH_OUTPUT_SCHEMA",
    "BashCapabilities",
    "BashCommand",
    "BashInputError",
    "BashSession",
    "BashState",
    "parse_bash_input",
]

BASH_INPUT_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "cmd": {"type": "string"},
        "cwd": {"type": "string"},
        "timeoutMs": {"type": "number"},
    },
    "required": ["cmd"],
    "additionalProperties": False,
}
BASH_OUTPUT_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "exitCode": {"type": "number"},
    },
    "required": ["stdout", "stderr", "exitCode"],
    "additionalProperties": False,
}
#: Exit code of a command stopped at its time limit (upstream's, and coreutils' ``timeout``).
TIMED_OUT: Final = 124
#: The most a command's shell may leave as its state (working directory and exports): a
#: state over it is not kept (the next command starts where this one did).
STATE_BYTES: Final = 1024 * 1024
#: Linux's limits on a path and on one name in it: a longer ``cwd`` is refused up front.
_PATH_MAX: Final = 4095
_NAME_MAX: Final = 255
_PYTHON: Final = ("/usr/bin/python3*", "/usr/bin/python", "/usr/local/bin/python3*")
_JAVASCRIPT: Final = ("/usr/bin/node*", "/usr/local/bin/node", "/usr/bin/deno")
# The session's shell. Its state comes in on stdin (the exports, up to a NUL) and goes out on
# a pipe of its own (fd "$3"), written by its EXIT trap whatever way the command exits: a NUL,
# the working directory, a NUL, the exports (which hold no NUL: bash quotes them). What the
# command itself writes there comes before, and is not read. No file is shared with the host:
# it reads and writes nothing in a folder the command can write (little_dist.sandbox.writable).
_SCRIPT: Final = (
    "IFS= read -r -d '' __little_env; eval \"$__little_env\"; unset __little_env; "
    'cd -- "$1" || exit 1; __little_cmd=$2; __little_state=$3; shift 3; '
    'trap \'{ printf "\\0"; pwd; printf "\\0"; export -p; } '
    '>&"$__little_state" 2>/dev/null\' EXIT; '
    'eval "$__little_cmd"'
)


# With network on: wait until the egress proxy listens inside the sandbox (the worker opens
# its listener there from outside, see little_dist.sandbox.egress; nothing of it runs in
# here), then the session's shell as above. The marker (a fresh one a command) names the
# command's sandbox to the worker; the probe connections (no bytes sent) are not recorded.
_MARKER: Final = "@EGRESS-MARKER@"
_WITH_EGRESS: Final = (
    f"# little-egress {_MARKER}\n"
    f"__i=0; until true 2>/dev/null </dev/tcp/127.0.0.1/{PROXY_PORT}; do "
    "__i=$((__i + 1)); [ $__i -lt 2000 ] || break; sleep 0.005; done; unset __i; "
)
_PROXY = f"http://127.0.0.1:{PROXY_PORT}"
_PROXY_ENV: Final = {
    name: _PROXY for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
}


def _namespaces() -> bool:
    """Whether commands here run in namespaces (else, ``rlimits``, they have no network
    namespace of their own for the proxy to listen in: see the module docstring)."""
    try:
        return isolation_for(bwrap_path(), 0 if os.geteuid() == 0 else None) == "namespaces"
    except SandboxUnavailableError:
        return True  # run_sandboxed says why it cannot run


class BashInputError(InvalidInputError):
    """A bash call the tool cannot take (the model sees the message as the tool's error)."""


@dataclass(frozen=True, slots=True)
class BashCommand:
    """One checked call: the command, an optional working directory and time limit."""

    cmd: str
    cwd: str | None = None
    timeout_ms: float | None = None


@dataclass(frozen=True, slots=True)
class BashState:
    """What one command leaves for the next: the working directory and exported variables
    (``export -p`` lines, as bash prints them)."""

    cwd: str
    exports: str = ""

    def to_json(self) -> dict[str, str]:
        return {"cwd": self.cwd, "exports": self.exports}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> BashState:
        return cls(cwd=str(value["cwd"]), exports=str(value.get("exports", "")))


def parse_bash_input(value: object) -> BashCommand:
    """Upstream's checks of a bash call's input, with upstream's messages."""
    if not isinstance(value, Mapping):
        raise BashInputError("bash input must be an object.")
    cmd = value.get("cmd")
    if not isinstance(cmd, str) or not cmd:
        raise BashInputError("bash input must include a non-empty cmd string.")
    if "\0" in cmd:
        raise BashInputError("bash input cmd must not contain NUL bytes.")
    cwd = value.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise BashInputError("bash input cwd must be a string when provided.")
    timeout = value.get("timeoutMs")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        raise BashInputError(
            "bash input timeoutMs must be a non-negative finite number when provided."
        )
    return BashCommand(cmd=cmd, cwd=cwd, timeout_ms=timeout)


@dataclass
class BashSession:
    """One model's shell over ``mounts``: each :meth:`run` a sandboxed command.

    ``cwd`` (inside a writable mount) is where the first command starts. ``limits`` bound
    each command; a call's ``timeoutMs`` may only shorten ``wall_seconds``. With ``network``
    on, the session's commands reach out only through its egress proxy
    (:mod:`little_dist.sandbox.egress`); :meth:`close` stops it.
    """

    mounts: Sequence[Mount]
    cwd: str
    limits: SandboxLimits = DEFAULT_LIMITS
    capabilities: BashCapabilities = field(default_factory=BashCapabilities)
    last: SandboxResult | None = field(default=None, init=False)
    #: The egress proxy's decisions during the last command (network on only).
    last_egress: list[EgressDecision] = field(default_factory=list, init=False)
    _state: BashState = field(init=False)
    _proxy: EgressProxy | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._state = BashState(cwd=self._checked_cwd(self.cwd, "/"))
        network = self.capabilities.normalized()["network"]
        if network is not False:
            self._proxy = EgressProxy(EgressPolicy.from_network(network))

    @property
    def state(self) -> BashState:
        return self._state

    def restore(self, state: BashState) -> None:
        """Continue from ``state`` (a resumed session's last recorded call).

        The working directory is made again in its writable mount when it is missing there:
        a resumed session may stand on a fresh folder (a retried attempt's), and its next
        command must not fail for a ``cd`` into a directory the lost folder held.
        """
        cwd = self._checked_cwd(state.cwd, "/")
        self._state = replace(state, cwd=cwd)
        self._make_dirs(cwd)

    def run(self, value: object) -> dict[str, Any]:
        """Run one call (upstream's input) and return upstream's output."""
        return self.execute(self.check(value))

    def check(self, value: object) -> BashCommand:
        """Upstream's checks of one call, its ``cwd`` resolved against the session's (inside
        a writable mount): :class:`BashInputError` says what is wrong, before anything runs."""
        command = parse_bash_input(value)
        cwd = self._state.cwd if command.cwd is None else command.cwd
        return replace(command, cwd=self._checked_cwd(cwd, self._state.cwd))

    def execute(self, command: BashCommand) -> dict[str, Any]:
        """Run a call :meth:`check` returned; the result is also kept as :attr:`last`."""
        cwd = command.cwd or self._state.cwd
        limits = self.limits
        if command.timeout_ms is not None:
            seconds = max(command.timeout_ms / 1000, 0.001)
            limits = replace(limits, wall_seconds=min(limits.wall_seconds, seconds))
        mounts = list(self.mounts)
        script, env = _SCRIPT, None
        if self._proxy is not None:
            script, env = _WITH_EGRESS + _SCRIPT, _PROXY_ENV
        with StateChannel(STATE_BYTES) as channel:
            result = self._sandboxed(
                ["bash", "-c", script, "bash", cwd, command.cmd, str(channel.fd)],
                mounts=mounts,
                cwd=cwd,
                env=env,
                stdin=self._state.exports.encode("utf-8", "surrogateescape") + b"\0",
                limits=limits,
                hide=self._hidden(),
                pass_fds=(channel.fd,),
            )
            said = channel.received()
        self.last = result
        self.last_egress = [] if self._proxy is None else self._proxy.take_decisions()
        self._state, note = self._state_after(said, cwd)
        stderr = result.stderr + note
        if result.stopped == "timeout":
            seconds = limits.wall_seconds
            return {
                "stdout": result.stdout,
                "stderr": stderr + f"command timed out after {seconds * 1000:.0f} ms\n",
                "exitCode": TIMED_OUT,
            }
        return {"stdout": result.stdout, "stderr": stderr, "exitCode": result.exit_code}

    def _sandboxed(self, argv: list[str], **options: Any) -> SandboxResult:
        """:func:`run_sandboxed`, with the egress proxy serving the command when network is
        on: ``argv``'s script names the sandbox by a fresh marker, and the proxy opens its
        listener there for the command's time."""
        if self._proxy is None:
            return run_sandboxed(argv, **options)
        if not _namespaces():  # rlimits: no namespace of its own to listen in, nothing to wait for
            return run_sandboxed(
                [*argv[:2], argv[2].replace(_WITH_EGRESS, ""), *argv[3:]], **options
            )
        marker = secrets.token_hex(12)
        with self._proxy.command(marker):
            return run_sandboxed(
                [*argv[:2], argv[2].replace(_MARKER, marker), *argv[3:]], **options
            )

    def close(self) -> None:
        if self._proxy is not None:
            self._proxy.close()

    def _state_after(self, said: bytes | None, cwd: str) -> tuple[BashState, str]:
        """The state the command's shell left on its channel (and a note for its stderr when
        it cannot be kept); the state as it was, in ``cwd``, when it left none."""
        if said is None:
            return replace(self._state, cwd=cwd), (
                f"[the shell's state is over {STATE_BYTES} bytes: its working directory and "
                "exported variables were not kept]\n"
            )
        if said.count(b"\0") < 2:  # killed before its EXIT trap ran: the state stays as it was
            return replace(self._state, cwd=cwd), ""
        *_, ended_in, exports = said.split(b"\0")
        try:
            text = exports.decode("utf-8")
        except UnicodeDecodeError:  # bash quotes what is not printable: not its own output
            text = self._state.exports
        try:
            path = self._checked_cwd(ended_in.decode("utf-8").removesuffix("\n"), cwd)
        except (UnicodeDecodeError, BashInputError):
            path = cwd  # a name that is not UTF-8, or it left the writable mounts
        return BashState(cwd=path, exports=text), ""

    def _checked_cwd(self, asked: str, current: str) -> str:
        if "\0" in asked:
            raise BashInputError("bash input cwd must not contain NUL bytes.")
        path = posixpath.normpath(posixpath.join(current, asked))
        if len(path.encode("utf-8", "surrogateescape")) > _PATH_MAX or any(
            len(part.encode("utf-8", "surrogateescape")) > _NAME_MAX for part in path.split("/")
        ):
            raise BashInputError(
                f"cwd is too long ({len(path)} characters; at most {_PATH_MAX} bytes, "
                f"{_NAME_MAX} per name)."
            )
        writable = [m.target for m in self.mounts if m.writable]
        if not any(path == target or path.startswith(target + "/") for target in writable):
            shown = ", ".join(writable) or "none"
            raise BashInputError(
                f"cwd must be inside a writable mount ({shlex.quote(asked)} is not; "
                f"writable: {shown})."
            )
        return path

    def _make_dirs(self, path: str) -> None:
        """Make ``path`` (inside a writable mount) on the host, one folder at a time, never
        through a link (:mod:`little_dist.sandbox.writable`): a link the sandbox left must not
        lead the worker out; where a name on the way is not a folder, nothing more is made."""
        for mount in sorted(self.mounts, key=lambda m: len(m.target), reverse=True):
            if mount.writable and (path == mount.target or path.startswith(mount.target + "/")):
                with WritableFolder(mount.source) as folder:
                    folder.make_folders(path[len(mount.target) :].strip("/"))
                return

    def _hidden(self) -> tuple[str, ...]:
        hidden: list[str] = []
        if not self.capabilities.python:
            hidden += _PYTHON
        if not self.capabilities.javascript:
            hidden += _JAVASCRIPT
        return tuple(sorted({path for pattern in hidden for path in glob.glob(pattern)}))
