"""Outer-loop manifests in every World, one test body: LocalWorld's file (upstream's path and
bytes, atomic, locked), RedisS3World's Redis hash (mirrored to S3) and MemoryWorld's dict
are written by compare-and-set: of two writers from one version exactly one lands."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError
from little_dist.outer_loop import (
    CycleSummary,
    ManifestConflictError,
    ManifestStore,
    OuterLoopGoal,
    OuterLoopManifest,
    manifest_store_for,
)
from little_dist.outer_loop.manifest import manifest_text
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.conftest_services import S3Service

LOOP = "ol_store_test"
GOAL = OuterLoopGoal("sha256:" + "a" * 64, "Summarize a ticket.")


def manifest(*cycles: CycleSummary, **fields: object) -> OuterLoopManifest:
    return OuterLoopManifest(LOOP, GOAL, 3, tuple(cycles), **fields)  # type: ignore[arg-type]


def cycle(number: int, **fields: object) -> CycleSummary:
    return CycleSummary(
        number, f"run_cycle{number}", "wfver_0123456789abcdef", "completed", {"n": number}, **fields
    )  # type: ignore[arg-type]


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
    params=["local", "memory", pytest.param("redis_s3", marks=pytest.mark.integration)],
)
def make_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], ManifestStore]]:
    """A factory of stores over one World's storage (each call: another client, as another
    process would have; MemoryWorld has one process, so one world)."""
    if request.param == "local":
        yield lambda: manifest_store_for(LocalWorld(tmp_path / "data"))
        return
    if request.param == "memory":
        world = MemoryWorld()
        yield lambda: manifest_store_for(world)
        return
    redis_url: str = request.getfixturevalue("redis_url")
    prefix: str = request.getfixturevalue("redis_key_prefix") + f"{tmp_path.name}:"
    s3: S3Service = request.getfixturevalue("s3_service")
    worlds: list[object] = []

    def make() -> ManifestStore:
        made = _redis_s3_world(redis_url, prefix, s3)
        worlds.append(made)
        return manifest_store_for(made)  # type: ignore[arg-type]

    yield make
    for made in worlds:
        made.close()  # type: ignore[attr-defined]


def test_a_manifest_is_read_back_by_another_client_with_its_etag(
    make_store: Callable[[], ManifestStore],
) -> None:
    writer, reader = make_store(), make_store()
    assert reader.read(LOOP) is None
    first = manifest(pending_cycle_run_id="run_cycle1")
    etag = writer.write(first, expected=None)
    stored = reader.read(LOOP)
    assert stored is not None and stored.manifest == first and stored.etag == etag
    done = manifest(cycle(1, summary="note"), done=True, final_output={"answer": 42})
    etag2 = reader.write(done, expected=etag)
    again = writer.read(LOOP)
    assert again is not None and again.manifest == done and again.etag == etag2 != etag


def test_a_write_from_a_stale_version_is_refused_and_changes_nothing(
    make_store: Callable[[], ManifestStore],
) -> None:
    store = make_store()
    etag = store.write(manifest(pending_cycle_run_id="run_cycle1"), expected=None)
    advanced = manifest(cycle(1))
    store.write(advanced, expected=etag)
    with pytest.raises(ManifestConflictError, match="ol_store_test"):
        make_store().write(manifest(cycle(1), cycle(2)), expected=etag)
    with pytest.raises(ManifestConflictError):
        make_store().write(manifest(), expected=None)  # "none stored yet" is stale too
    stored = store.read(LOOP)
    assert stored is not None and stored.manifest == advanced


def test_two_concurrent_writers_from_one_version_exactly_one_wins(
    make_store: Callable[[], ManifestStore],
) -> None:
    base = make_store().write(manifest(pending_cycle_run_id="run_cycle1"), expected=None)
    writers = 8
    stores = [make_store() for _ in range(writers)]
    barrier = threading.Barrier(writers)
    won: list[int] = []
    lost: list[int] = []
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            barrier.wait()
            stores[index].write(manifest(cycle(1, summary=f"writer {index}")), expected=base)
            won.append(index)
        except ManifestConflictError:
            lost.append(index)
        except BaseException as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(won) == 1 and len(lost) == writers - 1
    stored = stores[0].read(LOOP)
    assert stored is not None and stored.manifest.cycles[0].summary == f"writer {won[0]}"


def test_ids_that_are_not_outer_loop_ids_are_refused(
    make_store: Callable[[], ManifestStore],
) -> None:
    store = make_store()
    for bad in ("run_x", "ol_", "ol_../../etc", "ol_" + "a" * 81, "ol_a b"):
        with pytest.raises(InvalidInputError, match="Invalid outer-loop id"):
            store.read(bad)


def test_local_world_keeps_upstreams_file_in_its_data_directory(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    store = manifest_store_for(world)
    written = manifest(cycle(1, summary="focus"), done=True, final_output=[1, 2.0])
    store.write(written, expected=None)
    path = tmp_path / "data" / "outer-loops" / f"{LOOP}.json"
    text = path.read_text("utf-8")
    assert text == canonical_json(json.loads(text)) + "\n"  # canonical JSON and a newline
    assert json.loads(text) == {
        "outerLoopId": LOOP,
        "goal": {
            "workflowDefinitionHash": GOAL.workflow_definition_hash,
            "description": GOAL.description,
        },
        "maxCycles": 3,
        "cycles": [
            {
                "cycleNumber": 1,
                "runId": "run_cycle1",
                "workflowVersionId": "wfver_0123456789abcdef",
                "status": "completed",
                "output": {"n": 1},
                "summary": "focus",
            }
        ],
        "result": {"kind": "done", "finalOutput": [1, 2]},
    }
    assert [p.name for p in path.parent.iterdir()] == [f"{LOOP}.json"]  # upstream's only


def test_a_corrupt_local_manifest_is_named_with_its_path(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    folder = tmp_path / "data" / "outer-loops"
    folder.mkdir(parents=True)
    (folder / f"{LOOP}.json").write_text('{"outerLoopId": "ol_store_test", "goal": 3}')
    with pytest.raises(InvalidInputError, match=r"ol_store_test\.json.*'goal'"):
        manifest_store_for(world).read(LOOP)


@pytest.mark.integration
def test_redis_s3_mirrors_every_revision_to_an_immutable_object(
    redis_url: str, redis_key_prefix: str, s3_service: S3Service, tmp_path: Path
) -> None:
    from little_dist.outer_loop.redis_s3 import RedisS3ManifestStore

    world = _redis_s3_world(redis_url, redis_key_prefix + f"{tmp_path.name}:", s3_service)
    try:
        store = manifest_store_for(world)  # type: ignore[arg-type]
        assert isinstance(store, RedisS3ManifestStore)
        first = manifest(pending_cycle_run_id="run_cycle1")
        second = manifest(cycle(1))
        etag = store.write(first, expected=None)
        store.write(second, expected=etag)
        objects = world._s3  # type: ignore[attr-defined]
        for revision, written in ((1, first), (2, second)):
            text = manifest_text(written).encode("utf-8")
            body = objects.get(store.mirror_key(LOOP, revision, text))
            assert body == text
            assert json.loads(body) == written.to_json()
    finally:
        world.close()  # type: ignore[attr-defined]
