"""The test session's reaper: no process a test started outlives the session. No tests here.

``python tests/reaper.py PID MARK`` is started by :mod:`tests.session_lifetime` in the pytest
process that runs the session (PID: the xdist controller, or the only pytest process), in a
session of its own, so that neither a terminal's Ctrl-C nor a kill of the test run's process
group reaches it. It only reads ``/proc`` and sends signals (standard library only):

* Every :data:`INTERVAL` seconds it adds every new descendant of PID to the processes it
  tracks, by pid and start time. A tracked process stays tracked when its parent dies and it
  is re-parented out of PID's tree (a worker's pool children, a daemon that forked away):
  what the session started is remembered, not looked up at the end.
* A process that forks and leaves at once (a daemon's double fork) is re-parented before
  any look sees it; it is found by MARK, an environment variable (:data:`MARK_ENV`) PID set
  for the session, which every process inherits unless it is given an environment of its
  own.
* Once PID has ended, however it ended (finished, SIGINT, SIGTERM, SIGKILL), it stops every
  tracked or marked process still alive with SIGSTOP (and the process groups they lead), so
  none can start another, adds the children they had, then sends SIGKILL to all of them;
  again until none is left (at most :data:`GIVE_UP_AFTER` seconds). Then it exits.

It names each process it had to kill on stderr: after a session that finished normally,
that is a test's leak (its fixtures should have stopped it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections import defaultdict
from typing import NamedTuple

__all__ = [
    "GIVE_UP_AFTER",
    "INTERVAL",
    "MARK_ENV",
    "Proc",
    "descendants",
    "main",
    "marked",
    "snapshot",
]

#: The environment variable that marks the session's processes (its value: MARK).
MARK_ENV = "PYTEST_LITTLE_SESSION"

#: How often the process tree is read (seconds): a process born and re-parented away
#: within one interval is not seen (nothing the tests start does that).
INTERVAL = 0.2
#: How long the last round may go on killing (a process in uninterruptible sleep).
GIVE_UP_AFTER = 15.0


class Proc(NamedTuple):
    ppid: int
    pgid: int
    start: int  # clock ticks after boot: with the pid, a process's identity
    state: str


def snapshot() -> dict[int, Proc]:
    """Every process now, from ``/proc/PID/stat``."""
    found: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                text = stat.read().decode("ascii", "replace")
        except OSError:  # it ended meanwhile
            continue
        fields = text[text.rindex(")") + 2 :].split()
        found[int(name)] = Proc(int(fields[1]), int(fields[2]), int(fields[19]), fields[0])
    return found


def descendants(roots: set[int], procs: dict[int, Proc]) -> set[int]:
    """Every process in ``procs`` below one of ``roots`` (the roots not included)."""
    children: dict[int, list[int]] = defaultdict(list)
    for pid, proc in procs.items():
        children[proc.ppid].append(pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found - roots


def marked(mark: str, procs: dict[int, Proc]) -> set[int]:
    """The processes in ``procs`` whose environment holds ``MARK_ENV=mark``."""
    needle = f"{MARK_ENV}={mark}".encode()
    found: set[int] = set()
    for pid in procs:
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if needle in environ.read().split(b"\0"):
                    found.add(pid)
        except OSError:  # gone, or another user's
            continue
    return found


def _track(tracked: dict[int, int], roots: set[int], procs: dict[int, Proc]) -> None:
    for pid in list(tracked):
        proc = procs.get(pid)
        if proc is None or proc.start != tracked[pid] or proc.state in "ZX":
            del tracked[pid]
    for pid in descendants(roots | set(tracked), procs) - {os.getpid()}:
        tracked.setdefault(pid, procs[pid].start)


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        return "?"


def _signal_all(tracked: dict[int, int], procs: dict[int, Proc], sig: int) -> None:
    for pid in tracked:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    # A group a tracked process leads: its members too (a child forked after the last look).
    for pgid in {procs[pid].pgid for pid in tracked if pid in procs} & set(tracked):
        with contextlib.suppress(OSError):
            os.killpg(pgid, sig)


def reap(target: int, mark: str, tracked: dict[int, int]) -> list[str]:
    """Kill every tracked or marked process (and what it started) still alive; what was
    killed."""
    killed: dict[int, str] = {}
    deadline = time.monotonic() + GIVE_UP_AFTER
    while time.monotonic() < deadline:
        procs = snapshot()
        for pid in marked(mark, procs) - {os.getpid()}:
            tracked.setdefault(pid, procs[pid].start)
        _track(tracked, {target}, procs)
        if not tracked:
            break
        _signal_all(tracked, procs, signal.SIGSTOP)
        procs = snapshot()
        _track(tracked, {target}, procs)
        for pid in tracked:
            killed.setdefault(pid, _command(pid))
        _signal_all(tracked, procs, signal.SIGKILL)
        time.sleep(0.05)
    return [f"{pid} {command}" for pid, command in sorted(killed.items())]


def main(argv: list[str]) -> int:
    target, mark = int(argv[1]), argv[2]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # nothing may end the reaper before its work
    tracked: dict[int, int] = {}
    while os.getppid() == target:
        _track(tracked, {target}, snapshot())
        time.sleep(INTERVAL)
    leftovers = reap(target, mark, tracked)
    if leftovers:
        with contextlib.suppress(OSError):
            print(
                f"tests/reaper.py: killed {len(leftovers)} process(es) the test session "
                f"(pid {target}) left running:\n  " + "\n  ".join(leftovers),
                file=sys.stderr,
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
