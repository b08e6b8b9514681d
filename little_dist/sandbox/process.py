"""Run one command in the sandbox: :func:`run_sandboxed`.

The parent (a worker thread) starts the command as a chain of ``exec`` s, so that nothing runs
in the child between ``fork`` and ``exec`` (no ``preexec_fn``; safe in a threaded worker):
``/bin/sh`` writes its own pid into the command's cgroups and ``exec`` s ``prlimit``
(util-linux), which sets the kernel's per-process limits and ``exec`` s ``bwrap``, which builds
the namespaces and runs the command (:mod:`little_dist.sandbox.cgroups`: where there is no
cgroup, the first step is left out). As root, bubblewrap keeps root's right to bind any source
(no user namespace) and the command itself runs as a user id no other live command on the host
has (:mod:`little_dist.sandbox.uids`; switched by ``setpriv``, every capability dropped), so
that the process limit counts only its processes — the kernel never limits root's — and its
pipes are given to that user (``/dev/stdout`` and ``/dev/stderr`` open). Otherwise bubblewrap
runs unprivileged in a user namespace and the command as the worker's user, with the process
limit raised by what that user already runs (a cgroup's ``pids.max`` is the command's own).

The parent enforces the wall clock, the output caps, the disk and (in a cgroup) the CPU time
of all the command's processes, and ends the whole command however its processes are arranged
(:mod:`little_dist.sandbox.supervise`). Each command's cgroups are removed when it ends.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from little_dist.errors import InvalidInputError
from little_dist.sandbox.cgroups import (
    ENTER_FAILED,
    ENTER_MARKER,
    CommandCgroup,
    LimitsMode,
    cgroups_for,
)
from little_dist.sandbox.disk import disk_use
from little_dist.sandbox.isolation import (
    Isolation,
    SandboxUnavailableError,
    bwrap_path,
    isolation_for,
)
from little_dist.sandbox.limits import DEFAULT_LIMITS, SandboxLimits
from little_dist.sandbox.mounts import Mount, MountError, check_mounts
from little_dist.sandbox.supervise import Outcome, Running, supervise
from little_dist.sandbox.system import bwrap_arguments, drop_to, sandbox_environment
from little_dist.sandbox.uids import leased_uid
from little_dist.sandbox.writable import WritableFolder

__all__ = ["SandboxResult", "run_sandboxed"]

_STOPPED_BY_SIGNAL: Final = {128 + 24: "cpu", 128 + 25: "file_size"}  # SIGXCPU, SIGXFSZ


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """How one command ended.

    ``exit_code`` is the command's status, ``128 + N`` when signal N ended it (as a shell
    says). ``stopped`` says why the sandbox ended it, when it did: ``"timeout"`` (wall clock),
    ``"cpu"`` (CPU time), ``"memory"`` (its cgroup's memory: the kernel killed a process of it
    for want of memory), ``"disk"`` (its writable mounts' files passed ``disk_bytes`` or
    ``disk_files``), ``"file_size"`` (a file past ``file_bytes``), ``"output"`` (a runaway
    printer), ``"cancelled"`` (its step was told to stop:
    :data:`~little_dist.sandbox.supervise.STOP`); ``None`` when the command ended on its own.
    ``stdout``/``stderr`` hold at most
    ``output_bytes`` each, then a truncation marker naming what was dropped; a command the
    sandbox stopped for memory, disk or CPU time ends its ``stderr`` with a line saying so.
    ``limits`` names what held the command's memory, processes and CPU: ``"cgroup2"`` or
    ``"cgroup1"`` (the whole command), or ``"rlimits"`` (each process; see
    :mod:`little_dist.sandbox.cgroups`).
    """

    exit_code: int
    stdout: str
    stderr: str
    stopped: str | None
    isolation: Isolation
    duration_ms: float
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    limits: LimitsMode = "rlimits"


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
    process environment) is where the isolation and limits settings are read. ``pass_fds``
    are descriptors the command inherits, at the same numbers (a pipe it reports on). Raises
    :class:`~little_dist.sandbox.isolation.SandboxUnavailableError` when the kernel sandbox
    cannot run and no weaker mode was opted into.
    """
    if not argv or not all(isinstance(part, str) and "\0" not in part for part in argv):
        raise InvalidInputError("sandbox command: expected a non-empty list of strings")
    check_mounts(mounts)
    with leased_uid() as user:
        isolation = isolation_for(bwrap_path(settings_env), user, settings_env)
        cgroups = cgroups_for(settings_env)
        if user is not None:
            for mount in mounts:
                _give(mount, user) if mount.writable else _check_readable(mount)
        environment = sandbox_environment(env, home=_home(mounts, cwd))
        group = None if cgroups is None else cgroups.command(limits)
        try:
            return _run(
                argv,
                mounts,
                cwd,
                environment,
                stdin,
                limits,
                hide,
                settings_env,
                isolation,
                user,
                group,
                pass_fds,
            )
        finally:
            if group is not None:
                group.close()


def _run(
    argv: Sequence[str],
    mounts: Sequence[Mount],
    cwd: str,
    environment: dict[str, str],
    stdin: bytes,
    limits: SandboxLimits,
    hide: Sequence[str],
    settings_env: Mapping[str, str] | None,
    isolation: Isolation,
    user: int | None,
    group: CommandCgroup | None,
    pass_fds: Sequence[int],
) -> SandboxResult:
    opened: list[int] = []

    def pipe() -> tuple[int, int]:
        read, write = os.pipe2(os.O_CLOEXEC)
        opened.extend((read, write))
        return read, write

    status: tuple[int, int] | None = None
    try:
        (in_r, in_w), (out_r, out_w), (err_r, err_w) = pipe(), pipe(), pipe()
        if user is not None:  # /dev/stdin, /dev/stdout and /dev/stderr open for its user
            for fd in (in_r, out_w, err_w):
                os.fchown(fd, user, user)
        if isolation == "namespaces":
            bwrap = bwrap_path(settings_env)
            assert bwrap is not None  # isolation_for said namespaces work
            arguments = bwrap_arguments(mounts, cwd, environment, limits, user, hide)
            if group is None:  # bubblewrap names the PID namespace's first process: its kill
                status = pipe()
                arguments = ["--json-status-fd", str(status[1]), *arguments]
            command = [bwrap, *arguments, "--", *drop_to(user), *argv]
            workdir = None
        else:
            command = [*drop_to(user), *argv]
            workdir = _host_path(mounts, cwd)
        prefix = [] if group is None else group.enter_prefix()
        writable = [mount.source for mount in mounts if mount.writable]
        before = disk_use(writable, max_entries=limits.disk_files) if writable else None
        started = time.monotonic()
        process = subprocess.Popen(
            [*prefix, *_prlimit(limits, user, group), "--", *command],
            stdin=in_r,
            stdout=out_w,
            stderr=err_w,
            pass_fds=(*pass_fds, *(() if status is None else (status[1],))),
            cwd=workdir,
            env=environment if isolation == "rlimits" else {"PATH": "/usr/bin:/bin"},
            start_new_session=True,
        )
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise
    for fd in (in_r, out_w, err_w, *(() if status is None else (status[1],))):
        os.close(fd)  # the child's ends: it has them now
    running = Running(
        process,
        in_w,
        out_r,
        err_r,
        None if status is None else status[0],
        group,
        writable,
        0 if before is None or before.problem else before.bytes,
    )
    outcome = supervise(running, stdin, limits, started)
    return _result(outcome, isolation, group, started)


def _result(
    outcome: Outcome, isolation: Isolation, group: CommandCgroup | None, started: float
) -> SandboxResult:
    code = outcome.returncode
    exit_code = 128 - code if code < 0 else code
    stderr = _text(outcome.stderr, outcome.stderr_dropped)
    if exit_code == ENTER_FAILED and group is not None and ENTER_MARKER in stderr.splitlines():
        raise SandboxUnavailableError(f"{ENTER_MARKER}: {stderr.splitlines()[0]}")
    stopped = outcome.stopped or _STOPPED_BY_SIGNAL.get(exit_code)
    if outcome.note:
        stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + outcome.note + "\n"
    return SandboxResult(
        exit_code=exit_code,
        stdout=_text(outcome.stdout, outcome.stdout_dropped),
        stderr=stderr,
        stopped=stopped,
        isolation=isolation,
        duration_ms=(time.monotonic() - started) * 1000,
        stdout_dropped=outcome.stdout_dropped,
        stderr_dropped=outcome.stderr_dropped,
        limits="rlimits" if group is None else group.mode,
    )


def _text(kept: bytes, dropped: int) -> str:
    text = kept.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[output truncated: {dropped} more bytes dropped]"
    return text


def _prlimit(limits: SandboxLimits, user: int | None, group: CommandCgroup | None) -> list[str]:
    if user is not None:  # its own user id: the count is the command's own
        processes: int | None = limits.processes
    elif group is None:  # the worker's user: what that user runs now counts too
        processes = limits.processes + _tasks_of(os.getuid())
    else:  # the worker's user, in a cgroup: pids.max counts the command's own
        processes = None
    return [
        "prlimit",
        # soft then hard: SIGXCPU at the limit (a status we can name), SIGKILL a second later
        f"--cpu={int(limits.cpu_seconds)}:{int(limits.cpu_seconds) + 1}",
        f"--{'as' if limits.memory_kind == 'address_space' else 'data'}={limits.memory_bytes}",
        *([] if processes is None else [f"--nproc={int(processes)}"]),
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
