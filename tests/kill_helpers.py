"""Shared helper of the SIGKILL tests of ``little run``; no tests here."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

__all__ = ["sigkill_when"]


def sigkill_when(
    child: subprocess.Popen[bytes], ready: Callable[[], bool], what: str, timeout: float = 60
) -> None:
    """SIGKILL ``child`` as soon as ``ready()`` holds (checked every 50 ms); fail if the child
    ends first or ``what`` does not happen within ``timeout`` seconds. The child is never left
    running."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, f"{what} did not happen in time"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
