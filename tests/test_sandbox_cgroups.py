"""The parts of per-command limits under the attack tests (``tests/test_sandbox_limits.py``):
finding the cgroup hierarchies, cgroup v2's protocol (on a stand-in folder: this machine's
cgroup v2 has no controllers to give), cgroup v1 for real where the tests run as root (a
crashed worker's cgroups swept, a kill without ``cgroup.kill``, CPU time of all processes
together), the wall clock against a process that left its session, the disk walk against
planted entries, and sandbox user ids leased per command.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from little_dist.errors import InvalidInputError
from little_dist.sandbox import (
    Mount,
    SandboxLimits,
    SandboxUnavailableError,
    cgroups,
    run_sandboxed,
    uids,
)
from little_dist.sandbox.cgroups import _hierarchies, cgroups_for
from little_dist.sandbox.disk import disk_use
from tests.sandbox_helpers import refusing_bwrap

HYBRID_MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = """\
9:name=systemd:/
8:pids:/
4:memory:/process_api/29eb
2:cpuacct:/
1:cpu:/
0::/
"""
# A pod's container with its own cgroup namespace: the mount's root is the container's.
POD_MOUNTINFO = (
    "1200 1190 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    "1201 1190 0:31 /kubepods/pod1/c1 /mnt/host\\040cg ro - cgroup2 cgroup2 rw\n"
)


def test_the_hierarchies_and_this_process_cgroup_in_each_are_read_from_proc() -> None:
    found = {
        (h.version, tuple(sorted(h.controllers))): h.own
        for h in _hierarchies(HYBRID_MOUNTINFO, HYBRID_CGROUP)
    }
    assert found == {
        (1, ("cpu",)): Path("/sys/fs/cgroup/cpu"),
        (1, ("cpuacct",)): Path("/sys/fs/cgroup/cpuacct"),
        (1, ("memory",)): Path("/sys/fs/cgroup/memory/process_api/29eb"),
        (1, ("pids",)): Path("/sys/fs/cgroup/pids"),
        (1, ("name=systemd",)): Path("/sys/fs/cgroup/systemd"),
        (2, ()): Path("/sys/fs/cgroup/unified"),
    }
    pod = _hierarchies(POD_MOUNTINFO, "0::/\n")
    assert [(h.version, h.own) for h in pod] == [(2, Path("/sys/fs/cgroup"))]
    # The worker moved into its leaf: its own cgroup is then little-worker's parent.
    nested = _hierarchies(POD_MOUNTINFO, "0::/little-worker\n")
    assert nested[0].own == Path("/sys/fs/cgroup/little-worker")


def test_a_limits_setting_the_host_cannot_give_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="LITTLE_SANDBOX_LIMITS='cgroup3'"):
        cgroups_for({"LITTLE_SANDBOX_LIMITS": "cgroup3"})
    assert cgroups_for({"LITTLE_SANDBOX_LIMITS": "rlimits"}) is None
    not_a_cgroup = {"LITTLE_SANDBOX_LIMITS": "cgroup2", "LITTLE_SANDBOX_CGROUP": str(tmp_path)}
    with pytest.raises(SandboxUnavailableError, match="is not a cgroup2 folder"):
        cgroups_for(not_a_cgroup)
    own = tmp_path / "own"
    own.mkdir()
    result = run_sandboxed(
        ["true"],
        mounts=[Mount(own, "/mnt/scratch/own", writable=True)],
        settings_env={"LITTLE_SANDBOX_LIMITS": "rlimits"},
    )
    assert result.limits == "rlimits" and result.exit_code == 0


# --- cgroup v2, on a stand-in ---------------------------------------------------------------

_V2_FILES = {
    "cgroup.controllers": "cpu memory pids\n",
    "cgroup.subtree_control": "",
    "cgroup.procs": "",
    "cgroup.type": "domain\n",
    "cgroup.kill": "",
    "memory.max": "max\n",
    "memory.swap.max": "max\n",
    "memory.oom.group": "0\n",
    "memory.events": "oom 0\noom_kill 0\n",
    "pids.max": "max\n",
    "cpu.max": "max 100000\n",
    "cpu.stat": "usage_usec 0\n",
}


def _fake_cgroup(folder: Path) -> None:
    for name, text in _V2_FILES.items():
        (folder / name).write_text(text)


def test_cgroup2_mode_delegates_controllers_and_writes_each_commands_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Folders made under the stand-in get the control files a kernel would give them.
    base = tmp_path / "worker.service"
    base.mkdir()
    _fake_cgroup(base)
    real_mkdir = os.mkdir

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777, **kwargs: object) -> None:
        real_mkdir(path, mode)
        if str(path).startswith(str(base)):
            _fake_cgroup(Path(path))

    monkeypatch.setattr(os, "mkdir", mkdir)
    found = cgroups_for({"LITTLE_SANDBOX_LIMITS": "cgroup2", "LITTLE_SANDBOX_CGROUP": str(base)})
    assert found is not None and found.mode == "cgroup2"
    # No processes of its own (a leaf holds them), the controllers handed down every level.
    assert (base / "little-worker").is_dir()
    assert (base / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (base / "little-sandbox" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    limits = SandboxLimits(memory_bytes=512 * 1024 * 1024, processes=32, cpu_cores=0.5)
    command = found.command(limits)
    (folder,) = command.folders
    assert folder.parent.parent == base / "little-sandbox" and folder.name == "c1"
    assert (folder.parent / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    written = {name: (folder / name).read_text() for name in _V2_FILES}
    assert written["memory.max"] == str(512 * 1024 * 1024)
    assert written["memory.swap.max"] == "0"  # memory plus swap: no swap at all
    assert written["memory.oom.group"] == "1"  # an OOM kill ends the whole command
    assert written["pids.max"] == "32"
    assert written["cpu.max"] == "50000 100000"
    # The prefix writes the process's own pid before it executes anything else.
    done = subprocess.run([*command.enter_prefix(), "sh", "-c", "echo $PPID"], capture_output=True)
    assert done.returncode == 0
    assert (folder / "cgroup.procs").read_text().strip().isdigit()
    (folder / "memory.events").write_text("oom 1\noom_kill 1\n")
    (folder / "cpu.stat").write_text("usage_usec 2500000\n")
    assert command.oom_kills() == 1 and command.cpu_seconds() == 2.5
    (folder / "cgroup.procs").write_text("")
    command.close()
    assert (folder / "cgroup.kill").read_text() == "1"


# --- cgroup v1, for real ----------------------------------------------------------------------


def _real_cgroups() -> cgroups.Cgroups:
    found = cgroups_for()
    if found is None:
        pytest.skip("this user may make no cgroup here (limits: rlimits)")
    return found


_CRASHING_WORKER = textwrap.dedent(
    """
    import os, subprocess, sys
    from little_dist.sandbox.cgroups import cgroups_for
    from little_dist.sandbox.limits import SandboxLimits
    command = cgroups_for().command(SandboxLimits())
    quiet = subprocess.DEVNULL  # not this test's pipes: it reads them to their end
    sleeper = subprocess.Popen(
        [*command.enter_prefix(), "sleep", sys.argv[1]], stdout=quiet, stderr=quiet
    )
    while not command.pids():
        pass
    print(command.folders[0], flush=True)
    os.kill(os.getpid(), 9)  # crashes with its command's cgroup and process left behind
    """
)


def test_a_crashed_workers_cgroups_and_processes_are_swept_by_the_next_worker() -> None:
    _real_cgroups()
    pattern = f"sleep 43.{os.getpid()}"
    crashed = subprocess.run(
        [sys.executable, "-c", _CRASHING_WORKER, pattern.split()[1]],
        capture_output=True,
        text=True,
        env={**os.environ},
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    left = Path(crashed.stdout.strip())
    assert left.is_dir() and cgroups._pids(left), crashed.stderr
    next_worker = subprocess.run(
        [
            sys.executable,
            "-c",
            "from little_dist.sandbox.cgroups import cgroups_for; cgroups_for()",
        ],
        capture_output=True,
        text=True,
    )
    assert next_worker.returncode == 0, next_worker.stderr
    assert not left.exists() and not left.parent.exists()
    found = subprocess.run(["pgrep", "-fx", pattern], capture_output=True)
    assert found.stdout == b""


def test_without_cgroup_kill_every_listed_process_is_killed_until_none_is_left() -> None:
    found = _real_cgroups()
    command = found.command(SandboxLimits(processes=64))
    command.unified = None  # as on a kernel before 5.14, or v1 alone
    # A program that keeps starting processes: the kill must catch the ones started meanwhile.
    # (Not a shell loop: CI once saw a fork refused for a moment, "Cannot fork", which ends sh.)
    script = (
        "import subprocess, time\n"
        "while True:\n"
        "    try:\n"
        "        subprocess.Popen(['sleep', '41.5'])\n"
        "    except OSError:\n"
        "        pass\n"
        "    time.sleep(0.01)\n"
    )
    started = subprocess.Popen([*command.enter_prefix(), sys.executable, "-c", script])
    try:
        # (Up to 30 s: a loaded CI machine took more than 4 s to start six processes.)
        deadline = time.monotonic() + 30
        while len(command.pids()) <= 5 and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert len(command.pids()) > 5
        command.kill()
        assert command.pids() == []
    finally:
        started.wait()
        command.close()
    # Removed now, or (processes still leaving) when the next command's are made.
    found.command(SandboxLimits()).close()
    assert not any(folder.exists() for folder in command.folders)


def test_cpu_time_is_bounded_for_all_processes_together(tmp_path: Path) -> None:
    _real_cgroups()
    own = tmp_path / "own"
    own.mkdir()
    # Four spinners sharing one core each reach a quarter of the limit: only their sum passes.
    result = run_sandboxed(
        ["bash", "-c", "for i in 1 2 3 4; do (while :; do :; done) & done; wait"],
        mounts=[Mount(own, "/mnt/scratch/own", writable=True)],
        cwd="/mnt/scratch/own",
        limits=SandboxLimits(cpu_seconds=2, cpu_cores=1, wall_seconds=600),
    )
    assert result.limits in ("cgroup1", "cgroup2")
    assert result.stopped == "cpu" and result.exit_code == 128 + 9
    assert "used its CPU time (2 s, all its processes together)" in result.stderr


# --- the wall clock against a process that left its session --------------------------------


def test_a_process_that_leaves_its_session_does_not_hold_the_command(
    tmp_path: Path,
) -> None:
    # Without namespaces (the rlimits isolation, opted into), a process can leave the
    # command's session and process group and keep its output pipe.
    own = tmp_path / "own"
    own.mkdir()
    pattern = f"sleep 1000.{os.getpid()}"
    escape = (
        f"setsid {pattern} & "
        'until [ "$(cut -d" " -f6 /proc/$!/stat)" = "$!" ]; do sleep 0.01; done; echo escaped'
    )
    settings = {
        "LITTLE_SANDBOX_BWRAP": str(refusing_bwrap(tmp_path)),
        "LITTLE_SANDBOX_ISOLATION": "rlimits",
    }
    try:
        for limits_mode in ("auto", "rlimits"):
            result = run_sandboxed(
                ["bash", "-c", escape],
                mounts=[Mount(own, "/mnt/scratch/own", writable=True)],
                cwd="/mnt/scratch/own",
                limits=SandboxLimits(wall_seconds=3),
                settings_env={**settings, "LITTLE_SANDBOX_LIMITS": limits_mode},
            )
            assert result.isolation == "rlimits" and result.stdout == "escaped\n"
            if result.limits == "rlimits":
                # The weaker promise: the call returns at its wall limit; the process, which
                # nothing on the host can name, outlives it (ended below).
                assert result.stopped == "timeout"
            else:
                # Its cgroup named it: it ended with the command's shell.
                assert result.stopped is None and result.exit_code == 0
                left = subprocess.run(["pgrep", "-fx", pattern], capture_output=True)
                assert left.stdout == b""
    finally:
        left = subprocess.run(["pgrep", "-fx", pattern], capture_output=True, text=True)
        for pid in left.stdout.split():
            os.kill(int(pid), signal.SIGKILL)


# --- the disk walk ----------------------------------------------------------------------------


def test_the_disk_walk_counts_what_is_allocated_and_follows_nothing(tmp_path: Path) -> None:
    root = tmp_path / "own"
    root.mkdir()
    (root / "data").write_bytes(b"x" * (1 << 20))
    os.link(root / "data", root / "data-again")  # one file, two names: counted once
    with open(root / "sparse", "wb") as sparse:  # 1 GiB long, nothing allocated
        sparse.truncate(1 << 30)
    (root / "host").symlink_to("/")
    (root / "zero").symlink_to("/dev/zero")
    os.mkfifo(root / "fifo")
    use = disk_use([root], max_entries=100)
    assert use.problem is None and use.entries == 6
    assert (1 << 20) <= use.bytes < (1 << 20) + 64 * 1024
    deep = root / "/".join(["d"] * 70)
    deep.mkdir(parents=True)
    assert "deeper than 64 levels" in str(disk_use([root], max_entries=1000).problem)
    assert "more than 5 entries" in str(disk_use([root], max_entries=5).problem)


# --- sandbox user ids -------------------------------------------------------------------------


def test_live_commands_never_share_a_user_id_across_threads_and_processes() -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root worker runs commands as user ids of their own")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom contextlib import ExitStack\n"
            "from little_dist.sandbox.uids import leased_uid\n"
            "with ExitStack() as held:\n"
            "    print(*[held.enter_context(leased_uid()) for _ in range(200)], flush=True)\n"
            "    sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        theirs = {int(uid) for uid in holder.stdout.readline().split()}
        ours: list[int] = []
        leases = [uids.leased_uid() for _ in range(200)]
        threads = [
            threading.Thread(target=lambda lease=lease: ours.append(lease.__enter__()))
            for lease in leases
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(theirs) == 200 and len(set(ours)) == 200
        assert not theirs & set(ours)
        for lease in leases:
            lease.__exit__(None, None, None)
    finally:
        holder.communicate("")


_HOLDING_WORKER = textwrap.dedent(
    """
    import sys
    from little_dist.sandbox.cgroups import cgroups_for
    found = cgroups_for()
    print("\\n".join(str(tree.folder) for tree in found._trees), flush=True)
    sys.stdin.read()  # holds its folders until told to end
    """
)


def _in_memory_cgroup(name: str) -> tuple[Path, list[str]]:
    """A memory cgroup of its own below this process's, and a command prefix that enters it."""
    own = next(
        line.split(":", 2)[2]
        for line in Path("/proc/self/cgroup").read_text().splitlines()
        if line.split(":")[1] == "memory"
    )
    folder = Path("/sys/fs/cgroup/memory") / own.lstrip("/") / f"{name}-{os.getpid()}"
    folder.mkdir(exist_ok=True)
    return folder, ["sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "$@"', "sh"]


def test_a_live_worker_in_another_cgroup_is_never_swept_by_a_worker_starting() -> None:
    """Two workers of one host in different memory cgroups share the pids and cpu hierarchies'
    folders: the one starting must judge each folder by its own lock, not take the other's
    for dead because its memory folder is not where it looks."""
    _real_cgroups()
    first_cgroup, enter_first = _in_memory_cgroup("little-test-a")
    second_cgroup, enter_second = _in_memory_cgroup("little-test-b")
    holder = subprocess.Popen(
        [*enter_first, sys.executable, "-c", _HOLDING_WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        folders = [Path(holder.stdout.readline().strip()) for _ in range(3)]
        assert all(folder.is_dir() for folder in folders), folders
        assert len({folder.parents[1] for folder in folders}) == 3  # three hierarchies
        starting = subprocess.run(
            [
                *enter_second,
                sys.executable,
                "-c",
                "from little_dist.sandbox.cgroups import cgroups_for; cgroups_for()",
            ],
            capture_output=True,
            text=True,
        )
        assert starting.returncode == 0, starting.stderr
        assert all(folder.is_dir() for folder in folders), folders
    finally:
        holder.communicate("", timeout=60)
        for folder in (first_cgroup, second_cgroup):
            with contextlib.suppress(OSError):
                folder.rmdir()
