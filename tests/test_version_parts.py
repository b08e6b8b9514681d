"""Versions stored once (issue 24): what runs of a workflow share is stored once by digest,
what binds a run's input rides with the run; the ids stay upstream's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from little_dist.authoring import WorkflowDefinition
from little_dist.compiler import WorkflowVersion, WorkflowVersionMismatchError
from little_dist.fleet.client import submit_run
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.versions import VersionCache, join_version, split_version
from little_dist.planner.fixed import fixed_plan_events
from little_dist.world.redis_s3 import RedisS3World
from tests.conftest_services import S3Service
from tests.fleet_app import chain5, fan1000
from tests.test_submit_cost import counted
from tests.test_world_redis_s3 import _open, s3_env, world_spec

__all__ = ["s3_env", "world_spec"]  # fixtures, imported for pytest


def _version(definition: WorkflowDefinition, run_input: Any) -> WorkflowVersion:
    planned = fixed_plan_events(definition, run_input)
    assert planned is not None
    return planned.version


def test_a_version_joined_from_its_part_and_binding_is_the_same_version() -> None:
    import json

    for definition, run_input in ((chain5, {"n": 1}), (fan1000, {"keys": ["a", "b"]})):
        version = _version(definition, run_input)
        shared, binding = split_version(version)
        joined = join_version(json.loads(shared), binding)
        assert (joined.id, joined.hash) == (version.id, version.hash)
        assert joined.to_json() == version.to_json()


def test_runs_with_other_inputs_share_the_part_and_differ_in_a_small_binding() -> None:
    from little_dist.canonical import canonical_json

    one, two = _version(chain5, {"n": 1}), _version(chain5, {"n": 2})
    (shared_one, binding_one), (shared_two, binding_two) = split_version(one), split_version(two)
    assert shared_one == shared_two and binding_one["part"] == binding_two["part"]
    assert binding_one["id"] != binding_two["id"]
    assert len(canonical_json(binding_one)) < 1200 < len(shared_one)


def test_a_binding_does_not_join_another_workflows_part() -> None:
    import json

    shared, _ = split_version(_version(fan1000, {"keys": ["a"]}))
    _, binding = split_version(_version(chain5, {"n": 1}))
    with pytest.raises(WorkflowVersionMismatchError):
        join_version(json.loads(shared), binding)


def test_versions_joined_from_one_part_share_its_lwir_and_are_still_checked() -> None:
    import json

    class Parts:  # a world that keeps only the shared part
        def __init__(self, shared: str) -> None:
            self.shared, self.reads = shared, 0

        def get_version_part(self, _ref: str) -> str:
            self.reads += 1
            return self.shared

        def put_version_part(self, body: str) -> str:  # (a KeepsVersionParts world)
            raise AssertionError("only read here")

    one, two, three = (_version(chain5, {"n": n}) for n in (1, 2, 3))
    shared, first_binding = split_version(one)
    world = Parts(shared)
    cache = VersionCache()
    joined = [cache.get(world, v.id, split_version(v)[1]) for v in (one, two, three)]  # type: ignore[arg-type]
    assert [(v.id, v.hash) for v in joined] == [(v.id, v.hash) for v in (one, two, three)]
    assert [v.to_json() for v in joined] == [v.to_json() for v in (one, two, three)]
    assert world.reads == 1
    # One parsed LWIR for them all (each run's version held no copy of its own).
    assert joined[1].lwir is joined[0].lwir and joined[2].lwir is joined[0].lwir
    # The shared path still checks every hash of the binding's lock.
    _, binding = split_version(_version(chain5, {"n": 4}))
    forged = {
        **binding,
        "lock": {**binding["lock"], "inputHash": first_binding["lock"]["inputHash"]},
    }
    with pytest.raises(WorkflowVersionMismatchError):
        join_version(json.loads(shared), forged, like=joined[0])


@pytest.fixture
def world(world_spec: Callable[[], str], s3_env: S3Service) -> Iterator[RedisS3World]:
    opened = _open(world_spec(), s3_env)
    yield opened
    opened.close()


@pytest.mark.integration
def test_a_seen_workflow_costs_no_s3_request_and_no_redis_key_beyond_the_run(
    world: RedisS3World,
) -> None:
    import redis as redis_lib

    submit_run(world, chain5, {"n": 0})  # the first run stores the shared part
    client: redis_lib.Redis = world._redis
    prefix = world._keys.redis_prefix
    before = {key for key in client.scan_iter(match=f"{prefix}*")}
    with counted(world) as counts:  # (ids made up by the submit: no archive to look for)
        run_ids = [submit_run(world, chain5, {"n": index + 1}) for index in range(3)]
    assert counts["s3"] == 0
    new = {key.decode() for key in client.scan_iter(match=f"{prefix}*")} - {
        key.decode() for key in before
    }
    assert all(any(run_id in key for run_id in run_ids) for key in new), new
    assert not [key for key in new if ":version" in key or "version:" in key]

    # A process that has not seen the workflow reads the shared part once, then never.
    versions = VersionCache()
    with counted(world) as reads:
        for index, run_id in enumerate(run_ids):
            tracker = RunTracker(world, run_id, versions=versions)
            tracker.catch_up()
            context = tracker.context
            assert (
                context is not None and context.version.id == _version(chain5, {"n": index + 1}).id
            )
    assert reads["s3"] == 1
