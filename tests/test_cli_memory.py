"""``little memory ls|cat|put`` through the real command, on a LocalWorld: what a put writes,
ls lists and cat prints; an unknown workflow, a missing file and a path that leaves the store
are one-line errors with exit 1 and change nothing; a missing store name is a usage error."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from little_dist.memory import memory_store_for
from little_dist.world.local import LocalWorld
from tests import zygote


def little(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return zygote.run(
        ["memory", *args],
        input=stdin,
        timeout=60,
        text=False,
    )


def _ok(result: subprocess.CompletedProcess[bytes]) -> str:
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    LocalWorld(tmp_path / "data").close()
    return tmp_path / "data"


def test_put_ls_and_cat_round_trip(data_dir: Path, tmp_path: Path) -> None:
    where = ["--workflow", "Lessons.Flow", "--data-dir", str(data_dir)]
    out = _ok(little("put", "notes/first.md", *where, stdin=b"one\n"))
    assert out == "workflow 'Lessons.Flow': notes/first.md version 1 (4 bytes)\n"
    source = tmp_path / "second.md"
    source.write_bytes(b"two\n")
    _ok(little("put", "notes/first.md", "--from", str(source), *where))
    _ok(little("put", "top.txt", *where, stdin=b"top"))
    assert _ok(little("cat", "notes/first.md", *where)) == "two\n"
    listed = [json.loads(line) for line in _ok(little("ls", "--json", *where)).splitlines()]
    assert [(e["path"], e["version"], e["bytes"]) for e in listed] == [
        ("notes/first.md", 2, 4),
        ("top.txt", 1, 3),
    ]
    assert _ok(little("ls", "notes", *where)).split() == ["4", "v2", "notes/first.md"]
    # The store a run of that workflow mounts at /mnt/memory/workflow/.
    store = memory_store_for(LocalWorld(data_dir))
    assert sorted(store.entries("workflow:lessons-flow")) == ["notes/first.md", "top.txt"]


def test_the_org_store_is_named_by_store_org(data_dir: Path) -> None:
    where = ["--store", "org", "--data-dir", str(data_dir)]
    assert _ok(little("ls", *where)) == ""  # the org store exists, empty
    _ok(little("put", "policy.md", *where, stdin=b"be kind\n"))
    assert _ok(little("cat", "policy.md", *where)) == "be kind\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ls", "--workflow", "nobody"], "no memory for workflow 'nobody'"),
        (["cat", "x.md", "--workflow", "nobody"], "no memory for workflow 'nobody'"),
        (["cat", "missing.md", "--workflow", "known"], "workflow 'known': no file 'missing.md'"),
        (["ls", "nowhere", "--workflow", "known"], "no file under 'nowhere'"),
        (["cat", "../known/a.md", "--workflow", "known"], "'..' would leave the store"),
        (["put", "../escape.md", "--workflow", "known"], "'..' would leave the store"),
        (["put", "/etc/hosts", "--workflow", "known"], "starts with '/'"),
        (["put", "a/" * 600 + "f", "--workflow", "known"], "longer than 1024 bytes"),
        (["put", "x.md", "--from", "/no/such/file", "--workflow", "known"], "--from /no/such"),
        (["ls", "--workflow", "..."], "at least one ASCII letter or number"),
    ],
)
def test_bad_input_is_a_one_line_error_and_changes_nothing(
    data_dir: Path, args: list[str], message: str
) -> None:
    _ok(little("put", "a.md", "--workflow", "known", "--data-dir", str(data_dir), stdin=b"a"))
    before = sorted(p.relative_to(data_dir) for p in (data_dir / "memory").rglob("*"))
    result = little(*args, "--data-dir", str(data_dir), stdin=b"bad")
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert message in stderr and stderr.count("\n") == 1 and "Traceback" not in stderr
    after = sorted(p.relative_to(data_dir) for p in (data_dir / "memory").rglob("*"))
    assert after == before
    store = memory_store_for(LocalWorld(data_dir))
    assert sorted(store.entries("workflow:known")) == ["a.md"]


def test_a_store_must_be_named_and_only_once(data_dir: Path) -> None:
    for args in (["ls"], ["ls", "--workflow", "w", "--store", "org"]):
        result = little(*args, "--data-dir", str(data_dir))
        assert result.returncode == 2
        assert result.stderr.decode().startswith("little memory: error:")


def test_a_missing_world_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    result = little("ls", "--workflow", "w", "--data-dir", str(tmp_path / "none"))
    assert result.returncode == 1 and "no world at" in result.stderr.decode()
    assert not (tmp_path / "none").exists()
