"""pytest plugin: every process the tests start ends with the test session, however it ends.

Loaded from ``tests/conftest.py``. Four layers, each for a way a session ends:

* A test's fixtures stop what it started (``FleetEnv.close``, ``RedisServer.stop``, ...):
  the normal end of a test, and Ctrl-C (SIGINT raises KeyboardInterrupt in the test, whose
  teardown still runs).
* SIGTERM (what a CI time limit or ``timeout`` sends first) is handled as SIGINT: pytest
  would otherwise die at once, its teardowns not run.
* The session's pytest process (the xdist controller, or the only one) starts
  :mod:`tests.reaper`, a small process of its own session that tracks every descendant (and
  every process that inherited the session's mark, :data:`tests.reaper.MARK_ENV`) and kills
  what is left once pytest has ended: after SIGKILL, after a teardown that could not run,
  after a test that leaked a process (it names those on stderr).
* xdist workers, and the long-lived servers and fleet processes the test helpers start
  (:func:`tied`), get ``PR_SET_PDEATHSIG`` = SIGKILL: the kernel kills them the moment their
  pytest process dies, before the reaper looks.

The session's temporary folders (``tmp_path``; the S3 server's data) are its own too:
``--basetemp`` is a fresh ``$TMPDIR/little-tests-UID/run-PID-START`` unless given. pytest's
shared ``/tmp/pytest-of-USER/pytest-N`` folders are pruned by every session that ends, and
with several sessions at once (xdist runs, nested runs, other checkouts' tests) a live
session's folder was seen removed under it: every test using ``tmp_path`` then failed. A
run's folder is removed by a later run once its pytest process is gone (the last
:data:`KEEP_FINISHED` are kept, to look at).

An xdist controller that gets SIGINT passes it on to its workers at once, so that each
running test is interrupted and tears down (xdist would otherwise wait for them to end).
Once interrupted, teardowns kill rather than stop gracefully (:func:`interrupted`): the
session is ending, and a graceful stop can take seconds per process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import pytest

from tests.reaper import MARK_ENV

__all__ = [
    "SESSION_PID_ENV",
    "interrupted",
    "pytest_configure",
    "tied",
]

#: The pid of the session's pytest process (the xdist controller), for its workers.
SESSION_PID_ENV = "LITTLE_TEST_SESSION_PID"
#: How many finished runs' temporary folders are kept.
KEEP_FINISHED = 3
_PR_SET_PDEATHSIG = 1
_REAPER = Path(__file__).with_name("reaper.py")
_reaper: subprocess.Popen[bytes] | None = None
_interrupted = threading.Event()


def interrupted() -> bool:
    """Whether this pytest process got SIGINT or SIGTERM: stop what is left at once."""
    return _interrupted.is_set()


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: SIGKILL when the parent (its thread that started us) ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def _setpriv_pdeathsig() -> bool:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return False
    done = subprocess.run([setpriv, "--help"], capture_output=True, text=True, check=False)
    return "--pdeathsig" in done.stdout


_SETPRIV = _setpriv_pdeathsig() if sys.platform == "linux" else False


def tied(argv: Sequence[str]) -> list[str]:
    """``argv`` run so that the process is SIGKILLed when this one dies (``setpriv
    --pdeathsig KILL``, util-linux). The signal follows the *thread* that started the
    process: from any thread but the main one (which lives as long as the process), and
    where ``setpriv`` lacks the option, ``argv`` is returned unchanged (the reaper still ends
    the process with the session)."""
    if not _SETPRIV or threading.current_thread() is not threading.main_thread():
        return list(argv)
    return ["setpriv", "--pdeathsig", "KILL", "--", *argv]


def _start_time(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()[19]


def _private_basetemp() -> Path:
    """A new folder for this run's temporary files; finished runs' folders pruned."""
    root = Path(tempfile.gettempdir()) / f"little-tests-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    finished: list[tuple[float, Path]] = []
    for folder in root.glob("run-*-*"):
        _, pid, start = folder.name.split("-", 2)
        if not pid.isdigit() or _start_time(int(pid)) != start:
            with contextlib.suppress(OSError):  # (another run pruning it now)
                finished.append((folder.stat().st_mtime, folder))
    finished.sort()
    for _, folder in finished[: max(0, len(finished) - KEEP_FINISHED)]:
        shutil.rmtree(folder, ignore_errors=True)
    return root / f"run-{os.getpid()}-{_start_time(os.getpid())}"


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                found += [int(child) for child in children.read().split()]
    return found


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


def _on_sigint_controller(signum: int, frame: FrameType | None) -> None:
    # xdist workers run in the controller's process group, but `kill -INT PID` reaches the
    # controller only: pass it on, so their running tests stop and tear down now.
    _interrupted.set()
    for child in _children(os.getpid()):
        if _reaper is None or child != _reaper.pid:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGINT)
    raise KeyboardInterrupt


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    os.kill(os.getpid(), signal.SIGINT)  # the same path as Ctrl-C, teardowns included


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    global _reaper
    if sys.platform != "linux":
        return
    if hasattr(config, "workerinput"):  # an xdist worker
        _die_with_parent()
        if str(os.getppid()) != os.environ.get(SESSION_PID_ENV):
            os._exit(1)  # the controller ended before the signal was set
    else:
        if config.option.basetemp is None:  # (before tmp_path's plugin reads it)
            config.option.basetemp = str(_private_basetemp())
        mark = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        os.environ[SESSION_PID_ENV] = str(os.getpid())
        os.environ[MARK_ENV] = mark
        # Never waited for: it ends by itself once this process has ended.
        _reaper = subprocess.Popen(
            [sys.executable, str(_REAPER), str(os.getpid()), mark],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    xdist_controller = _reaper is not None and config.getoption("dist", "no") != "no"
    signal.signal(signal.SIGINT, _on_sigint_controller if xdist_controller else _on_sigint)
    signal.signal(signal.SIGTERM, _on_sigterm)
