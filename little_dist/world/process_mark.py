"""Which process holds a lease, told so that another process on the same machine can see it
is gone: the *process mark* a holder ends with.

A lease held by a process that was killed stays taken until it expires (``lease_ttl``, 15 s
for ``little run``): a resume after a crash waited that long for its own dead runner. A
holder made by :func:`marked` ends with ``~PID.START.PIDNS.BOOT`` (a holder made from it
may go on after a ``:``): the process id, its start
time (clock ticks since boot, ``/proc/PID/stat`` field 22: a pid reused later has another),
its pid namespace (``/proc/self/ns/pid``) and the machine's boot id (the first 12 digits of
``/proc/sys/kernel/random/boot_id``). :func:`holder_is_dead` says a holder's process is gone
only when it can know: same boot and same pid namespace as this process, and no process with
that pid and start time. Another machine, another container, another boot, or a holder with
no mark: it cannot tell, and the lease runs to its expiry as before.

:class:`~little_dist.world.local.LocalWorld` (one machine's SQLite file) takes over a live
lease whose holder is dead; the fleet's Redis world never does (its holders are on other
machines). Linux only; elsewhere nothing is marked and nothing is judged dead.
"""

from __future__ import annotations

import os
import re
from typing import Final

__all__ = ["holder_is_dead", "marked", "process_mark"]

_MARK: Final = re.compile(r"~(\d+)\.(\d+)\.(\d+)\.([0-9a-f]{12})(?=$|:)")
_cached: tuple[int, str] | None = None


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields after its last ')'.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall
    except (IndexError, ValueError):
        return None


def _machine() -> tuple[int, str] | None:
    """This process's pid namespace and the machine's boot id, or ``None`` off Linux."""
    try:
        pidns = os.stat("/proc/self/ns/pid").st_ino
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip().replace("-", "")[:12]
    except OSError:
        return None
    return (pidns, boot) if re.fullmatch(r"[0-9a-f]{12}", boot) else None


def process_mark() -> str:
    """This process's mark (``~PID.START.PIDNS.BOOT``; ``""`` where there is none). Computed
    again in a forked child, whose pid differs."""
    global _cached
    pid = os.getpid()
    if _cached is not None and _cached[0] == pid:
        return _cached[1]
    machine = _machine()
    start = _start_time(pid)
    mark = "" if machine is None or start is None else f"~{pid}.{start}.{machine[0]}.{machine[1]}"
    _cached = (pid, mark)
    return mark


def marked(holder: str) -> str:
    """``holder`` with this process's mark."""
    return holder + process_mark()


def holder_is_dead(holder: str) -> bool:
    """True only when ``holder``'s mark names a process of this machine, boot and pid
    namespace that no longer runs (no such pid, or a pid with another start time)."""
    found = _MARK.search(holder)
    if found is None:
        return False
    machine = _machine()
    if machine is None or (int(found[3]), found[4]) != machine:
        return False
    return _start_time(int(found[1])) != int(found[2])
