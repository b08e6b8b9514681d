"""A command's limits hold for the whole command, however it arranges its processes.

Each attack is a model with the bash tool in a real workflow run, by a worker that is root and
by one that is an ordinary user (:mod:`tests.attack_runs`). Where the worker has a cgroup for
each command (``limits`` ``cgroup2`` or ``cgroup1`` in the command's events: here, root) the
memory, process and CPU limits hold for all its processes together; where it has none
(``rlimits``: here, the unprivileged worker, which may not write the host's cgroups) each test
checks the weaker promise that still holds, as the docs state it: per-process memory and
process limits, and the disk bound and the wall clock, which the parent enforces in every
mode. Nothing here measures time; the assertions are on what was stopped and why, and on
counts.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.attack_runs import (
    WORKER_UID,
    AttackRun,
    attacker,
    attacker_folder,
    bash_steps,
    run_attack,
)

__all__ = ["attacker", "attacker_folder"]  # the fixtures, for pytest

pytestmark = pytest.mark.slow

ATTACKS = "tests.bash_fleet_app:attacks"
NO_JAVASCRIPT = "tests.sandbox_limits_app:no_javascript"
MIB = 1024 * 1024


def _sandbox_records(run: AttackRun, step: str) -> list[dict[str, Any]]:
    """The ``sandbox`` record of each bash call of ``step`` that returned."""
    return [
        e.payload["sandbox"]
        for e in run.events
        if e.type == "harness.tool_call.succeeded" and e.payload.get("stepPath") == step
    ]


def _as_worker(attacker: str) -> list[str]:
    if attacker == "unprivileged" and os.geteuid() == 0:
        return ["setpriv", f"--reuid={WORKER_UID}", f"--regid={WORKER_UID}", "--clear-groups"]
    return []


@pytest.fixture
def expected_limits(attacker: str) -> str:
    """What holds a command's limits for this attacker's worker on this host, asked by that
    user: ``cgroup2``/``cgroup1`` where it may make cgroups, else ``rlimits``."""
    code = (
        "from little_dist.sandbox.cgroups import cgroups_for; c = cgroups_for(); "
        "print(c.mode if c else 'rlimits')"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [*_as_worker(attacker), sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        check=True,
    )
    return done.stdout.strip()


def _salt(folder: Path) -> str:
    """Digits unique to this test's run: what leftover processes are matched by."""
    return str(abs(hash(str(folder))) % 10**6).zfill(6)


def _leftovers(pattern: str) -> list[int]:
    found = subprocess.run(["pgrep", "-fx", pattern], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def _end_leftovers(pattern: str) -> None:
    """SIGKILL what an attack left running (each by its pid: only processes it started)."""
    for pid in _leftovers(pattern):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- memory -----------------------------------------------------------------------------------

# Each of four processes takes 900 MB (touched, not only reserved), then waits until all four
# hold theirs (a file each in the command's private /tmp) before it says so.
HOLD = """
import os, sys, time
kept = b"x" * (900 << 20)
open(f"/tmp/held.{sys.argv[1]}", "w").close()
for _ in range(600):
    if len([n for n in os.listdir("/tmp") if n.startswith("held.")]) >= 4:
        break
    time.sleep(0.05)
print("held", sys.argv[1], flush=True)
"""


@pytest.mark.timeout(400)
def test_four_processes_of_900_mb_do_not_fit_in_a_1_gib_limit(
    attacker: str, attacker_folder: Path, expected_limits: str
) -> None:
    commands: list[dict[str, Any]] = [
        {"cmd": f"for i in 1 2 3 4; do python3 -c {shlex.quote(HOLD)} $i & done; wait; echo end"},
        {"cmd": "python3 -c 'x = bytearray(2 * 1024**3)'"},
    ]
    run = run_attack(ATTACKS, bash_steps(commands), attacker=attacker, folder=attacker_folder)
    assert run.status == "completed" and run.output == "alive", run.stderr[-3000:]
    together, alone = run.ends("attack")
    seen = run.results("attack")
    assert [e["limits"] for e in run.ends("attack")] == [expected_limits] * 2
    assert [r["limits"] for r in _sandbox_records(run, "attack")] == [expected_limits] * 2
    # In every mode, one process alone cannot allocate past the limit.
    assert alone["exitCode"] == 1 and "MemoryError" in seen[1]["stderr"]
    if expected_limits == "rlimits":
        # The weaker promise, as documented: each process is bounded, not their sum.
        assert together["stopped"] is None and seen[0]["stdout"].count("held") == 4
        return
    # A cgroup holds them together: the kernel's OOM killer ends one, the sandbox the rest.
    assert together["stopped"] == "memory" and together["exitCode"] == 128 + 9
    assert "held" not in seen[0]["stdout"]
    assert "passed its memory limit (1073741824 bytes" in seen[0]["stderr"]


# --- processes and threads --------------------------------------------------------------------

SPAWN = """
import subprocess
started = []
try:
    for _ in range({count}):
        started.append(subprocess.Popen(["sleep", "{sleep}"]))
except OSError as exc:
    print("processes", len(started), "refused", exc.errno)
else:
    print("processes", len(started))
for process in started:
    process.kill()
"""
THREADS = """
import os, threading, time
started = 0
try:
    for _ in range(500):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        started += 1
except RuntimeError:
    print("threads", started, "refused", flush=True)
else:
    print("threads", started, flush=True)
os._exit(0)
"""


def _count(text: str, what: str) -> int:
    for line in text.splitlines():
        if line.startswith(what + " "):
            return int(line.split()[1])
    raise AssertionError(f"no {what!r} line in {text!r}")


@pytest.mark.timeout(400)
def test_a_fork_bomb_and_many_threads_are_held_to_the_process_limit(
    attacker: str, attacker_folder: Path, expected_limits: str
) -> None:
    salt = _salt(attacker_folder)
    bomb_sleep, spawn_sleep = f"sleep 45.{salt}", f"29.{salt}"
    commands: list[dict[str, Any]] = [
        {"cmd": f"python3 -c {shlex.quote(SPAWN.format(count=200, sleep=spawn_sleep))}"},
        {"cmd": f"python3 -c {shlex.quote(THREADS)}"},
        {"cmd": f"bomb() {{ bomb | bomb & }}; bomb; {bomb_sleep}", "timeoutMs": 3000},
    ]
    try:
        run = run_attack(ATTACKS, bash_steps(commands), attacker=attacker, folder=attacker_folder)
        left = _leftovers(bomb_sleep) + _leftovers(f"sleep {spawn_sleep}")
    finally:
        _end_leftovers(bomb_sleep)
    assert run.status == "completed" and run.output == "alive", run.stderr[-3000:]
    spawn, threads, bomb = run.ends("attack")
    seen = run.results("attack")
    assert [e["limits"] for e in (spawn, threads, bomb)] == [expected_limits] * 3
    processes = _count(seen[0]["stdout"], "processes")
    started = _count(seen[1]["stdout"], "threads")
    assert "refused" in seen[0]["stdout"] and "refused" in seen[1]["stdout"]
    if expected_limits == "rlimits":
        # Per user: at most 64 more than that user ran when the command started.
        assert processes < 200 and started < 500
    else:
        # The command's own: every process and thread of it counts (bash, python, ...).
        assert processes < 64 and started < 64
    assert bomb["stopped"] == "timeout" and bomb["exitCode"] == 124
    assert "Resource temporarily unavailable" in seen[2]["stderr"]
    assert left == [], "processes of the commands outlived them"


# --- disk -------------------------------------------------------------------------------------

SCRATCH = "for i in $(seq 20); do head -c 60M /dev/zero > f$i || break; done; echo wrote-all"
TMP = "for i in $(seq 20); do head -c 60M /dev/zero > /tmp/f$i || break; done; du -sb /tmp"
# Files written through descriptors still open after their names are gone: in no folder.
# As many bytes as SCRATCH writes (1.2 GB): a watcher that looks every few tens of
# milliseconds on a loaded host must see them before the last is written (600 MB took a
# third of a second here; a CI run with every test in parallel once missed it).
UNLINKED = (
    'for i in $(seq 3 22); do eval "exec $i>hidden$i"; rm hidden$i; '
    "head -c 60M /dev/zero >&$i; done; echo wrote-all; sleep 1"
)
# Bytes below a folder deeper than a walk goes: they count, or the command ends.
DEEP = (
    "d=$(printf 'd/%.0s' $(seq 70)); mkdir -p $d && "
    "for i in 1 2 3 4 5 6; do head -c 60M /dev/zero > $d/f$i; done; echo wrote-all"
)
# Links to the whole host and to an endless device, a FIFO, a file linked twice: the walk
# must not follow, block on or double-count them (a false "disk" stop would show it).
PLANTED = (
    "ln -s / root; ln -s /dev/zero zero; mkfifo fifo; head -c 10M /dev/zero > small; "
    "ln small twice; sleep 0.5; echo fine"
)


@pytest.mark.timeout(400)
def test_writing_fast_to_the_writable_mounts_is_stopped_at_the_disk_bound(
    attacker: str, attacker_folder: Path, expected_limits: str
) -> None:
    commands: list[dict[str, Any]] = [
        {"cmd": SCRATCH},
        {"cmd": "ls f* | wc -l; rm -f f*"},
        {"cmd": TMP},
        {"cmd": UNLINKED},
        {"cmd": PLANTED},
        {"cmd": "rm -rf root zero fifo small twice; ls -A | wc -l"},
    ]
    run = run_attack(ATTACKS, bash_steps(commands), attacker=attacker, folder=attacker_folder)
    assert run.status == "completed" and run.output == "alive", run.stderr[-3000:]
    ends = run.ends("attack")
    assert len(ends) == len(commands)
    assert {e["limits"] for e in ends} == {expected_limits}
    out = [e["stdout"]["preview"] for e in ends]
    err = [e["stderr"]["preview"] for e in ends]
    # 1.2 GB to the scratch, 60 MB at a time: stopped past 256 MiB, whatever the mode. (The
    # scratch is then over its publish limit until cleaned: that call fails, saying so.)
    assert ends[0]["stopped"] == "disk" and ends[0]["exitCode"] == 128 + 9
    assert "passed the disk limit (268435456 bytes" in err[0]
    assert 4 <= int(out[1]) < 20  # 256 MiB is 4.3 files: the rest never came
    # ... and a command may always clean up what it holds past the bound.
    assert ends[1]["stopped"] is None and ends[1]["exitCode"] == 0
    # 1.2 GB to /tmp: a tmpfs of 64 MiB.
    assert "No space left on device" in err[2]
    assert int(out[2].split()[0]) < 65 * MIB
    # Unlinked while written: found through the command's open descriptors.
    assert ends[3]["stopped"] == "disk" and "wrote-all" not in out[3]
    # Planted links, a FIFO, a hard link: measured as what they are, nothing followed.
    assert ends[4]["stopped"] is None and out[4] == "fine\n", ends[4]
    assert out[5] == "0\n"


@pytest.mark.timeout(300)
def test_bytes_below_a_tree_too_deep_to_measure_stop_the_command(
    attacker: str, attacker_folder: Path, expected_limits: str
) -> None:
    run = run_attack(
        ATTACKS, bash_steps([{"cmd": DEEP}]), attacker=attacker, folder=attacker_folder
    )
    (end,) = run.ends("attack")
    assert end["limits"] == expected_limits
    assert end["stopped"] == "disk" and end["exitCode"] == 128 + 9
    assert "folders deeper than 64 levels" in end["stderr"]["preview"]
    # Then the host's own walk refuses the tree, and with it the attempt (sandbox.writable).
    assert run.status == "failed"
    failed = [e for e in run.events if e.type == "StepFailed"]
    assert failed and "deeper than 64 levels" in str(failed[-1].payload["error"])


# --- processes that hold the output -----------------------------------------------------------


@pytest.fixture
def leftover_sleep(attacker_folder: Path) -> Iterator[str]:
    """A ``sleep`` command line unique to this test; whatever runs it is killed at the end."""
    pattern = f"sleep 1000.{_salt(attacker_folder)}"
    try:
        yield pattern
    finally:
        _end_leftovers(pattern)


ORPHANING_BWRAP = """#!/bin/sh
# A bubblewrap that leaves its sandbox behind, holding the command's pipes: the real one in a
# session of its own (which this one waits to see), then this one exits as if all had ended.
{bwrap} "$@" &
while [ -e /proc/$! ] && [ "$(cut -d' ' -f6 /proc/$!/stat 2>/dev/null)" != "$!" ]; do
    sleep 0.01
done
exit 0
"""


@pytest.mark.timeout(300)
def test_an_orphaned_bubblewrap_holding_the_pipes_does_not_hold_the_command(
    attacker: str, attacker_folder: Path, expected_limits: str, leftover_sleep: str
) -> None:
    real = shutil.which("bwrap")
    assert real is not None
    orphaning = attacker_folder / "bwrap"
    orphaning.write_text(ORPHANING_BWRAP.format(bwrap=f"setsid {real}"))
    orphaning.chmod(0o755)
    run = run_attack(
        ATTACKS,
        bash_steps([{"cmd": f"echo started; {leftover_sleep}", "timeoutMs": 5000}]),
        attacker=attacker,
        folder=attacker_folder,
        env={"LITTLE_SANDBOX_BWRAP": str(orphaning)},
        timeout=120,
    )
    assert run.status == "completed" and run.output == "alive", run.stderr[-3000:]
    (end,) = run.ends("attack")
    assert end["isolation"] == "namespaces" and end["limits"] == expected_limits
    # Every mode names the sandbox's processes: its cgroup, or its PID namespace's first
    # process (bubblewrap's status pipe). Nothing of the command is left.
    assert _leftovers(leftover_sleep) == []


# --- sandbox user ids -------------------------------------------------------------------------

HOLD_PROCESSES = (
    "for i in $(seq 50); do {sleep} & done; id -u; "
    "while [ ! -e stop ]; do sleep 0.05; done; kill $(jobs -p); echo released"
)
IN_ITS_OWN_PID_NAMESPACE = """#!/bin/sh
# The worker's Python as a container starts it: the first process of a PID namespace.
exec unshare --pid --fork --mount-proc {python} "$@"
"""


def _another_folder(attacker: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="little-attack-"))
    folder.chmod(0o755)
    if attacker == "unprivileged" and os.geteuid() == 0:
        os.chown(folder, WORKER_UID, WORKER_UID)
    return folder


@pytest.mark.timeout(400)
def test_two_workers_commands_never_share_a_user_id_or_its_process_limit(
    attacker: str,
    attacker_folder: Path,
    expected_limits: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    salt = _salt(attacker_folder)
    holding = f"sleep 44.{salt}"
    if attacker == "root":
        # Two workers in containers of their own: each is pid 1 of its PID namespace.
        python = attacker_folder / "python"
        python.write_text(IN_ITS_OWN_PID_NAMESPACE.format(python=sys.executable))
        python.chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(python))
    first: list[AttackRun] = []
    holder = threading.Thread(
        target=lambda: first.append(
            run_attack(
                ATTACKS,
                bash_steps([{"cmd": HOLD_PROCESSES.format(sleep=holding), "timeoutMs": 120_000}]),
                attacker=attacker,
                folder=attacker_folder,
                timeout=300,
            )
        )
    )
    other = _another_folder(attacker)
    holder.start()
    try:
        for _ in range(2400):  # the first worker's command holds its 50 processes
            if len(_leftovers(holding)) >= 50 or not holder.is_alive():
                break
            time.sleep(0.05)
        held = _leftovers(holding)
        assert len(held) >= 50, "the first worker's command did not start its processes"
        spawn = SPAWN.format(count=20, sleep=f"28.{salt}")
        second = run_attack(
            ATTACKS,
            bash_steps([{"cmd": f"id -u; python3 -c {shlex.quote(spawn)}"}]),
            attacker=attacker,
            folder=other,
            timeout=300,
        )
    finally:
        for pid in _leftovers(holding)[:1]:  # through its sandbox: the stop file in its mount
            with open(f"/proc/{pid}/root/mnt/scratch/own/stop", "w"):
                pass
        holder.join()
        _end_leftovers(holding)
        shutil.rmtree(other, ignore_errors=True)
    assert second.status == "completed", second.stderr[-3000:]
    (done,) = first
    assert done.status == "completed", done.stderr[-3000:]
    (held_end,) = done.ends("attack")
    (spawn_end,) = second.ends("attack")
    assert held_end["limits"] == spawn_end["limits"] == expected_limits
    first_uid = done.results("attack")[0]["stdout"].split()[0]
    second_out = second.results("attack")[0]["stdout"]
    second_uid = second_out.split()[0]
    # The second command got every process it asked for: no other command's count on it.
    assert _count(second_out, "processes") == 20 and "refused" not in second_out
    assert held_end["exitCode"] == 0 and "released" in done.results("attack")[0]["stdout"]
    if attacker == "root":
        assert first_uid != second_uid  # two live commands: two user ids
    else:
        assert first_uid == second_uid == str(WORKER_UID)  # both as the worker's own user


# --- what the sandbox user sees of the system -------------------------------------------------


@pytest.mark.timeout(300)
def test_the_sandbox_user_reads_etc_and_opens_its_own_standard_streams(
    attacker: str, attacker_folder: Path
) -> None:
    command = (
        "ls /etc/ssl/certs | grep -c . ; echo x | awk '{print \"awk-ok\"}'; "
        "echo to-stderr > /dev/stderr; echo to-stdout > /dev/stdout"
    )
    run = run_attack(
        ATTACKS, bash_steps([{"cmd": command}]), attacker=attacker, folder=attacker_folder
    )
    assert run.status == "completed" and run.output == "alive", run.stderr[-3000:]
    (seen,) = run.results("attack")
    lines = seen["stdout"].splitlines()
    assert int(lines[0]) > 0 and lines[1:] == ["awk-ok", "to-stdout"], seen
    assert seen["stderr"] == "to-stderr\n" and seen["exitCode"] == 0


@pytest.mark.timeout(300)
def test_hidden_javascript_runtimes_do_not_break_every_command(
    attacker: str, attacker_folder: Path
) -> None:
    command = "echo hi; node -e 'console.log(41 + 1)'; nodejs -e 'console.log(41 + 1)'; true"
    run = run_attack(
        NO_JAVASCRIPT, bash_steps([{"cmd": command}]), attacker=attacker, folder=attacker_folder
    )
    assert run.status == "completed" and run.output == "alive", run.stderr[-3000:]
    (seen,) = run.results("attack")
    assert seen["stdout"] == "hi\n", seen  # the runtimes are there by name, but run nothing
    assert "bwrap" not in seen["stderr"]
