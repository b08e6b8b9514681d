"""Run one command in the sandbox: :func:`run_sandboxed`.

The parent (a worker thread) starts ``prlimit`` (util-linux) which sets the kernel limits and
executes ``bwrap`` which builds the namespaces and runs the command. Nothing runs in the
child between ``fork`` and ``exec`` (no ``preexec_fn``), so it is safe in a threaded worker.
As root, bubblewrap keeps root's right to bind any source (no user namespace) and the
command itself runs as a user id of its own (from a range, see :func:`sandbox_user`; switched
by ``setpriv``, every capability dropped), so that the process limit counts only its
processes — the kernel never limits root's. Otherwise bubblewrap runs unprivileged in a user
namespace and the command as the worker's user, with the process limit raised by what that
user already runs.

The parent enforces the wall clock and the output caps: past ``wall_seconds`` or past
``output_kill_bytes`` of dropped output it kills the process group, and with it (bubblewrap's
``--die-with-parent``) the sandbox's PID namespace and everything in it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Final

from little_dist.errors import InvalidInputError
from little_dist.sandbox.isolation import Isolation, bwrap_path, isolation_for
from little_dist.sandbox.limits import DEFAULT_LIMITS, SandboxLimits
from little_dist.sandbox.mounts import Mount, MountError, check_mounts
from little_dist.sandbox.system import bwrap_arguments, drop_to, sandbox_environment
from little_dist.sandbox.writable import WritableFolder

__all__ = ["SandboxResult", "run_sandboxed", "sandbox_user"]

#: Sandbox user ids (as root): ``UID_BASE + n``, n cycling through ``UID_SPAN`` values.
UID_BASE: Final = 200_000
UID_SPAN: Final = 10_000
_uids = itertools.count((os.getpid() * 131) % UID_SPAN)
_uid_lock = threading.Lock()
_CHUNK: Final = 65536


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """How one command ended.

    ``exit_code`` is the command's status, ``128 + N`` when signal N ended it (as a shell
    says). ``stopped`` says why the sandbox ended it, when it did: ``"timeout"`` (wall clock),
    ``"cpu"`` (CPU time), ``"file_size"`` (a file past ``file_bytes``), ``"output"`` (a
    runaway printer); ``None`` when the command ended on its own. ``stdout``/``stderr`` hold at
    most ``output_bytes`` each, then a truncation marker naming what was dropped.
    """

    exit_code: int
    stdout: str
    stderr: str
    stopped: str | None
    isolation: Isolation
    duration_ms: float
    stdout_dropped: int = 0
    stderr_dropped: int = 0


def sandbox_user() -> int | None:
    """The user id the next command runs as: its own when we are root, else None (ours)."""
    if os.geteuid() != 0:
        return None
    with _uid_lock:
        return UID_BASE + next(_uids) % UID_SPAN


def run_sandboxed(
    argv: Sequence[str],
    *,
    mounts: Sequence[Mount] = (),
    cwd: str = "/",
    env: Mapping[str, str] | None = None,
    stdin: bytes = b"",
    limits: SandboxLimits = DEFAULT_LIMITS,
    hide: Sequence[str] = (),
    settings_env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> SandboxResult:
    """Run ``argv`` in the sandbox with ``mounts`` bound in and ``limits`` enforced.

    ``env`` adds variables to the stripped environment; ``cwd`` is a path inside the
    sandbox. ``hide`` names system files the command must not see (an interpreter a
    capability turns off; each is covered by an empty file). ``settings_env`` (default: the
    process environment) is where the isolation settings are read. ``pass_fds`` are
    descriptors the command inherits, at the same numbers (a pipe it reports on). Raises
    :class:`~little_dist.sandbox.isolation.SandboxUnavailableError` when the kernel sandbox
    cannot run and no weaker mode was opted into.
    """
    if not argv or not all(isinstance(part, str) and "\0" not in part for part in argv):
        raise InvalidInputError("sandbox command: expected a non-empty list of strings")
    check_mounts(mounts)
    user = sandbox_user()
    isolation = isolation_for(bwrap_path(settings_env), user, settings_env)
    if user is not None:
        for mount in mounts:
            _give(mount, user) if mount.writable else _check_readable(mount)
    environment = sandbox_environment(env, home=_home(mounts, cwd))
    if isolation == "namespaces":
        bwrap = bwrap_path(settings_env)
        assert bwrap is not None  # isolation_for said namespaces work
        arguments = bwrap_arguments(mounts, cwd, environment, limits, user, hide)
        command = [bwrap, *arguments, "--", *drop_to(user), *argv]
        workdir = None
    else:
        command = [*drop_to(user), *argv]
        workdir = _host_path(mounts, cwd)
    started = time.monotonic()
    process = subprocess.Popen(
        [*_prlimit(limits, user), "--", *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=environment if isolation == "rlimits" else {"PATH": "/usr/bin:/bin"},
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    return _supervise(process, stdin, limits, isolation, started)


def _supervise(
    process: subprocess.Popen[bytes],
    stdin: bytes,
    limits: SandboxLimits,
    isolation: Isolation,
    started: float,
) -> SandboxResult:
    runaway = threading.Event()
    out = _Capture(process, process.stdout, limits, runaway)
    err = _Capture(process, process.stderr, limits, runaway)
    feeder = threading.Thread(target=_feed, args=(process.stdin, stdin), daemon=True)
    for thread in (out.thread, err.thread, feeder):
        thread.start()
    stopped: str | None = None
    try:
        process.wait(timeout=max(0.0, started + limits.wall_seconds - time.monotonic()))
    except subprocess.TimeoutExpired:
        stopped = "timeout"
        _kill(process)
    code = process.wait()
    out.thread.join()
    err.thread.join()
    exit_code = 128 - code if code < 0 else code
    if stopped is None and runaway.is_set():
        stopped = "output"
    if stopped is None:
        stopped = {128 + signal.SIGXCPU: "cpu", 128 + signal.SIGXFSZ: "file_size"}.get(exit_code)
    return SandboxResult(
        exit_code=exit_code,
        stdout=out.text(),
        stderr=err.text(),
        stopped=stopped,
        isolation=isolation,
        duration_ms=(time.monotonic() - started) * 1000,
        stdout_dropped=out.dropped,
        stderr_dropped=err.dropped,
    )


class _Capture:
    """Read one pipe to its end, keeping ``output_bytes`` and counting the rest."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        pipe: IO[bytes] | None,
        limits: SandboxLimits,
        runaway: threading.Event,
    ) -> None:
        self.kept = bytearray()
        self._process = process
        self.dropped = 0
        self._pipe = pipe
        self._limits = limits
        self._runaway = runaway
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        if self._pipe is None:
            return
        with self._pipe:
            while chunk := os.read(self._pipe.fileno(), _CHUNK):
                room = self._limits.output_bytes - len(self.kept)
                self.kept += chunk[: max(room, 0)]
                self.dropped += max(len(chunk) - max(room, 0), 0)
                if self.dropped > self._limits.output_kill_bytes and not self._runaway.is_set():
                    self._runaway.set()
                    _kill(self._process)

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[output truncated: {self.dropped} more bytes dropped]"
        return text


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    if pipe is None:
        return
    try:
        with pipe:
            if data:
                pipe.write(data)
    except (BrokenPipeError, OSError):
        pass  # the command did not read all its input


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _prlimit(limits: SandboxLimits, user: int | None) -> list[str]:
    processes = limits.processes if user is not None else limits.processes + _tasks_of(os.getuid())
    return [
        "prlimit",
        # soft then hard: SIGXCPU at the limit (a status we can name), SIGKILL a second later
        f"--cpu={int(limits.cpu_seconds)}:{int(limits.cpu_seconds) + 1}",
        f"--{'as' if limits.memory_kind == 'address_space' else 'data'}={limits.memory_bytes}",
        f"--nproc={int(processes)}",
        f"--nofile={int(limits.open_files)}",
        f"--fsize={int(limits.file_bytes)}",
        "--core=0",
    ]


def _tasks_of(uid: int) -> int:
    """Threads the user runs now (RLIMIT_NPROC counts them all, the worker's included)."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            count += int(fields.get("Threads", "1").strip() or 1)
    return count


def _give(mount: Mount, user: int) -> None:
    """Make a writable mount the sandbox user's (as root), files inside included: a walk
    that never follows what an earlier command left there (:mod:`.writable`)."""
    with WritableFolder(mount.source) as folder:
        folder.chown_all(user, user)


def _check_readable(mount: Mount) -> None:
    """A read-only mount's folder must be open to others: the command runs as its own user."""
    mode = mount.source.stat().st_mode
    if mode & 0o005 != 0o005:
        raise MountError(
            f"mount {mount.target}: {mount.source} is not readable by the sandbox's user "
            f"(mode {mode & 0o777:04o}); make it world-readable (chmod o+rx) or mount a copy"
        )


def _home(mounts: Sequence[Mount], cwd: str) -> str:
    writable = [mount.target for mount in mounts if mount.writable]
    return writable[0] if writable else "/tmp"


def _host_path(mounts: Sequence[Mount], path: str) -> str | None:
    """Where ``path`` (inside) is on the host, for the ``rlimits`` mode (no mount namespace)."""
    for mount in sorted(mounts, key=lambda m: len(m.target), reverse=True):
        if path == mount.target or path.startswith(mount.target + "/"):
            return str(mount.source) + path[len(mount.target) :]
    return None
