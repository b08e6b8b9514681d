"""The memory stores of both Worlds, one test body: LocalWorld's files + SQLite index and
RedisS3World's S3 blobs + Redis index keep versions, order two commits to one file by
compare-and-set, keep the loser's change as a conflict copy, and refuse paths that leave
the store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from little_dist.memory import (
    MemoryChange,
    MemoryPathError,
    MemoryStore,
    conflict_path,
    memory_store_for,
)
from little_dist.world.local import LocalWorld
from tests.conftest_services import S3Service

STORE = "workflow:notes-demo"


def _redis_s3_world(redis_url: str, prefix: str, s3: S3Service) -> object:
    from urllib.parse import quote

    from little_dist.world.redis_s3 import RedisS3World

    return RedisS3World.from_url(
        f"{redis_url}?key_prefix={quote(prefix)}&s3_prefix={quote(s3.prefix)}",
        s3_endpoint=s3.endpoint,
        s3_bucket=s3.bucket,
        aws_access_key_id=s3.access_key_id,
        aws_secret_access_key=s3.secret_access_key,
    )


@pytest.fixture(
    params=["local", pytest.param("redis_s3", marks=pytest.mark.integration)],
)
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], MemoryStore]]:
    """A factory of stores over one World's storage (each call: another client, as another
    process would have)."""
    if request.param == "local":
        yield lambda: memory_store_for(LocalWorld(tmp_path / "data"))
        return
    redis_url: str = request.getfixturevalue("redis_url")
    prefix: str = request.getfixturevalue("redis_key_prefix") + f"{tmp_path.name}:"
    s3: S3Service = request.getfixturevalue("s3_service")
    worlds: list[object] = []

    def make() -> MemoryStore:
        world = _redis_s3_world(redis_url, prefix, s3)
        worlds.append(world)
        return memory_store_for(world)  # type: ignore[arg-type]

    yield make
    for world in worlds:
        world.close()  # type: ignore[attr-defined]


def _content(store: MemoryStore, path: str) -> bytes:
    return store.read(STORE, store.entries(STORE)[path])


def test_a_write_is_read_back_by_another_client_with_its_version(
    make_store: Callable[[], MemoryStore],
) -> None:
    writer, reader = make_store(), make_store()
    assert reader.entries(STORE) == {}
    (applied,) = writer.commit(STORE, [MemoryChange("a/notes.md", 0, b"one")], writer="w1")
    assert (applied.outcome, applied.version) == ("written", 1)
    entry = reader.entries(STORE)["a/notes.md"]
    assert (entry.version, entry.size) == (1, 3)
    assert _content(reader, "a/notes.md") == b"one"
    (again,) = writer.commit(STORE, [MemoryChange("a/notes.md", 1, b"two")], writer="w1")
    assert (again.outcome, again.version) == ("written", 2)
    assert _content(reader, "a/notes.md") == b"two"
    assert reader.entries("workflow:other") == {}  # stores are apart


def test_two_commits_from_one_version_keep_both_changes(
    make_store: Callable[[], MemoryStore],
) -> None:
    store = make_store()
    store.commit(STORE, [MemoryChange("notes.md", 0, b"base")], writer="seed")
    (first,) = store.commit(STORE, [MemoryChange("notes.md", 1, b"from A")], writer="run-a")
    (second,) = make_store().commit(STORE, [MemoryChange("notes.md", 1, b"from B")], writer="run-b")
    assert first.outcome == "written"
    assert second.outcome == "conflict"
    assert second.conflict_path == "notes.conflict-run-b.md"
    assert (second.current, first.version) == (2, 2)
    assert _content(store, "notes.md") == b"from A"
    assert _content(store, "notes.conflict-run-b.md") == b"from B"


def test_rewriting_what_a_path_holds_is_a_no_op_even_from_an_old_version(
    make_store: Callable[[], MemoryStore],
) -> None:
    store = make_store()
    store.commit(STORE, [MemoryChange("n.txt", 0, b"x")], writer="w")
    (applied,) = store.commit(STORE, [MemoryChange("n.txt", 0, b"x")], writer="retry")
    assert (applied.outcome, applied.version) == ("unchanged", 1)
    assert sorted(store.entries(STORE)) == ["n.txt"]


def test_a_delete_leaves_a_tombstone_and_a_stale_delete_keeps_the_newer_file(
    make_store: Callable[[], MemoryStore],
) -> None:
    store = make_store()
    store.commit(STORE, [MemoryChange("n.txt", 0, b"x")], writer="w")
    (deleted,) = store.commit(STORE, [MemoryChange("n.txt", 1, None)], writer="w")
    assert (deleted.outcome, deleted.version) == ("deleted", 2)
    tomb = store.entries(STORE)["n.txt"]
    assert (tomb.exists, tomb.version) == (False, 2)
    # Made from "absent before it ever existed": the tombstone is a newer version.
    (late,) = store.commit(STORE, [MemoryChange("n.txt", 0, b"late")], writer="old")
    assert late.outcome == "conflict"
    store.commit(STORE, [MemoryChange("n.txt", 2, b"again")], writer="w")
    (stale,) = store.commit(STORE, [MemoryChange("n.txt", 1, None)], writer="stale")
    assert stale.outcome == "conflict-dropped"
    assert _content(store, "n.txt") == b"again"


def test_concurrent_writers_of_one_file_lose_nothing(
    make_store: Callable[[], MemoryStore],
) -> None:
    writers = 8
    stores = [make_store() for _ in range(writers)]
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            barrier.wait()
            change = MemoryChange("shared.txt", 0, f"writer {index}".encode())
            stores[index].commit(STORE, [change], writer=f"w{index}")
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store = stores[0]
    contents = {store.read(STORE, entry) for entry in store.entries(STORE).values()}
    assert contents == {f"writer {i}".encode() for i in range(writers)}
    assert store.entries(STORE)["shared.txt"].version == 1  # one won, the rest are copies
    assert len(store.entries(STORE)) == writers


@pytest.mark.parametrize(
    "path",
    [
        "../escape.txt",
        "a/../../escape.txt",
        "/etc/passwd",
        "a\0b",
        "x/" * 600 + "f",
        "a" * 300,
        "",
        ".",
        "a/",
        "a//b",
        "./a",
    ],
)
def test_paths_that_leave_the_store_or_cannot_be_kept_are_refused_and_nothing_changes(
    make_store: Callable[[], MemoryStore], path: str
) -> None:
    store = make_store()
    store.commit(STORE, [MemoryChange("keep.txt", 0, b"k")], writer="w")
    with pytest.raises(MemoryPathError):
        store.commit(
            STORE, [MemoryChange("ok.txt", 0, b"ok"), MemoryChange(path, 0, b"bad")], writer="w"
        )
    assert sorted(store.entries(STORE)) == ["keep.txt"]


def test_a_conflict_copy_keeps_its_extension_and_stays_a_legal_name() -> None:
    assert conflict_path("dir/notes.md", "run_1-step-a2") == "dir/notes.conflict-run_1-step-a2.md"
    assert conflict_path("README", "w") == "README.conflict-w"
    assert conflict_path(".env", "w") == ".env.conflict-w"
    long = conflict_path("n" * 250 + ".txt", "run/x:y")
    assert long.endswith(".conflict-run-x-y.txt") and len(long.encode()) <= 255
