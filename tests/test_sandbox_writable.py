"""The host's access to sandbox-writable folders (little_dist.sandbox.writable), attacked
directly: links, FIFOs, devices, deep and wide trees, taken-away permissions, odd names. The
same attacks through real workflow runs are in tests/test_sandbox_host_links.py."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from little_dist.sandbox.writable import (
    MAX_DEPTH,
    UnsafeEntryError,
    WritableFolder,
    remove_tree,
)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host folder outside the writable one, with a secret and a bystander."""
    folder = tmp_path / "host"
    folder.mkdir()
    (folder / "secret").write_text("s3cr3t")
    (folder / "bystander").write_text("untouched")
    return folder


@pytest.fixture
def writable(tmp_path: Path) -> Path:
    folder = tmp_path / "own"
    folder.mkdir()
    return folder


def _deep(root: Path, levels: int) -> None:
    """A chain of ``levels`` folders under ``root``, made without long paths."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def test_a_read_never_follows_a_link_to_a_file_or_through_a_linked_folder(
    writable: Path, outside: Path
) -> None:
    (writable / "env").symlink_to(outside / "secret")
    (writable / "up").symlink_to(outside)
    with WritableFolder(writable) as folder:
        with pytest.raises(UnsafeEntryError, match=r"'env'.*symlink"):
            folder.read("env", 1024)
        with pytest.raises(UnsafeEntryError, match=r"'up'.*symlink"):
            folder.read("up/secret", 1024)
        assert folder.read_if_file("env", 1024) is None


def test_a_read_refuses_fifos_devices_and_files_over_the_limit_without_blocking(
    writable: Path,
) -> None:
    os.mkfifo(writable / "cwd")
    (writable / "zero").symlink_to("/dev/zero")
    (writable / "big").write_bytes(b"x" * 2048)
    done: list[str] = []

    def read_all() -> None:
        with WritableFolder(writable) as folder:
            for name in ("cwd", "zero", "big"):
                with pytest.raises(UnsafeEntryError) as caught:
                    folder.read(name, 1024)
                done.append(str(caught.value))

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    reader.join(timeout=30)
    assert not reader.is_alive(), "a read blocked on a FIFO"
    assert "a FIFO, not a file" in done[0]
    assert "symlink" in done[1]
    assert "2048 bytes, over 1024" in done[2]


def test_a_write_replaces_a_planted_link_and_never_writes_through_it(
    writable: Path, outside: Path
) -> None:
    (writable / "env").symlink_to(outside / "bystander")
    (writable / "results").symlink_to(outside)
    os.mkfifo(writable / "fifo")
    with WritableFolder(writable) as folder:
        folder.write("env", b"exports")
        folder.write("fifo", b"data")
        with pytest.raises(UnsafeEntryError, match=r"'results'.*symlink"):
            folder.write("results/run/output.json", b"{}")
        assert not folder.make_folders("results/run")
    assert (outside / "bystander").read_text() == "untouched"
    assert sorted(os.listdir(outside)) == ["bystander", "secret"]
    assert (writable / "env").read_bytes() == b"exports" and not (writable / "env").is_symlink()
    assert (writable / "fifo").read_bytes() == b"data"


def test_paths_that_leave_the_folder_are_refused(writable: Path) -> None:
    with WritableFolder(writable) as folder:
        for bad in ("../x", "a/../../x", "/etc/passwd", "a\0b"):
            with pytest.raises(UnsafeEntryError):
                folder.write(bad, b"x")


def test_a_walk_yields_links_without_entering_them(writable: Path, outside: Path) -> None:
    (writable / "a").mkdir()
    (writable / "a" / "f.txt").write_text("hi")
    (writable / "a" / "host").symlink_to(outside)
    (writable / "name-\udcff").write_bytes(b"odd")  # not UTF-8
    with WritableFolder(writable) as folder:
        seen = {e.relative: (e.kind, e.read(100) if e.is_file else None) for e in folder.walk()}
    assert seen == {
        "a": ("a folder", None),
        "a/f.txt": ("a file", b"hi"),
        "a/host": ("a symlink", None),
        "name-\udcff": ("a file", b"odd"),
    }


def _held_under(root: Path) -> list[str]:
    """This process's descriptors open on ``root`` or below it."""
    root = root.resolve()  # what /proc shows: no links in the way
    held = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor, another thread's)
        if target == str(root) or target.startswith(f"{root}/"):
            held.append(target)
    return held


def test_a_tree_deeper_than_the_bound_is_refused_with_the_callers_error_not_a_crash(
    writable: Path,
) -> None:
    _deep(writable, 3000)

    class TooDeep(Exception):
        pass

    try:
        with pytest.raises(TooDeep, match="deeper than"), WritableFolder(writable) as folder:
            for _ in folder.walk(error=TooDeep):
                pass
        # every descriptor the walk held (at most one per level) was given back. (Counted
        # by where they point: other threads of this test process open and close their own.)
        assert _held_under(writable) == []
    finally:
        remove_tree(writable)  # pytest's own clean-up of tmp_path would recurse too deep


def test_trees_of_any_depth_are_removed_with_bounded_descriptors(tmp_path: Path) -> None:
    for levels in (MAX_DEPTH * 3, 5000):
        root = tmp_path / f"deep-{levels}"
        root.mkdir()
        _deep(root, levels)
        remove_tree(root)
        assert not root.exists()


def test_removal_removes_links_not_their_targets(writable: Path, outside: Path) -> None:
    (writable / "host").symlink_to(outside)
    (writable / "secret").symlink_to(outside / "secret")
    (writable / "sub").mkdir()
    (writable / "sub" / "host").symlink_to(outside)
    remove_tree(writable)
    assert not writable.exists()
    assert sorted(os.listdir(outside)) == ["bystander", "secret"]


def test_chown_changes_links_themselves_never_their_targets(writable: Path, outside: Path) -> None:
    (writable / "host").symlink_to(outside / "secret")
    (writable / "sub").mkdir()
    (writable / "sub" / "f").write_text("x")
    before = os.stat(outside / "secret")
    with WritableFolder(writable) as folder:
        folder.chown_all(201234, 201234)
    assert os.lstat(writable / "host").st_uid == 201234
    assert os.stat(writable / "sub" / "f").st_uid == 201234
    after = os.stat(outside / "secret")
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)


_AS_OWNER = """
import os, sys
from pathlib import Path
from little_dist.sandbox.writable import WritableFolder, remove_tree
root = Path(sys.argv[1])
(root / "locked" / "inner").mkdir(parents=True)
(root / "locked" / "inner" / "f").write_text("mine")
(root / "locked" / "inner" / "f").chmod(0)
(root / "locked" / "inner").chmod(0)
(root / "locked").chmod(0o500)
with WritableFolder(root) as folder:
    kinds = sorted(entry.relative for entry in folder.walk())
    data = [entry.read(10) for entry in folder.walk() if entry.is_file]
print(kinds, data)
remove_tree(root)
print(root.exists())
"""


def test_an_unprivileged_owner_takes_back_permissions_its_command_took_away(
    tmp_path: Path,
) -> None:
    """A worker that is not root: its command (same uid) made its folders unreadable."""
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"little-writable-{os.getpid()}"
    base.mkdir(mode=0o777)
    base.chmod(0o777)
    root = base / "own"
    try:
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        if os.geteuid() != 0:
            prefix = []
        root_dir = Path(__file__).resolve().parent.parent
        done = subprocess.run(
            [*prefix, sys.executable, "-c", _AS_OWNER, str(root)],
            capture_output=True,
            text=True,
            cwd=root_dir,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root_dir), "HOME": str(base)},
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "['locked', 'locked/inner', 'locked/inner/f'] [b'mine']",
            "False",
        ]
    finally:
        remove_tree(base)
