"""What ``tests/test_session_cleanup.py`` interrupts: a test session with processes running.

Not collected with the suite (its name does not start with ``test_``); that test runs
``scripts/test -n 2 tests/session_probe.py``. Each probe starts what tests start: a fleet
(``little scheduler``, and a ``little worker`` with a prefork pool, so with children of its
own), a private ``redis-server``, a plain child in pytest's own process group, and a daemon
that left its parent (a grandchild in a session of its own, re-parented to init). Then it
says it is ready (a file in ``SESSION_PROBE_DIR``) and waits to be interrupted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.fleet_processes import FleetEnv, fleet_env, start_scheduler, start_worker
from tests.redis_server import RedisServer

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

#: How long a probe waits for its session to be ended before it gives up.
WAIT_SECONDS = 300

_DAEMON = (
    "import os, subprocess, sys\n"
    "subprocess.Popen(['sleep', sys.argv[1]], start_new_session=True,"
    " stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "os._exit(0)\n"
)


@pytest.mark.parametrize("probe", [0, 1])
def test_probe(probe: int, fleet_env: FleetEnv, tmp_path: Path) -> None:
    folder = Path(os.environ["SESSION_PROBE_DIR"])
    start_scheduler(fleet_env)
    start_worker(fleet_env, roles=["worker"], pool="prefork", concurrency=2)
    redis = RedisServer.start_new(tmp_path)
    child = subprocess.Popen(["sleep", str(WAIT_SECONDS + 1)])
    subprocess.run([sys.executable, "-c", _DAEMON, str(WAIT_SECONDS + 2)], check=True)
    (folder / f"ready-{probe}").write_text(f"{os.getpid()}\n")
    try:
        threading.Event().wait(WAIT_SECONDS)
    finally:
        child.kill()
        redis.stop()
