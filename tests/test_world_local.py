"""LocalWorld runs the world conformance suite, including real 'spawn' processes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from little_dist.errors import InvalidInputError, StorageUnavailableError
from little_dist.events import EventInput
from little_dist.settings import SettingsError
from little_dist.world.base import ArtifactCorruptError, ArtifactInput, World
from little_dist.world.factory import is_cross_process, open_world
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.world_suite import CrossProcessConformance, FakeClock, WorldConformance, WorldHandle


class TestLocalWorld(WorldConformance, CrossProcessConformance):
    @pytest.fixture
    def make_world(self, tmp_path: Path) -> Callable[[], WorldHandle]:
        count = 0

        def make() -> WorldHandle:
            nonlocal count
            count += 1
            data_dir = tmp_path / f"world-{count}"
            clock = FakeClock()
            world = LocalWorld(data_dir, clock=clock)
            return WorldHandle(
                world=world,
                blob_count=world._blob_count,
                advance=clock.advance,
                spec=f"local:{data_dir}",
            )

        return make


def _event(step: str) -> EventInput:
    return EventInput(type="StepScheduled", payload={"stepPath": step})


def test_layout_matches_upstream(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    world.append(
        "run_a", EventInput(type="StepScheduled", payload={"stepPath": "x"}, occurrence_id="o")
    )
    manifest = world.put_artifact(ArtifactInput(run_id="run_a", name="n", payload="text"))
    world.register_version("wfver_0123456789abcdef", {"a": 1})
    world.close()
    assert (tmp_path / "events" / "events.db").is_file()
    stored = json.loads((tmp_path / "artifacts" / f"{manifest.artifact_id}.json").read_text())
    assert stored == manifest.to_json()
    assert (tmp_path / "artifacts" / "blobs" / manifest.sha256[7:]).read_bytes() == b"text"
    assert (tmp_path / "versions" / "wfver_0123456789abcdef.json").read_text() == '{"a":1}\n'
    # The events table is upstream's: another reader of events.db sees the same rows.
    with sqlite3.connect(tmp_path / "events" / "events.db") as conn:
        rows = conn.execute(
            "SELECT run_id, sequence, type, occurrence_id, payload FROM events"
        ).fetchall()
        (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
    assert rows == [("run_a", 1, "StepScheduled", "o", '{"stepPath":"x"}')]
    assert mode == "wal"


def test_state_survives_reopening(tmp_path: Path) -> None:
    clock = FakeClock()
    world = LocalWorld(tmp_path, clock=clock)
    appended = world.append_batch("run_a", [_event("a"), _event("b")])
    lease = world.acquire_lease("k", "w1", 10)
    world.close()
    reopened = LocalWorld(tmp_path, clock=clock)
    assert reopened.list_events("run_a") == appended
    assert reopened.acquire_lease("k", "w2", 10) is None
    clock.advance(11)
    taken = reopened.acquire_lease("k", "w2", 10)
    assert lease is not None and taken is not None and taken.token == lease.token + 1
    reopened.close()


def test_tampered_blob_is_detected(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    manifest = world.put_artifact(ArtifactInput(run_id="run_a", name="n", payload={"x": 1}))
    (tmp_path / "artifacts" / "blobs" / manifest.sha256[7:]).write_bytes(b'{"x":2}')
    with pytest.raises(ArtifactCorruptError, match="sha256"):
        world.get_artifact(manifest.artifact_ref)


def test_malformed_manifest_is_detected(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    manifest = world.put_artifact(ArtifactInput(run_id="run_a", name="n", payload="x"))
    (tmp_path / "artifacts" / f"{manifest.artifact_id}.json").write_text("{not json")
    with pytest.raises(ArtifactCorruptError, match="malformed"):
        world.get_artifact(manifest.artifact_ref)


def test_closed_world_refuses_calls(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    world.close()
    with pytest.raises(StorageUnavailableError):
        world.append("run_a", _event("a"))


def test_unusable_data_dir_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageUnavailableError) as caught:
        LocalWorld(blocker / "world")
    assert isinstance(caught.value.__cause__, OSError)


def test_sqlite_errors_become_storage_errors(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path)
    world.append("run_a", _event("a"))
    with sqlite3.connect(tmp_path / "events" / "events.db") as conn:
        conn.execute("DROP TABLE events")
    with pytest.raises(StorageUnavailableError) as caught:
        world.list_events("run_a")
    assert isinstance(caught.value.__cause__, sqlite3.Error)


# -- open_world ---------------------------------------------------------------------------------


def test_open_world_specs(tmp_path: Path) -> None:
    plain = open_world(str(tmp_path / "a"))
    explicit = open_world(f"local:{tmp_path / 'b'}")
    memory = open_world("memory:")
    assert isinstance(plain, LocalWorld) and plain.data_dir == tmp_path / "a"
    assert isinstance(explicit, LocalWorld) and explicit.data_dir == tmp_path / "b"
    assert isinstance(memory, MemoryWorld)
    assert all(isinstance(w, World) for w in (plain, explicit, memory))
    assert not is_cross_process("memory:")
    assert is_cross_process(f"local:{tmp_path}")
    # The same directory is the same world.
    plain.append("run_x", _event("a"))
    assert [e.sequence for e in open_world(f"local:{tmp_path / 'a'}").list_events("run_x")] == [1]


@pytest.mark.parametrize("spec", ["", "  ", "local:", "s3://bucket/x", "http://host"])
def test_open_world_refuses_bad_specs(spec: str) -> None:
    with pytest.raises(InvalidInputError):
        open_world(spec)


def test_redis_spec_needs_a_bucket() -> None:
    with pytest.raises(InvalidInputError, match="LITTLE_S3_BUCKET"):
        open_world("redis://127.0.0.1:6379/0", env={})


def test_a_redis_spec_reads_s3_from_the_settings_one_parser_for_every_process() -> None:
    # The same checks as every fleet process's settings: a bad value is named, with the
    # variable, before anything is opened.
    with pytest.raises(SettingsError, match="LITTLE_S3_ENDPOINT='ftp://s3'"):
        open_world(
            "redis://127.0.0.1:6379/0",
            env={"LITTLE_S3_ENDPOINT": "ftp://s3", "LITTLE_S3_BUCKET": "little"},
        )
