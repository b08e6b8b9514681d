"""A memory commit is fenced by the attempt's step lease, atomically: an attempt that lost its
lease or was superseded (a zombie) publishes nothing, on every World (MemoryWorld, LocalWorld
under its SQLite write lock, RedisS3World in the store's Lua script). Without the fence, a
zombie that passed its last local lease check, then stalled, would publish memory although
its StepCompleted is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from little_dist import define_workflow, model
from little_dist.compiler import compile_lwir
from little_dist.errors import LeaseLostError
from little_dist.events import EventInput
from little_dist.memory import (
    AttemptMemory,
    MemoryChange,
    memory_store_for,
    workflow_memory_mounts,
)
from little_dist.memory.layout import MemoryConfig
from little_dist.runtime import AttemptOutcome, execute_step_attempt, step_lease_key
from little_dist.scheduling import StepDispatch
from little_dist.world.base import Fence, World
from little_dist.world.in_process import MemoryWorld
from little_dist.world.local import LocalWorld
from tests.bash_fleet_app import shell_plan
from tests.conftest_services import S3Service
from tests.test_runtime import FakeClock

STORE = "workflow:memory-fence"
RUN = "run_memory_fence"


@pytest.fixture(params=["memory", "local", pytest.param("redis_s3", marks=pytest.mark.integration)])
def clocked(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[World, FakeClock]]:
    """A World of each kind whose leases run on a clock the test moves."""
    clock = FakeClock()
    world: Any
    if request.param == "memory":
        world = MemoryWorld(clock=clock)
    elif request.param == "local":
        world = LocalWorld(tmp_path / "data", clock=clock)
    else:
        from little_dist.world.redis_s3 import RedisS3World

        prefix: str = request.getfixturevalue("redis_key_prefix") + f"{tmp_path.name}:"
        s3: S3Service = request.getfixturevalue("s3_service")
        world = RedisS3World.from_url(
            f"{request.getfixturevalue('redis_url')}?key_prefix={quote(prefix)}"
            f"&s3_prefix={quote(s3.prefix)}",
            s3_endpoint=s3.endpoint,
            s3_bucket=s3.bucket,
            aws_access_key_id=s3.access_key_id,
            aws_secret_access_key=s3.secret_access_key,
            clock=clock,
        )
    yield world, clock
    world.close()


def _files(world: World) -> dict[str, bytes]:
    store = memory_store_for(world)
    return {p: store.read(STORE, e) for p, e in store.entries(STORE).items() if e.exists}


def test_a_commit_fenced_by_a_held_lease_lands(clocked: tuple[World, FakeClock]) -> None:
    world, _ = clocked
    lease = world.acquire_lease(step_lease_key(RUN, "s"), "attempt-1", 30)
    assert lease is not None
    store = memory_store_for(world)
    (applied,) = store.commit(STORE, [MemoryChange("a.md", 0, b"a")], writer="w", fence=lease.fence)
    assert applied.outcome == "written"
    assert _files(world) == {"a.md": b"a"}


def test_a_superseded_attempts_commit_is_refused_and_stores_nothing(
    clocked: tuple[World, FakeClock],
) -> None:
    world, clock = clocked
    key = step_lease_key(RUN, "s")
    store = memory_store_for(world)
    store.commit(STORE, [MemoryChange("keep.md", 0, b"kept")], writer="seed")
    old = world.acquire_lease(key, "attempt-1", 30)
    assert old is not None
    clock.advance(31)  # the old holder stalled past its lease ...
    newer = world.acquire_lease(key, "attempt-2", 30)  # ... and a retry took the step
    assert newer is not None and newer.token > old.token
    changes = [MemoryChange("keep.md", 1, b"zombie"), MemoryChange("new.md", 0, b"zombie")]
    with pytest.raises(LeaseLostError):
        store.commit(STORE, changes, writer="zombie", fence=old.fence)
    assert _files(world) == {"keep.md": b"kept"}
    assert store.entries(STORE)["keep.md"].version == 1
    # The newer holder's commit lands.
    store.commit(STORE, [MemoryChange("new.md", 0, b"retry")], writer="w2", fence=newer.fence)
    assert _files(world) == {"keep.md": b"kept", "new.md": b"retry"}


def test_an_expired_lease_or_another_holder_refuses_the_commit(
    clocked: tuple[World, FakeClock],
) -> None:
    world, clock = clocked
    lease = world.acquire_lease(step_lease_key(RUN, "s"), "attempt-1", 30)
    assert lease is not None
    store = memory_store_for(world)
    # The same token claimed by another holder (a store that lost writes handed it out again).
    with pytest.raises(LeaseLostError):
        store.commit(
            STORE,
            [MemoryChange("a.md", 0, b"x")],
            writer="w",
            fence=Fence(lease.key, lease.token, "someone-else"),
        )
    clock.advance(31)  # expired, not yet taken over
    with pytest.raises(LeaseLostError):
        store.commit(STORE, [MemoryChange("a.md", 0, b"x")], writer="w", fence=lease.fence)
    assert _files(world) == {}


def test_an_attempts_publish_with_a_stale_fence_publishes_nothing(
    clocked: tuple[World, FakeClock],
) -> None:
    world, _ = clocked
    key = step_lease_key(RUN, "s")
    old = world.acquire_lease(key, "attempt-1", 30)
    assert old is not None
    specs = workflow_memory_mounts("memory.fence", MemoryConfig())
    store = memory_store_for(world)
    with AttemptMemory(store, specs, step_path="s", attempt=1, writer="a1") as memory:
        (memory.mounts[0].source / "lesson.md").write_text("from a zombie")
        world.release_lease(old)
        assert world.acquire_lease(key, "attempt-2", 30) is not None
        with pytest.raises(LeaseLostError):
            memory.publish(fence=old.fence)
    assert _files(world) == {}


class _WriteThenLoseTheStep:
    """A harness whose session writes memory with the bash tool (recorded), then stalls
    past its lease while a retry takes the step, and returns: nothing more is appended
    before the attempt's memory commit, and its heartbeat (renewing every ten seconds of
    real time) has not noticed, so only the fence can stop that commit."""

    harness_id = "tests.write-then-lose-the-step"

    def __init__(self, world: World, clock: FakeClock) -> None:
        self.world, self.clock = world, clock
        self.wrote: Any = None

    def run(self, task: Any, ctx: Any) -> Any:
        from little_dist.harness.types import ExecuteStepResult

        cmd = "echo 'zombie lesson' > /mnt/memory/workflow/lesson.md && cat /mnt/memory/workflow/*"
        self.wrote = ctx.tools["bash"].call({"cmd": cmd}).value
        self.clock.advance(120)
        taken = self.world.acquire_lease(step_lease_key(RUN, "shell"), "attempt-2", 60)
        assert taken is not None
        return ExecuteStepResult("done")


def test_a_superseded_attempt_after_its_bash_write_publishes_no_memory(
    clocked: tuple[World, FakeClock],
) -> None:
    world, clock = clocked
    plan = shell_plan("memory.fence")
    flow = define_workflow(
        id="memory.fence",
        input={"type": "object"},
        output={"type": "string"},
        model=model("scripted/memory", id="default"),
        plan=plan,
        bash={},
    )
    version = compile_lwir(plan, input={})
    world.register_version(version.id, version.to_json())
    world.append_batch(
        RUN,
        [
            EventInput(
                type="RunStarted",
                occurrence_id="run-start",
                payload={"workflowVersionId": version.id, "input": {}},
            ),
            EventInput(
                type="StepScheduled",
                occurrence_id="sched:shell:1",
                payload={"stepPath": "shell", "stepId": "shell", "uses": "ai.generate"},
            ),
        ],
    )
    harness = _WriteThenLoseTheStep(world, clock)
    outcome = execute_step_attempt(
        world,
        StepDispatch(RUN, "shell", "shell", 1, "worker", "execute_step"),
        version=version,
        capabilities=flow.capabilities(harness),
        lease_ttl=30,
    )
    assert outcome is AttemptOutcome.superseded
    assert harness.wrote["stdout"] == "zombie lesson\n"  # the command ran and wrote
    types = [e.type for e in world.list_events(RUN)]
    assert "StepCompleted" not in types and "harness.file.created" not in types
    assert _files(world) == {}
