"""The kernel sandbox (little_dist.sandbox) against programs that try to get out.

Each test runs real commands under bubblewrap and checks that the attempt is stopped, says
why, and leaves the host (this test process, its files, its environment) unharmed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from little_dist.errors import InvalidInputError
from little_dist.sandbox import (
    Mount,
    MountError,
    SandboxLimits,
    SandboxUnavailableError,
    run_sandboxed,
)
from tests.sandbox_helpers import refusing_bwrap

TIGHT = SandboxLimits(
    cpu_seconds=1,
    memory_bytes=256 * 1024 * 1024,
    processes=32,
    file_bytes=1024 * 1024,
    wall_seconds=5,
    output_bytes=1000,
    output_kill_bytes=8 * 1024 * 1024,
)


def sh(command: str, tmp_path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    own = tmp_path / "own"
    own.mkdir(exist_ok=True)
    mounts = [Mount(own, "/mnt/scratch/own", writable=True), *kwargs.pop("mounts", [])]  # type: ignore[misc]
    kwargs.setdefault("limits", TIGHT)
    return run_sandboxed(
        ["bash", "-c", command],
        mounts=mounts,
        cwd="/mnt/scratch/own",
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_command_runs_in_its_mount_and_its_files_stay(tmp_path: Path) -> None:
    result = sh("pwd; echo hello > note.txt; python3 -c 'print(6 * 7)'; cat", tmp_path, stdin=b"in")
    assert result.exit_code == 0 and result.stopped is None
    assert result.stdout.splitlines() == ["/mnt/scratch/own", "42", "in"]
    assert result.isolation == "namespaces"
    assert (tmp_path / "own" / "note.txt").read_text() == "hello\n"


def test_the_worker_environment_and_files_are_not_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITTLE_TEST_SECRET", "s3cr3t-value")
    secret_file = tmp_path / "outside" / "secret.txt"
    secret_file.parent.mkdir()
    secret_file.write_text("s3cr3t-file")
    result = sh(
        f"env; cat /proc/*/environ; cat {secret_file}; ls /root /work /etc/shadow; ps -e",
        tmp_path,
    )
    everything = result.stdout + result.stderr
    assert "s3cr3t" not in everything
    assert "No such file or directory" in result.stderr  # the host's paths do not exist
    processes = [line for line in result.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert len(processes) < 6, processes  # its own few processes, not the host's


def test_writes_outside_the_writable_mount_touch_nothing_on_the_host(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "given.txt").write_text("given")
    shared.chmod(0o777)  # open to anyone: only the read-only mount keeps the command out
    (shared / "given.txt").chmod(0o666)
    result = sh(
        "echo x > /usr/evil; echo x > /mnt/shared/given.txt; echo x > /mnt/shared/new;"
        " echo x > /evil; echo x > /tmp/scratch && echo done",
        tmp_path,
        mounts=[Mount(shared, "/mnt/shared", writable=False)],
    )
    assert result.stdout.strip() == "done"  # its private /tmp is writable
    assert result.stderr.count("Read-only file system") == 3
    assert "/evil: Permission denied" in result.stderr
    assert (shared / "given.txt").read_text() == "given"
    assert sorted(os.listdir(shared)) == ["given.txt"]
    assert not Path("/usr/evil").exists() and not Path("/evil").exists()


def test_a_symlink_pointing_out_of_the_mount_leads_nowhere(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside")
    own = tmp_path / "own"
    own.mkdir()
    (own / "link").symlink_to(outside)
    result = sh("cat link; echo changed > link", tmp_path)
    assert "outside" not in result.stdout
    assert "No such file or directory" in result.stderr
    assert outside.read_text() == "outside"


def _odd_sleep(whole: int) -> str:
    """A sleep no other process runs, matched whole: other processes on a shared machine run
    "sleep 300", and other tests (in parallel, or another checkout's) sleeps like this one's."""
    return f"sleep {whole}.{uuid.uuid4().int % 10**8:08d}"


def test_a_fork_bomb_hits_the_process_limit_and_leaves_nothing_running(tmp_path: Path) -> None:
    sleep = _odd_sleep(29)
    result = sh(f"for i in $(seq 200); do {sleep} & done; wait", tmp_path)
    assert result.stopped == "timeout"
    assert "Resource temporarily unavailable" in result.stderr
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-fx", sleep], capture_output=True, text=True)
    assert left.stdout == "", "sandboxed processes outlived the sandbox"
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


def test_memory_past_the_limit_fails_the_allocation(tmp_path: Path) -> None:
    result = sh("python3 -c 'x = bytearray(2 * 1024**3)'", tmp_path)
    assert result.exit_code != 0 and "MemoryError" in result.stderr


def test_a_command_that_runs_forever_is_killed_at_the_wall_clock(tmp_path: Path) -> None:
    started = time.monotonic()
    sleep = _odd_sleep(1000)
    result = sh(sleep, tmp_path, limits=SandboxLimits(wall_seconds=0.5))
    assert result.stopped == "timeout" and result.exit_code == 128 + 9
    assert time.monotonic() - started < 5
    assert subprocess.run(["pgrep", "-f", sleep], capture_output=True).stdout == b""


def test_cpu_time_and_file_size_limits_stop_the_command(tmp_path: Path) -> None:
    # the wall limit far off: on a loaded machine a spinning process gets a fraction of a core,
    # and its one CPU-second must come first
    spin = sh("while :; do :; done", tmp_path, limits=replace(TIGHT, wall_seconds=300))
    assert spin.stopped == "cpu"
    big = sh("head -c 10M /dev/zero > big", tmp_path)
    assert big.stopped == "file_size"
    assert (tmp_path / "own" / "big").stat().st_size == TIGHT.file_bytes


def test_output_is_capped_with_a_marker_and_a_runaway_printer_is_killed(tmp_path: Path) -> None:
    capped = sh("head -c 5000 /dev/zero | tr '\\0' a; echo err >&2", tmp_path)
    assert capped.exit_code == 0 and capped.stopped is None
    assert capped.stdout.startswith("a" * 1000) and capped.stdout_dropped == 4000
    assert capped.stdout.endswith("[output truncated: 4000 more bytes dropped]")
    assert capped.stderr == "err\n"
    started = time.monotonic()
    flood = sh("head -c 1G /dev/zero", tmp_path)
    assert flood.stopped == "output"
    assert time.monotonic() - started < 5


def test_there_is_no_network(tmp_path: Path) -> None:
    probe = (
        "import socket\ntry:\n socket.create_connection(({host!r}, {port}), timeout=2)\n"
        " print('connected')\nexcept OSError as e:\n print('refused', e.errno)"
    )
    outside = sh(f'python3 -c "{probe.format(host="1.1.1.1", port=80)}"', tmp_path)
    assert outside.stdout.startswith("refused")
    redis = sh(f'python3 -c "{probe.format(host="127.0.0.1", port=6379)}"', tmp_path)
    assert redis.stdout.startswith("refused")  # the host's loopback is not its loopback


def test_the_sandbox_refuses_to_run_without_namespaces_unless_opted_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LITTLE_SANDBOX_BWRAP", str(refusing_bwrap(tmp_path)))
    with pytest.raises(SandboxUnavailableError, match="No permissions to create new namespace"):
        sh("echo hi", tmp_path)
    monkeypatch.setenv("LITTLE_SANDBOX_ISOLATION", "rlimits")
    weak = sh("echo hi; pwd", tmp_path)
    assert weak.isolation == "rlimits" and weak.stdout.splitlines()[0] == "hi"
    assert weak.stdout.splitlines()[1] == str((tmp_path / "own").resolve())
    monkeypatch.setenv("LITTLE_SANDBOX_ISOLATION", "none")
    with pytest.raises(InvalidInputError, match="LITTLE_SANDBOX_ISOLATION='none'"):
        sh("echo hi", tmp_path)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("relative/path", "absolute"),
        ("/mnt/../etc", "normalised"),
        ("/mnt/a/", "normalised"),
        ("/usr/lib", "must be under /mnt or /work"),
        ("/mnt/a\0b", "NUL"),
        ("/mnt/" + "a" * 5000, "longer than 4096 bytes"),
    ],
)
def test_unsafe_mount_targets_are_refused(tmp_path: Path, target: str, message: str) -> None:
    with pytest.raises(MountError, match=message):
        Mount(tmp_path, target)


def test_a_read_only_mount_the_sandbox_user_cannot_read_is_refused(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    mounts = [Mount(closed, "/mnt/closed")]
    if os.geteuid() == 0:  # root runs each command as a user of its own
        with pytest.raises(MountError, match=r"not readable by the sandbox's user \(mode 0700\)"):
            sh("true", tmp_path, mounts=mounts)
    else:  # otherwise the command runs as this user, who can read it
        assert sh("ls /mnt/closed", tmp_path, mounts=mounts).exit_code == 0


def test_a_missing_mount_source_and_a_repeated_target_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MountError, match="is not a directory"):
        Mount(tmp_path / "missing", "/mnt/x")
    with pytest.raises(MountError, match="given twice"):
        sh("true", tmp_path, mounts=[Mount(tmp_path, "/mnt/scratch/own")])
    nested = "'/mnt/scratch/own/in' is inside mount '/mnt/scratch/own'"
    with pytest.raises(MountError, match=nested):
        sh("true", tmp_path, mounts=[Mount(tmp_path, "/mnt/scratch/own/in")])


def test_bad_limits_and_commands_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="sandbox limit wall_seconds=0"):
        SandboxLimits(wall_seconds=0)
    with pytest.raises(InvalidInputError, match="non-empty list of strings"):
        run_sandboxed([])
    with pytest.raises(InvalidInputError, match="environment variable 'A=B'"):
        sh("true", tmp_path, env={"A=B": "x"})


def test_a_thread_of_this_process_is_unaffected_by_the_limits(tmp_path: Path) -> None:
    sh("true", tmp_path)
    # the limits were set in the child only: this process may still allocate and fork freely
    big = bytearray(512 * 1024 * 1024)
    assert len(big) and subprocess.run([sys.executable, "-c", "pass"]).returncode == 0
