"""Concurrent submits of one run id with different inputs: one run, the rest refused.

Each round, several threads submit the same new run id at once (lined up on a barrier),
most with inputs of their own and two with the same input. Exactly one input wins: the run
holds it, every submitter of it gets the run id back (submitting is idempotent), and every
other submitter gets RunMismatchError. The decision is one atomic step in the world (a
``SET NX`` in Redis, one transaction in SQLite): before it, each submitter read an empty
log, appended its start, and the losers' appends resolved to the winner's by occurrence id
without a word.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from little_dist.fleet.client import RunMismatchError, submit_run
from little_dist.world.base import World
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests import workflows_for_tests as wf
from tests.conftest_services import S3Service
from tests.test_world_redis_s3 import _open, s3_env, world_spec

__all__ = ["s3_env", "world_spec"]  # fixtures, imported for pytest

THREADS = 8
ROUNDS = 15


@pytest.fixture(params=["memory", "local", pytest.param("redis", marks=pytest.mark.integration)])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    opened: World
    if request.param == "memory":
        opened = MemoryWorld()
    elif request.param == "local":
        opened = LocalWorld(tmp_path / "world")
    else:
        spec: Callable[[], str] = request.getfixturevalue("world_spec")
        s3: S3Service = request.getfixturevalue("s3_env")
        opened = _open(spec(), s3)
    yield opened
    opened.close()


def _submit_at_once(world: World, run_id: str, inputs: list[Any]) -> list[str | Exception]:
    doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
    barrier = threading.Barrier(len(inputs))
    results: list[str | Exception] = [RuntimeError("did not run")] * len(inputs)

    def submit(index: int) -> None:
        barrier.wait()
        try:
            results[index] = submit_run(world, doc, inputs[index], run_id=run_id)
        except Exception as error:
            results[index] = error

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_submits_of_one_run_id_give_one_run(world: World) -> None:
    rng = random.Random(18)
    for round_ in range(ROUNDS):
        run_id = f"run_race_{round_}_{uuid.uuid4().hex[:6]}"
        inputs: list[Any] = [{"x": i} for i in range(THREADS - 1)] + [{"x": 0}]
        rng.shuffle(inputs)
        results = _submit_at_once(world, run_id, inputs)
        events = world.list_events(run_id)
        starts = [e for e in events if e.type == "RunStarted"]
        assert len(starts) == 1, [e.type for e in events]
        won = starts[0].payload["input"]
        for given, result in zip(inputs, results, strict=True):
            if given == won:
                assert result == run_id
            else:
                assert isinstance(result, RunMismatchError), result
        assert [e.type for e in events] == ["WorkflowVersionRegistered", "RunStarted"]
        # The same input again is still the same run.
        assert submit_run(world, wf.single_tool_lwir("add", {"a": 1, "b": 2}), won, run_id=run_id)
        with pytest.raises(RunMismatchError):
            submit_run(
                world, wf.single_tool_lwir("add", {"a": 1, "b": 2}), {"x": -1}, run_id=run_id
            )
