"""Watch one running command to its end: its output, its wall clock, its disk, its cgroup.

One loop in the calling thread polls the command's pipes, its process (a ``pidfd``) and the
clock; no reader thread is left blocked on a pipe that a descendant of the command still
holds. The command is ended (every process of it: its cgroup's ``cgroup.kill`` or a SIGKILL to
each process it lists; the sandbox's PID namespace, by its first process; the process group)

* at ``wall_seconds`` (``stopped: "timeout"``);
* past ``output_kill_bytes`` of dropped output (``"output"``);
* when its writable mounts pass ``disk_bytes`` or ``disk_files`` (or what they held when it
  started, if that was more: a command may always clean up), or cannot be measured
  (``"disk"``: :mod:`little_dist.sandbox.disk`, every :data:`WATCH_EVERY` seconds, more often
  past half the bound, less often for a large tree);
* in a cgroup: when the kernel killed one of its processes for want of memory (``"memory"``)
  or its processes together used ``cpu_seconds`` (``"cpu"``);
* when its first process ends: what it left running is ended with it;
* when the step that runs it is told to stop (its run cancelled or past its deadline, its
  lease lost): :data:`STOP`, the caller's ``cancelled()``, is looked at every
  :data:`WATCH_EVERY` seconds (``"cancelled"``).

After a kill the loop reads what is still in the pipes for at most :data:`GRACE` seconds, then
closes them and returns: a command returns at its wall limit (plus that grace) however its
processes are arranged.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from little_dist.sandbox.cgroups import CommandCgroup
from little_dist.sandbox.disk import (
    CHILDREN_LISTED,
    descendants,
    disk_use,
    own_proc,
    unlinked_open_bytes,
)
from little_dist.sandbox.limits import SandboxLimits

__all__ = ["GRACE", "STOP", "WATCH_EVERY", "Outcome", "Running", "supervise"]

#: How long after a kill the pipes are still read before they are closed.
GRACE: Final = 1.0
#: How often the disk and the cgroup are looked at (less often when a walk takes long).
WATCH_EVERY: Final = 0.05
_CHUNK: Final = 65536
#: Whether the command's caller must stop (set around a tool call by the harness: the
#: attempt's ``cancelled()``); ``None``: nothing to watch.
STOP: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "little_sandbox_stop", default=None
)


@dataclass
class Running:
    """A started command: the parent's ends of its pipes, and what else it can be ended by."""

    process: subprocess.Popen[bytes]
    stdin: int
    stdout: int
    stderr: int
    #: bubblewrap's ``--json-status-fd`` (names the sandbox's first process), if any
    status: int | None
    group: CommandCgroup | None
    writable: Sequence[Path]
    #: what the writable mounts took before it started: its to keep (an earlier command's
    #: overshoot, say), so the disk bound stops growth past it, never a clean-up
    disk_before: int = 0


@dataclass
class _Stream:
    keep: int
    kill_past: int
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def add(self, chunk: bytes) -> bool:
        """Keep what fits; True when the dropped part passes the kill bound."""
        room = max(self.keep - len(self.kept), 0)
        self.kept += chunk[:room]
        self.dropped += max(len(chunk) - room, 0)
        return self.dropped > self.kill_past


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the command ended: its status as ``wait`` gives it (negative: a signal), what it
    printed, why it was stopped and a line saying so for the model (or None)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_dropped: int
    stderr_dropped: int
    stopped: str | None
    note: str | None


class _Supervisor:
    def __init__(self, running: Running, stdin: bytes, limits: SandboxLimits) -> None:
        self.r = running
        self.limits = limits
        self.out = _Stream(limits.output_bytes, limits.output_kill_bytes)
        self.err = _Stream(limits.output_bytes, limits.output_kill_bytes)
        self.poller = select.poll()
        self.open: dict[int, _Stream] = {running.stdout: self.out, running.stderr: self.err}
        self.pending = memoryview(stdin)
        self.exited = False
        self.stopped: str | None = None
        self.note: str | None = None
        self.killed_at: float | None = None
        self.pidfd: int | None = None
        self.sandbox_init: int | None = None  # pidfd of the PID namespace's first process
        self.status_text = b""
        self.status_open = False
        self.devices = {os.stat(p).st_dev for p in running.writable if os.path.isdir(p)}
        self.sandbox_ns: str | None = None  # its PID namespace (/proc/<pid>/ns/pid)
        self.sandbox_pid: int | None = None  # its pid here
        self.see_pids = own_proc()
        self.near = False  # past half the disk bound at the last look
        self.disk_bytes = max(limits.disk_bytes, running.disk_before)
        self.disk_files = limits.disk_files
        self.stop = STOP.get()

    def run(self, started: float) -> Outcome:
        r = self.r
        for fd in self.open:
            self.poller.register(fd, select.POLLIN)
        if self.pending:
            os.set_blocking(r.stdin, False)
            self.poller.register(r.stdin, select.POLLOUT)
        else:
            self._close_stdin()
        with contextlib.suppress(OSError):
            self.pidfd = os.pidfd_open(r.process.pid)
            self.poller.register(self.pidfd, select.POLLIN)
        if r.status is not None:
            self.poller.register(r.status, select.POLLIN)
            self.status_open = True
        try:
            self._loop(started + self.limits.wall_seconds, started + WATCH_EVERY)
        finally:
            self._close_all()
        returncode = r.process.poll()
        if returncode is None:
            try:
                returncode = r.process.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                returncode = -signal.SIGKILL  # stuck in the kernel; reaped later by Popen
        if self.stopped is None and r.group is not None and r.group.oom_kills():
            self._stop("memory", kill=False)  # it ended before a look saw it: say why
        return Outcome(
            returncode,
            bytes(self.out.kept),
            bytes(self.err.kept),
            self.out.dropped,
            self.err.dropped,
            self.stopped,
            self.note,
        )

    def _loop(self, deadline: float, next_watch: float) -> None:
        while True:
            now = time.monotonic()
            if not self.exited and self._first_process_ended():
                self.exited = True
                self._kill()  # what it left running ends with it
            if self.exited and not self.open:
                return
            if self.killed_at is None and now >= deadline:
                self._stop("timeout")
            elif self.killed_at is None and self.stop is not None and self.stop():
                self._stop("cancelled")
            if self.killed_at is not None:
                if now >= self.killed_at + GRACE:
                    return
                wake = self.killed_at + GRACE
            else:
                if now >= next_watch:
                    cost = self._watch()
                    # Closer to the bound, closer looks: less written past it before the kill.
                    every = WATCH_EVERY / 5 if self.near else WATCH_EVERY
                    next_watch = time.monotonic() + max(every, 10 * cost)
                    continue
                wake = min(deadline, next_watch)
            if self.pidfd is None and not self.exited:
                wake = min(wake, now + WATCH_EVERY)
            for fd, _ in self.poller.poll(max(wake - now, 0.0) * 1000):
                self._ready(fd)

    def _ready(self, fd: int) -> None:
        r = self.r
        if fd in self.open:
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                self.poller.unregister(fd)
                del self.open[fd]
                os.close(fd)
            elif self.open[fd].add(chunk) and self.killed_at is None:
                self._stop("output")
        elif fd == r.stdin:
            try:
                written = os.write(fd, self.pending[:_CHUNK])
            except BlockingIOError:
                return
            except OSError:  # it stopped reading: the rest of its input is not wanted
                written = len(self.pending)
            self.pending = self.pending[written:]
            if not self.pending:
                self._close_stdin()
        elif fd == self.pidfd:
            self.poller.unregister(fd)  # the loop's next turn sees the ending
        elif fd == r.status:
            self._read_status(fd)
            if self.sandbox_init is not None and (self.exited or self.killed_at is not None):
                self._kill()  # named only now: a bubblewrap left behind by its parent

    def _read_status(self, fd: int) -> None:
        """bubblewrap's JSON lines: the first names the sandbox's first process."""
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk or len(self.status_text) > 65536:
            self.poller.unregister(fd)
            self.status_open = False
            return
        self.status_text += chunk
        if self.sandbox_init is not None:
            return
        for line in self.status_text.split(b"\n")[:-1]:
            with contextlib.suppress(ValueError):
                said = json.loads(line)
                pid = said.get("child-pid") if isinstance(said, dict) else None
                if isinstance(pid, int) and pid > 1:
                    with contextlib.suppress(OSError):
                        self.sandbox_init = os.pidfd_open(pid)
                        self.sandbox_ns = os.readlink(f"/proc/{pid}/ns/pid")
                        self.sandbox_pid = pid
                    return

    def _first_process_ended(self) -> bool:
        """Whether the process we started has ended (not reaped yet: its pid, and so its
        process group's id, stays ours until :meth:`run` reaps it)."""
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, self.r.process.pid, flags) is not None
        except ChildProcessError:
            return True

    def _watch(self) -> float:
        """Look at the cgroup and the disk; stop the command past a limit. Returns how long
        the look took."""
        began = time.monotonic()
        group, limits = self.r.group, self.limits
        if group is not None:
            if group.oom_kills():
                return self._stop("memory")
            used = group.cpu_seconds()
            if used is not None and used > limits.cpu_seconds:
                return self._stop("cpu")
        if self.r.writable:
            use = disk_use(self.r.writable, max_entries=self.disk_files)
            held = unlinked_open_bytes(self._pids(), self.devices) if self.see_pids else 0
            if use.problem is not None:
                return self._stop("disk", use.problem)
            if use.bytes + held > self.disk_bytes:
                return self._stop("disk")
            self.near = 2 * (use.bytes + held) > self.disk_bytes
        return time.monotonic() - began

    def _pids(self) -> list[int]:
        """The command's processes: its cgroup's, else its PID namespace's (the namespace's
        first process and its descendants -- an orphan in the namespace is adopted by that
        first process, so none is missed; a look at every process of the host where the
        kernel has no ``children`` files), else none known."""
        if self.r.group is not None:
            return self.r.group.pids()
        if self.sandbox_ns is None:
            return []
        if self.sandbox_pid is not None and CHILDREN_LISTED:
            with contextlib.suppress(OSError):
                # Still the namespace's first process, not a pid reused since it ended.
                if os.readlink(f"/proc/{self.sandbox_pid}/ns/pid") == self.sandbox_ns:
                    return descendants(self.sandbox_pid)
            return []
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{name}/ns/pid") == self.sandbox_ns:
                        found.append(int(name))
        return found

    def _stop(self, reason: str, why: str | None = None, *, kill: bool = True) -> float:
        self.stopped = reason
        note = _NOTES.get(reason)
        self.note = note and note.format(limits=self.limits, why=f": {why}" if why else "")
        if kill:
            self.killed_at = time.monotonic()
            self._kill()
        return 0.0

    def _kill(self) -> None:
        r = self.r
        if r.group is not None:
            r.group.kill()
        status = r.status
        unnamed = self.sandbox_init is None and status is not None and self.status_open
        if unnamed and status is not None and select.select([status], [], [], 0)[0]:
            self._read_status(status)  # what it said since the last look may name it
        if self.sandbox_init is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.sandbox_init, signal.SIGKILL)
        if r.process.returncode is None:  # not reaped: the group id is still ours
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(r.process.pid, signal.SIGKILL)

    def _close_stdin(self) -> None:
        with contextlib.suppress(KeyError):
            self.poller.unregister(self.r.stdin)
        with contextlib.suppress(OSError):
            os.close(self.r.stdin)
        self.r.stdin = -1

    def _close_all(self) -> None:
        if self.r.stdin >= 0:
            self._close_stdin()
        for fd in [*self.open, self.pidfd, self.sandbox_init, self.r.status]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        # A closed number is soon another's (another command's pidfd, in another thread):
        # nothing may signal or read through these any more.
        self.open.clear()
        self.pidfd = self.sandbox_init = self.r.status = None
        self.status_open = False


_NOTES: Final = {
    "cancelled": "sandbox: stopped: the step was cancelled (its run was cancelled or passed its "
    "deadline)",
    "memory": "sandbox: stopped: the command passed its memory limit ({limits.memory_bytes} "
    "bytes, all its processes together)",
    "cpu": "sandbox: stopped: the command used its CPU time ({limits.cpu_seconds} s, all its "
    "processes together)",
    "disk": "sandbox: stopped: the command's files passed the disk limit "
    "({limits.disk_bytes} bytes or {limits.disk_files} files and folders){why}",
}


def supervise(running: Running, stdin: bytes, limits: SandboxLimits, started: float) -> Outcome:
    """Feed ``stdin``, collect the output and end the command at its limits (see the module's
    docstring); the pipes and descriptors in ``running`` are closed on return."""
    return _Supervisor(running, stdin, limits).run(started)
