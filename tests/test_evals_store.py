"""Eval sets in every World, one test body (:func:`little_dist.evals.eval_store_for`):
LocalWorld's files (upstream's paths and bytes), RedisS3World's S3 objects (the same bytes,
content-addressed, under the world's prefix) with a Redis index, MemoryWorld's scratch
folder. A set, its bodies and its runs written through one client are read back through
another; writes are put-if-absent (the same bytes again: a no-op; other bytes: refused)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from examples.evals import make_set
from little_dist.canonical import canonical_json
from little_dist.errors import InvalidInputError, NotFoundError
from little_dist.evals import (
    EvalStore,
    eval_item_body_sha,
    eval_store_for,
    register_eval_set,
)
from little_dist.evals.local_store import LocalEvalStore
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.conftest_services import S3Service


def _redis_s3_world(redis_url: str, prefix: str, s3: S3Service, s3_prefix: str) -> Any:
    from urllib.parse import quote

    from little_dist.world.redis_s3 import RedisS3World

    return RedisS3World.from_url(
        f"{redis_url}?key_prefix={quote(prefix)}&s3_prefix={quote(s3_prefix)}",
        s3_endpoint=s3.endpoint,
        s3_bucket=s3.bucket,
        aws_access_key_id=s3.access_key_id,
        aws_secret_access_key=s3.secret_access_key,
    )


@pytest.fixture(
    params=["local", "memory", pytest.param("redis_s3", marks=pytest.mark.integration)],
)
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """A factory of eval stores over one World's storage (each call: another world object,
    as another process would have; MemoryWorld has one process, so one world)."""
    worlds: list[Any] = []
    if request.param == "local":

        def make() -> Any:
            worlds.append(LocalWorld(tmp_path / "data"))
            return eval_store_for(worlds[-1])

    elif request.param == "memory":
        world = MemoryWorld()

        def make() -> Any:
            return eval_store_for(world)

    else:
        redis_url: str = request.getfixturevalue("redis_url")
        prefix: str = request.getfixturevalue("redis_key_prefix") + f"{tmp_path.name}:"
        s3: S3Service = request.getfixturevalue("s3_service")
        s3_prefix = f"{s3.prefix}{tmp_path.name}/"

        def make() -> Any:
            worlds.append(_redis_s3_world(redis_url, prefix, s3, s3_prefix))
            return eval_store_for(worlds[-1])

    yield make
    for made in worlds:
        made.close()


def _example() -> tuple[Any, list[dict[str, Any]]]:
    bundle, bodies = make_set.build()
    version, _ = register_eval_set(bundle)
    return version, bodies


def test_a_set_its_bodies_and_its_runs_are_read_back_by_another_client(
    make_store: Callable[[], EvalStore],
) -> None:
    writer, reader = make_store(), make_store()
    version, bodies = _example()
    assert reader.eval_set_ids() == [] and reader.last_run(version.id) is None
    for body in bodies:
        writer.put_body(eval_item_body_sha(body), canonical_json(body))
    writer.put_eval_set(version)
    writer.put_eval_set(version)  # (the same bytes again: a no-op)
    assert reader.eval_set_ids() == [version.id]
    stored = reader.get_eval_set(version.id)
    assert stored == json.loads(canonical_json(version.to_json()))
    assert reader.known_lineages() >= {"support.ticket-severity"}
    for body in bodies:
        assert reader.get_body(eval_item_body_sha(body)) == body
    first = writer.put_run(version.id, f"{1:020d}", {"n": 1, "summary": {"passed": 4}})
    second = writer.put_run(version.id, f"{2:020d}", {"n": 2, "summary": {"passed": 3}})
    assert first != second
    assert reader.last_run(version.id) == {"n": 2, "summary": {"passed": 3}}


def test_missing_and_malformed_addresses_are_clear_errors(
    make_store: Callable[[], EvalStore],
) -> None:
    store = make_store()
    with pytest.raises(NotFoundError, match="no eval set evset_"):
        store.get_eval_set("evset_" + "0" * 16)
    with pytest.raises(NotFoundError, match="no eval item body sha256:"):
        store.get_body("sha256:" + "a" * 64)
    with pytest.raises(InvalidInputError, match=r"invalid eval set id: '\.\./x'"):
        store.get_eval_set("../x")
    with pytest.raises(InvalidInputError, match="invalid eval item body digest"):
        store.get_body("sha256:../../etc")
    with pytest.raises(InvalidInputError, match="invalid eval set id"):
        store.put_run("evset_/../x", f"{1:020d}", {})


def test_other_bytes_under_a_body_address_are_refused(
    make_store: Callable[[], EvalStore],
) -> None:
    store = make_store()
    _, bodies = _example()
    sha = eval_item_body_sha(bodies[0])
    store.put_body(sha, canonical_json(bodies[0]))
    with pytest.raises(InvalidInputError, match="different bytes"):
        store.put_body(sha, canonical_json(bodies[1]))
    assert store.get_body(sha) == bodies[0]


def test_a_local_world_keeps_upstreams_files(tmp_path: Path) -> None:
    world = LocalWorld(tmp_path / "data")
    store = eval_store_for(world)
    assert isinstance(store, LocalEvalStore)
    version, bodies = _example()
    store.put_eval_set(version)
    sha = eval_item_body_sha(bodies[0])
    store.put_body(sha, canonical_json(bodies[0]))
    hex_part = sha.removeprefix("sha256:")
    body_file = tmp_path / "data" / "eval-items" / hex_part[:2] / f"{hex_part}.json"
    assert body_file.read_text("utf-8") == canonical_json(bodies[0]) + "\n"
    set_file = tmp_path / "data" / "eval-sets" / f"{version.id}.json"
    assert set_file.read_text("utf-8") == canonical_json(version.to_json()) + "\n"
    world.close()


@pytest.mark.integration
def test_a_redis_s3_world_keeps_the_same_bytes_in_s3_and_only_indexes_in_redis(
    redis_url: str, redis_key_prefix: str, s3_service: S3Service, tmp_path: Path
) -> None:
    import redis

    from little_dist.evals.redis_s3_store import RedisS3EvalStore

    prefix = f"{redis_key_prefix}{tmp_path.name}:"
    s3_prefix = f"{s3_service.prefix}{tmp_path.name}/"
    world = _redis_s3_world(redis_url, prefix, s3_service, s3_prefix)
    try:
        store = eval_store_for(world)
        assert isinstance(store, RedisS3EvalStore)
        version, bodies = _example()
        store.put_eval_set(version)
        sha = eval_item_body_sha(bodies[0])
        store.put_body(sha, canonical_json(bodies[0]))
        where = store.put_run(version.id, f"{7:020d}", {"n": 7})
        objects = world.shared_storage().s3
        hex_part = sha.removeprefix("sha256:")
        body = objects.get(f"{s3_prefix}eval-items/{hex_part[:2]}/{hex_part}.json")
        assert body == (canonical_json(bodies[0]) + "\n").encode()
        bundle = objects.get(f"{s3_prefix}eval-sets/{version.id}.json")
        assert bundle == (canonical_json(version.to_json()) + "\n").encode()
        key = where.removeprefix(f"s3://{s3_service.bucket}/")
        assert key.startswith(f"{s3_prefix}eval-runs/{version.id}/{7:020d}-")
        assert json.loads(objects.get(key)) == {"n": 7}
        client = redis.Redis.from_url(redis_url)
        try:
            keys = sorted(k.decode() for k in client.scan_iter(match=f"{prefix}eval*"))
            assert keys == [f"{prefix}eval-runs:{version.id}", f"{prefix}eval-sets"]
        finally:
            client.close()
    finally:
        world.close()
