"""The scheduler's check-then-act races on Redis, decided atomically now.

* Rebuilding the active-run set: the marker that says "built" is set in the same step as
  the members, so a scheduler that dies half-way leaves the rebuild to the next one (it
  used to set the marker first: the set then stayed empty for good). Only runs whose
  archive has not completed are added, read from the index of those runs.
* Forgetting idle consumers: a consumer is deleted only if, at that instant, it still has
  nothing pending (deleting a consumer drops its pending signals).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from little_dist.events import EventInput
from little_dist.fleet.signals import SignalReader
from little_dist.fleet.sweeper import ActiveRuns
from tests.conftest_services import S3Service
from tests.test_world_redis_s3 import _open, s3_env, world_spec

__all__ = ["s3_env", "world_spec"]  # fixtures, imported for pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    opened = redis.Redis.from_url(redis_url, decode_responses=True)
    yield opened
    opened.close()


@pytest.fixture
def key(redis_key_prefix: str) -> str:
    return f"{redis_key_prefix}{uuid.uuid4().hex[:8]}"


class _ListingWorld:
    """A world whose listing of runs fails the first time (the scheduler dies there)."""

    def __init__(self, run_ids: list[str]) -> None:
        self.run_ids = run_ids
        self.calls = 0

    def list_run_ids(self) -> list[str]:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the scheduler died while listing")
        return self.run_ids


def test_a_rebuild_that_died_half_way_is_done_by_the_next_scheduler(
    client: redis.Redis, key: str
) -> None:
    world: Any = _ListingWorld(["run_a", "run_b"])
    active = ActiveRuns(client, f"{key}:active")
    with pytest.raises(RuntimeError, match="died"):
        active.rebuild_if_missing(world)
    assert ActiveRuns(client, f"{key}:active").rebuild_if_missing(world) == 2
    assert active.members() == ["run_a", "run_b"]
    # Built once per dataset: the next scheduler finds the marker.
    assert active.rebuild_if_missing(_ListingWorld(["run_c", "run_c"])) == 0
    assert active.members() == ["run_a", "run_b"]


def test_a_rebuild_adds_only_runs_whose_archive_has_not_completed(
    client: redis.Redis, key: str, world_spec: Callable[[], str], s3_env: S3Service
) -> None:
    world = _open(world_spec(), s3_env)
    try:
        start = EventInput(type="RunStarted", occurrence_id="run-start", payload={})
        for run_id in ("run_done", "run_live", "run_ended"):
            world.append(run_id, start)
        end = EventInput(type="RunCompleted", occurrence_id="run-end", payload={})
        world.append("run_done", end)
        world.append("run_ended", end)
        world.archive_run("run_done", ttl_seconds=60)  # its stream is still there
        active = ActiveRuns(client, f"{key}:active")
        assert active.rebuild_if_missing(world) == 2
        # The ended run waits for its archive: the first sweep does it and drops it.
        assert active.members() == ["run_ended", "run_live"]
    finally:
        world.close()


def test_a_consumer_that_gets_a_signal_while_being_forgotten_keeps_it(
    client: redis.Redis, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream, group = f"{key}:signals", "schedulers"
    me = SignalReader(client, stream, group, "me", claim_idle=60)
    me.ensure_group()
    old = SignalReader(client, stream, group, "old", claim_idle=60)
    client.xadd(stream, {"run": "run_a", "seq": "1"})
    old.ack([signal.entry_id for signal in old.read(count=10, block_ms=0)])
    time.sleep(0.02)  # "old" has been idle a while, with nothing pending
    real = client.xinfo_consumers

    def listed_then_old_reads(*args: Any, **kwargs: Any) -> Any:
        # Between the listing and the delete, "old" (alive after all) takes a new signal.
        listed = real(*args, **kwargs)
        client.xadd(stream, {"run": "run_b", "seq": "1"})
        assert [s.run_id for s in old.read(count=10, block_ms=0)] == ["run_b"]
        return listed

    monkeypatch.setattr(client, "xinfo_consumers", listed_then_old_reads)
    assert me.forget_idle_consumers(0.005) == []
    monkeypatch.setattr(client, "xinfo_consumers", real)
    consumers = {c["name"]: c for c in client.xinfo_consumers(stream, group)}
    assert consumers["old"]["pending"] == 1  # its signal was not dropped with it
    time.sleep(0.02)
    old.ack([s.entry_id for s in old.own_pending()])
    time.sleep(0.02)
    assert me.forget_idle_consumers(0.005) == ["old"]
