"""A pipe a sandboxed command writes what it leaves for the host on: :class:`StateChannel`.

The bash session's shell writes its working directory and exported variables here when it
exits (:mod:`little_dist.sandbox.bash`), instead of into a file in a folder the command can
also write (where a link or a FIFO planted in its place would lead the host out, or block it).
A thread of the host drains the pipe as the command writes, so the writer never blocks; it
keeps at most ``limit`` bytes (more and :meth:`StateChannel.received` says None) and never
waits for a straggler that holds the pipe open past the command's end.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from typing import Final

__all__ = ["StateChannel"]

_CHUNK: Final = 65536
_POLL_SECONDS: Final = 0.2
#: How long :meth:`StateChannel.received` waits for the end of the pipe after the command.
_GRACE_SECONDS: Final = 1.0


class StateChannel:
    """One command's state pipe: pass :attr:`fd` to it (``pass_fds``), then :meth:`received`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._read, self.fd = os.pipe()
        self._data = bytearray()
        self._over = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="sandbox-state", daemon=True)
        self._thread.start()

    def received(self) -> bytes | None:
        """What the command wrote (call once it has ended): None when it was over the limit."""
        self._close_write_end()
        self._thread.join(timeout=_GRACE_SECONDS)
        self._stop.set()
        self._thread.join()
        return None if self._over else bytes(self._data)

    def close(self) -> None:
        self._close_write_end()
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            os.close(self._read)

    def __enter__(self) -> StateChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_write_end(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _drain(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._read], [], [], _POLL_SECONDS)
            if not ready:
                continue
            chunk = os.read(self._read, _CHUNK)
            if not chunk:
                return
            if not self._over:
                self._data += chunk
                if len(self._data) > self._limit:
                    self._over = True
                    self._data.clear()
