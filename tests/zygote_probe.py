"""What :mod:`tests.test_zygote` runs as ``python -m tests.zygote_probe MODE...``: it prints
(JSON, one line) how the process sees itself, then ends as MODE says. No tests here.

Modes: ``exit N`` (``sys.exit(N)``), ``raise`` (an uncaught exception), ``thread`` (a
non-daemon thread still printing when the main thread ends), ``atexit`` (an ``atexit``
function printing), ``tail`` (a last line with no newline), ``sleep`` (sleeps until killed).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
import time

_PR_GET_PDEATHSIG = 2


def _open_fds() -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            os.fstat(int(name))
            found.append(int(name))
    return sorted(found)


def _stream(stream: object) -> dict[str, object]:
    return {
        name: getattr(stream, name, None)
        for name in ("encoding", "errors", "line_buffering", "write_through")
    }


def view() -> dict[str, object]:
    """How this process sees itself (what a new ``python -m`` process would see)."""
    death = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(_PR_GET_PDEATHSIG, ctypes.byref(death), 0, 0, 0)
    return {
        "argv": sys.argv,
        "path0": sys.path[0],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "fds": _open_fds(),
        "session_leader": os.getsid(0) == os.getpid(),
        "group_leader": os.getpgid(0) == os.getpid(),
        "stdin": sys.stdin.read(),
        "stdout": _stream(sys.stdout),
        "stderr": _stream(sys.stderr),
        "sigint_default": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        "sigpipe": int(signal.getsignal(signal.SIGPIPE)),  # type: ignore[arg-type]
        "sigterm": int(signal.getsignal(signal.SIGTERM)),  # type: ignore[arg-type]
        "threads": threading.active_count(),
        "dont_write_bytecode": sys.dont_write_bytecode,
        "pycache_prefix": sys.pycache_prefix,
        "stdlib": os.__file__,
        "main": __name__,
        "pdeathsig": death.value,
        "ids": [os.getresuid(), os.getresgid(), os.getgroups()],
    }


def main(argv: list[str]) -> int:
    print(json.dumps(view()), flush=True)
    mode = argv[0] if argv else "exit"
    if mode == "exit":
        sys.exit(int(argv[1]))
    if mode == "raise":
        raise RuntimeError("the probe fails")
    if mode == "thread":

        def late() -> None:
            time.sleep(0.3)
            print("the thread ended", flush=True)

        threading.Thread(target=late).start()
    elif mode == "atexit":
        atexit.register(print, "the atexit function ran")
    elif mode == "tail":
        sys.stdout.write("a last line with no newline")
    elif mode == "sleep":
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
