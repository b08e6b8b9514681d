"""What only some worlds do is a named protocol, found once per world; a world without an
extra takes the fallback way or gets a one-line error naming what it lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from little_dist.errors import InvalidInputError
from little_dist.fleet.versions import VersionCache, workflow_name_of_part
from little_dist.memory.local import LocalMemoryStore
from little_dist.memory.worlds import memory_store_for
from little_dist.outer_loop.store import (
    LocalManifestStore,
    MemoryManifestStore,
    manifest_store_for,
)
from little_dist.world.extras import (
    Archives,
    InDataDir,
    KeepsVersionParts,
    RecordsSubmissions,
    SharesStorage,
    StartsInOneTrip,
    extras_of,
    require,
)
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from little_dist.world.redis_s3 import RedisS3World


def test_the_fleets_world_has_every_fleet_extra() -> None:
    for extra in (
        Archives,
        KeepsVersionParts,
        StartsInOneTrip,
        RecordsSubmissions,
        SharesStorage,
    ):
        assert issubclass(RedisS3World, extra), extra.__name__


def test_an_in_process_world_has_none_and_the_answer_is_remembered() -> None:
    world = MemoryWorld()
    extras = extras_of(world)
    assert extras.archives is None
    assert extras.version_parts is None
    assert extras.one_trip_starts is None
    assert extras.submission_records is None
    assert extras_of(world) is extras  # asked once per world object
    assert not isinstance(world, SharesStorage)


def test_a_local_world_keeps_stores_in_its_folder_but_no_archive(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    try:
        assert isinstance(world, InDataDir)
        assert not isinstance(world, SharesStorage)
        assert extras_of(world).archives is None
        assert not isinstance(world, StartsInOneTrip)
    finally:
        world.close()


def test_require_names_the_world_and_what_it_lacks() -> None:
    with pytest.raises(InvalidInputError, match=r"^MemoryWorld does not archive runs$"):
        require(MemoryWorld(), Archives, "archive runs")


def test_a_binding_on_a_world_without_version_parts_is_a_clear_error() -> None:
    binding = {"id": "wfver_x", "part": "sha256:" + "0" * 64}
    with pytest.raises(InvalidInputError, match="MemoryWorld keeps no workflow version parts"):
        VersionCache().get(MemoryWorld(), "wfver_x", binding)
    # The reader that only shows a name falls back to none.
    assert workflow_name_of_part(MemoryWorld(), binding) is None


def test_stores_are_chosen_by_one_rule(tmp_path: Path) -> None:
    memory_world = MemoryWorld()
    store = memory_store_for(memory_world)
    assert isinstance(store, LocalMemoryStore)
    assert memory_store_for(memory_world) is store  # lives as long as the world
    assert memory_store_for(MemoryWorld()) is not store
    manifests = manifest_store_for(memory_world)
    assert isinstance(manifests, MemoryManifestStore)
    assert manifest_store_for(memory_world) is manifests
    local = LocalWorld(tmp_path / "data")
    try:
        assert isinstance(manifest_store_for(local), LocalManifestStore)
        assert isinstance(memory_store_for(local), LocalMemoryStore)
    finally:
        local.close()


class _BareWorld:
    """A world of another kind: none of the extras, no data directory."""


def test_a_world_without_stores_is_refused_in_one_line() -> None:
    with pytest.raises(InvalidInputError, match=r"^_BareWorld keeps no memory stores$"):
        memory_store_for(_BareWorld())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"^_BareWorld keeps no outer-loop manifests$"):
        manifest_store_for(_BareWorld())  # type: ignore[arg-type]
