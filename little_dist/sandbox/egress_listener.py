"""Where the egress proxy listens: inside a command's sandbox, opened from outside.

:class:`~little_dist.sandbox.egress.EgressProxy` asks :func:`find_sandbox` for a process in
the command's sandbox (a descendant, in another network namespace, of the child of the thread
that runs the command whose command line holds the command's marker), then
:func:`listener_in` for a listening socket on ``127.0.0.1:PROXY_PORT`` in that process's
network namespace: as root a short-lived thread enters the namespace (``setns``), binds and
comes back; otherwise a short-lived helper process (the worker's own interpreter) joins the
sandbox's user and network namespaces, binds, and hands the socket back over a Unix socket.
Nothing here runs inside the sandbox after the socket is made.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Final

__all__ = ["PROXY_PORT", "find_sandbox", "listener_in"]

#: Where the proxy listens inside the sandbox.
PROXY_PORT: Final = 3128
_SANDBOX_DEPTH: Final = 4  # how far below the command's process its sandbox may be
_CLONE_NEWNET: Final = 0x40000000
_CLONE_NEWUSER: Final = 0x10000000
_NS_GET_USERNS: Final = 0xB701  # ioctl: the user namespace that owns a namespace


def find_sandbox(marker: str, caller: str, stop: threading.Event) -> int | None:
    """The pid of a process inside the command's sandbox, or None when the command ended
    first: a descendant, in another network namespace than ours, of a child of the thread
    ``caller`` (``PID/task/TID`` as /proc numbers it) whose command line holds ``marker``
    (bubblewrap, or whatever wraps it)."""
    ours = _namespace("self", "net")
    needle = marker.encode()
    while not stop.is_set():
        level = [pid for pid in _children(caller) if needle in _cmdline(pid)]
        for _ in range(_SANDBOX_DEPTH):
            for pid in level:
                with contextlib.suppress(OSError):
                    if _namespace(str(pid), "net") != ours:
                        return pid
            level = [child for pid in level for child in _children(f"{pid}/task/{pid}")]
        stop.wait(0.001)
    return None


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _children(task: str) -> list[int]:
    """The children of ``task`` (``PID/task/TID``); where the kernel does not list them, every
    child of its process."""
    try:
        with open(f"/proc/{task}/children", encoding="ascii") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        pass
    except OSError:
        return []
    parent = int(task.partition("/")[0])
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with (
                contextlib.suppress(OSError, ValueError, IndexError),
                open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f,
            ):
                if int(f.read().rpartition(")")[2].split()[1]) == parent:
                    found.append(int(entry.name))
    return found


def _namespace(pid: str, kind: str) -> tuple[int, int]:
    found = os.stat(f"/proc/{pid}/ns/{kind}")
    return found.st_dev, found.st_ino


def _bind_listener() -> socket.socket:
    """The listener on 127.0.0.1:PROXY_PORT, in this thread's network namespace (loopback may
    still be coming up: bubblewrap raises it as the sandbox starts)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 5
        while True:
            try:
                listener.bind(("127.0.0.1", PROXY_PORT))
                break
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                    raise
                time.sleep(0.002)
        listener.listen(128)
    except BaseException:
        listener.close()
        raise
    return listener


def listener_in(pid: int) -> socket.socket:
    """A listening socket in ``pid``'s network namespace: made by a thread that enters it when
    we may (root, same user namespace), else by a helper process (see the module docstring)."""
    if os.geteuid() == 0 and _network_owner(pid) == _namespace("self", "user"):
        with contextlib.suppress(PermissionError):
            return _listener_by_thread(pid)
    return _listener_by_helper(pid)


def _network_owner(pid: int) -> tuple[int, int]:
    """The user namespace that owns ``pid``'s network namespace."""
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        owner = fcntl.ioctl(net, _NS_GET_USERNS)
    finally:
        os.close(net)
    try:
        found = os.fstat(owner)
    finally:
        os.close(owner)
    return found.st_dev, found.st_ino


def _listener_by_thread(pid: int) -> socket.socket:
    found: list[socket.socket] = []
    failed: list[BaseException] = []

    def work() -> None:  # a thread of its own: it is in the sandbox's namespace for a moment
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
        try:
            if libc.setns(target, _CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                raise (PermissionError if code == errno.EPERM else OSError)(
                    code, f"setns into the sandbox's network: {os.strerror(code)}"
                )
            try:
                found.append(_bind_listener())
            finally:
                if libc.setns(own, _CLONE_NEWNET) != 0:
                    for listener in found:
                        listener.close()
                    found.clear()
                    raise OSError(ctypes.get_errno(), "setns back to the worker's network")
        except BaseException as exc:
            failed.append(exc)
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=work, name="egress-listen", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return found[0]


#: The helper process: ``python -I -S -c HELPER PID FD``. It joins the user namespace that owns
#: PID's network namespace (when another than ours; bubblewrap nests user namespaces, so it is
#: found with the NS_GET_USERNS ioctl, not by PID's own), then that network namespace, makes
#: the listener, sends it on socket FD and exits.
_HELPER: Final = f"""
import ctypes, errno, fcntl, os, socket, sys, time
pid, channel = sys.argv[1], socket.socket(fileno=int(sys.argv[2]))
libc = ctypes.CDLL(None, use_errno=True)
net = os.open(f"/proc/{{pid}}/ns/net", os.O_RDONLY)
owner = fcntl.ioctl(net, {_NS_GET_USERNS})
mine = os.stat("/proc/self/ns/user")
theirs = os.fstat(owner)
if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
    if libc.setns(owner, {_CLONE_NEWUSER}) != 0:
        sys.exit("setns into the sandbox's user namespace: " + os.strerror(ctypes.get_errno()))
if libc.setns(net, {_CLONE_NEWNET}) != 0:
    sys.exit("setns into the sandbox's network: " + os.strerror(ctypes.get_errno()))
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
deadline = time.monotonic() + 5
while True:
    try:
        listener.bind(("127.0.0.1", {PROXY_PORT}))
        break
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
            sys.exit("bind 127.0.0.1:{PROXY_PORT} in the sandbox: " + str(exc))
        time.sleep(0.002)
listener.listen(128)
socket.send_fds(channel, [b"L"], [listener.fileno()])
"""


def _listener_by_helper(pid: int) -> socket.socket:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        # the worker's interpreter; by /proc/self/exe where its path is not ours to run (a
        # virtual environment under a folder this user cannot enter)
        executable = sys.executable if os.access(sys.executable, os.X_OK) else "/proc/self/exe"
        done = subprocess.run(
            ["python3", "-I", "-S", "-c", _HELPER, str(pid), str(theirs.fileno())],
            executable=executable,
            pass_fds=(theirs.fileno(),),
            capture_output=True,
            env={},
            timeout=30,
        )
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise OSError(f"the listener helper failed: {said[-1] if said else done.returncode}")
        ours.settimeout(5)
        _, fds, _, _ = socket.recv_fds(ours, 1, 1)
    if not fds:
        raise OSError("the listener helper sent no socket")
    return socket.socket(fileno=fds[0])
