"""``scripts/test`` interrupted (SIGINT) or killed (SIGKILL) leaves no process it started.

A test of the test runner (:mod:`tests.session_lifetime`, :mod:`tests.reaper`): it runs
``scripts/test -n 2 tests/session_probe.py`` (two xdist workers, each with a test that has
fleet processes, a Redis server, a plain child and a daemon running), waits until both
probes are ready, notes every process below ``scripts/test``, signals that one pid, and then
reads ``/proc``: within a few seconds no process it noted, and no process carrying the run's
token in its environment, may be left (zombies aside, which are already dead).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.reaper import descendants, snapshot
from tests.zygote import process_name

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
#: "Within a few seconds": how long the processes are given to be gone after the signal.
GONE_WITHIN = 10.0


def _tree(root: int) -> dict[int, tuple[int, str]]:
    """Every live process below ``root``: pid -> (start time, command line and, in brackets,
    its name: a ``little`` process forked from a test zygote has the zygote's command line
    and its own name, ``little worker``)."""
    procs = snapshot()
    found: dict[int, tuple[int, str]] = {}
    for pid in descendants({root}, procs):
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            found[pid] = (procs[pid].start, f"{command.strip()} [{name}]")
    return found


def _carrying(token: str) -> set[int]:
    """Processes whose environment holds ``token`` (this run's, inherited by its children)."""
    found: set[int] = set()
    needle = f"SESSION_PROBE_TOKEN={token}".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    found.add(int(name))
    return found


def _alive(noted: dict[int, tuple[int, str]], token: str) -> list[str]:
    procs = snapshot()
    live = {pid for pid, proc in procs.items() if proc.state not in "ZX"}
    left = [
        f"{pid} {command}"
        for pid, (start, command) in noted.items()
        if pid in live and procs[pid].start == start
    ]
    left += [f"{pid} (carries the token)" for pid in _carrying(token) & live if pid not in noted]
    return left


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_signalled_test_run_leaves_no_process_behind(sig: int, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    probes = tmp_path / "probes"
    probes.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        "LITTLE_TEST_PYTHON": sys.executable,
        "SESSION_PROBE_DIR": str(probes),
        "SESSION_PROBE_TOKEN": token,
    }
    log = tmp_path / "run.log"
    argv = [str(ROOT / "scripts" / "test"), "-q", "-n", "2", "--dist", "load"]
    argv.append("tests/session_probe.py")
    with log.open("wb") as out:
        run = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    noted: dict[int, tuple[int, str]] = {}
    try:
        deadline = time.monotonic() + 240
        while len(list(probes.glob("ready-*"))) < 2:
            assert run.poll() is None, f"the run ended ({run.returncode}):\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the probes were not ready:\n{log.read_text()}"
            time.sleep(0.2)
        noted = _tree(run.pid)
        commands = " | ".join(command for _, command in noted.values())
        for parts in (
            ("little_dist.cli worker", f"[{process_name(['worker'])}]"),
            ("little_dist.cli scheduler", f"[{process_name(['scheduler'])}]"),
            ("redis-server",),
        ):
            assert any(part in commands for part in parts), (parts, commands)
        assert any(command.startswith("sleep") for _, command in noted.values()), commands

        os.kill(run.pid, sig)
        signalled = time.monotonic()
        left = _alive(noted, token)
        while left and time.monotonic() - signalled < GONE_WITHIN:
            time.sleep(0.1)
            left = _alive(noted, token)
        took = time.monotonic() - signalled
        assert not left, (
            f"{len(left)} process(es) still running {took:.1f}s after the signal:\n  "
            + "\n  ".join(left)
            + f"\nthe run's output:\n{log.read_text()[-4000:]}"
        )
        print(f"every process gone {took:.1f}s after {signal.Signals(sig).name}")
        code = run.wait(timeout=5)
        assert code == (2 if sig == signal.SIGINT else -signal.SIGKILL), log.read_text()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        procs = snapshot()
        for pid, (start, _) in noted.items():  # a failed test leaves nothing either
            if pid in procs and procs[pid].start == start:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
