"""``little_dist.bounded_read``: a named file is read only if it is a regular file, and never
more than its bound; a stream is read up to its bound plus one byte. Also the library places
that read files a user names (skill folders, a scripted model's file), each in a process with
little address space, where reading the whole of something endless fails differently.
(The CLI's commands are tried in ``tests/test_cli_bad_input.py``.)"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from little_dist.bounded_read import (
    ReadRefusedError,
    ReadTooLargeError,
    read_file,
    read_stream,
)
from little_dist.errors import InvalidInputError

ROOT = Path(__file__).parent.parent


def test_a_regular_file_up_to_the_bound_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert read_file(path, 10) == b"x" * 10
    assert read_file(str(path), 11) == b"x" * 10


def test_one_byte_over_the_bound_is_refused_naming_the_bound_and_where_it_comes_from(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 11)
    with pytest.raises(ReadTooLargeError) as caught:
        read_file(path, 10, label="the file", why="SOME_LIMIT")
    assert str(caught.value) == "the file: more than 10 bytes, too big to read (SOME_LIMIT)"
    assert caught.value.limit == 10 and isinstance(caught.value, InvalidInputError)


def test_a_file_that_says_it_is_empty_is_still_read_with_the_bound() -> None:
    # /proc files say 0 bytes and hold more: the bound is kept while reading, not only by size.
    assert read_file("/proc/self/status", 1 << 20).startswith(b"Name:")
    with pytest.raises(ReadTooLargeError):
        read_file("/proc/self/status", 16)


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("fifo", "not a regular file (a FIFO); use - instead"),
        ("device", "not a regular file (a character device); use - instead"),
        ("folder", "is a directory"),
        ("missing", "no such file"),
        ("below a file", "not a directory"),
    ],
)
def test_what_is_not_a_regular_file_is_refused_without_waiting(
    tmp_path: Path, kind: str, said: str
) -> None:
    path = {
        "fifo": tmp_path / "fifo",
        "device": Path("/dev/zero"),
        "folder": tmp_path,
        "missing": tmp_path / "missing",
        "below a file": tmp_path / "file" / "x",
    }[kind]
    if kind == "fifo":
        os.mkfifo(path)  # no writer: an open for reading would wait forever
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReadRefusedError) as caught:
        read_file(path, 100, stream_hint="use - instead")
    assert str(caught.value) == f"cannot read {path}: {said}"


def test_a_link_to_a_regular_file_is_read_and_a_link_to_a_device_is_not(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"ok")
    (tmp_path / "to-real").symlink_to(tmp_path / "real")
    (tmp_path / "to-zero").symlink_to("/dev/zero")
    assert read_file(tmp_path / "to-real", 10) == b"ok"
    with pytest.raises(ReadRefusedError, match="a character device"):
        read_file(tmp_path / "to-zero", 10)


def test_a_stream_is_read_to_its_end_or_to_one_byte_past_the_bound() -> None:
    assert read_stream(io.BytesIO(b"abc"), 3, label="<stdin>") == b"abc"
    stream = io.BytesIO(b"x" * 1000)
    with pytest.raises(ReadTooLargeError, match=r"^<stdin>: more than 3 bytes, too big"):
        read_stream(stream, 3, label="<stdin>")
    assert stream.tell() == 4  # nothing more was read


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a Python process with 1 GiB of address space: an unbounded read of a 2 GiB
    file (or of /dev/zero) is a MemoryError there, a bounded one is not."""
    return subprocess.run(
        ["prlimit", f"--as={1024**3}", "--", sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _sparse(path: Path, size: int = 2 * 1024**3) -> Path:
    with path.open("wb") as file:
        file.truncate(size)  # takes no disk
    return path


LOAD_SKILL = """
import sys
from little_dist.skills import SkillError, load_skill
try:
    load_skill(sys.argv[1])
except SkillError as error:
    print(error)
"""


@pytest.mark.parametrize("layout", ["single file", "folder"])
def test_a_skill_file_over_the_skill_bound_is_refused_unread(tmp_path: Path, layout: str) -> None:
    if layout == "single file":
        source = _sparse(tmp_path / "huge.md")
        expected = f"skill file {source}: more than 16777216 bytes"
    else:
        source = tmp_path / "huge"
        source.mkdir()
        (source / "SKILL.md").write_text("---\nname: huge\ndescription: d\n---\nx\n")
        _sparse(source / "reference.txt")
        expected = f"skill folder {source}: more than 1000 files or 16777216 bytes"
    done = _python(LOAD_SKILL, str(source))
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == expected


LOAD_SCRIPT = """
import sys
from little_dist.errors import InvalidInputError
from little_dist.testing import install_from_file
try:
    install_from_file(sys.argv[1])
except InvalidInputError as error:
    print(error)
"""


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("/dev/zero", "cannot read scripted model file /dev/zero: not a regular file"),
        ("huge", "more than 67,108,864 bytes, too big to read"),
    ],
)
def test_a_scripted_model_file_is_read_with_a_bound(tmp_path: Path, source: str, said: str) -> None:
    path = source if source.startswith("/") else str(_sparse(tmp_path / source))
    done = _python(LOAD_SCRIPT, path)
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr[-2000:]
    assert said in done.stdout
