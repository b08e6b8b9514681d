"""Local TCP ports for the servers tests start, never handed out twice at once: no tests here.

``bind(port 0)`` then ``close()`` (what tests did) lets two parallel test processes (xdist
workers, or two sessions on one machine) get the same port, and a server a test stops and
starts again on its port (Redis after a crash) leaves that port free in between: any process
may take it then, and so may an outgoing connection, since those ports are the kernel's
ephemeral range. :func:`reserve_port` picks ports below that range (from :data:`RANGE`) and
holds an ``flock`` on ``$TMPDIR/little-test-ports/PORT`` until the reserving process exits:
every test process on the machine asks the same lock first, so none is given a port another
one holds, while its server is down too. A port something else listens on is skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

__all__ = ["RANGE", "reserve_port", "reserve_ports"]

#: Where reserved ports come from: below Linux's ephemeral range (32768-60999 by default),
#: so no outgoing connection is ever given one of them.
RANGE = range(20000, 32000)
_HELD: dict[int, int] = {}  # port -> the descriptor holding its lock (for the process's life)


def _lock_dir() -> Path:
    folder = Path(tempfile.gettempdir()) / "little-test-ports"
    if not folder.is_dir():
        folder.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):  # every user's tests share it, as they share ports
            folder.chmod(0o1777)
    return folder


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserve_port() -> int:
    """A port nothing listens on and no other test process holds, held by this process
    until it exits."""
    folder = _lock_dir()
    for _ in range(200):
        port = random.choice(RANGE)
        if port in _HELD:
            continue
        try:
            fd = os.open(folder / str(port), os.O_RDONLY | os.O_CREAT, 0o444)
        except OSError:  # another user's lock file: theirs to use
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if not _bindable(port):
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            continue
        _HELD[port] = fd
        return port
    raise RuntimeError(f"no free local port in {RANGE.start}-{RANGE.stop - 1} after 200 tries")


def reserve_ports(count: int) -> list[int]:
    """``count`` distinct ports (see :func:`reserve_port`)."""
    return [reserve_port() for _ in range(count)]
