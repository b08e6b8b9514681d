"""A sweep round lists the active runs when it starts, and may take minutes to get through
them under load: a run archived meanwhile must not be looked at again (once Redis let go of
it, the look would read its whole archive from S3 only to find it over). Real Redis and S3.
"""

from __future__ import annotations

import time

import pytest

from little_dist.fleet import archiving
from little_dist.world.fleet_keys import active_runs_key
from tests.fleet_processes import fleet_env
from tests.request_counts import counted
from tests.test_scheduler import (
    Fleet,
    events_of,
    execute,
    fleet,
    spin,
    start_run,
    started_scheduler,
)
from tests.workflows_for_tests import chain_lwir

pytestmark = pytest.mark.integration

__all__ = ["fleet", "fleet_env"]  # the fixtures, imported for pytest


def test_a_round_skips_runs_archived_since_it_began_and_looks_at_the_others(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scheduler remembers no finished run: as one that finished a thousand runs since.
    monkeypatch.setattr(archiving, "FINISHED_MEMORY", 0)
    app, scheduler = started_scheduler(fleet)
    active = active_runs_key(fleet.settings.signal_stream)

    archived, version = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    (task,) = app.take()
    execute(fleet.world, version, task)
    spin(scheduler, lambda: not fleet.redis.sismember(active, archived))
    assert events_of(fleet.world, archived)[-1].type == "RunCompleted"
    # Redis lets go of it: its keys now, its seal marker as once its margin has passed.
    fleet.world.archive_run(archived, ttl_seconds=0)
    fleet.redis.delete(fleet.world._keys.run(archived).archived)

    live, _ = start_run(fleet.world, chain_lwir(1), {})
    spin(scheduler, lambda: bool(app.sent))
    assert [task.run_id for task in app.take()] == [live]
    scheduler.runs.forget(live)  # in the active set, not followed: only a sweep looks

    # Rounds that listed both before the first was archived (two: a loop sweep leaves a run
    # it has not seen before to its workers once, then looks).
    with counted(fleet.world, any_thread=True) as counts:
        for _ in range(2):
            scheduler.sweeps.begin(time.monotonic(), [archived, live])
            scheduler.run_once(block_ms=20)
            assert scheduler.sweeps.pending == 0
    assert counts["s3"] == 0, "the round read an archived run's archive"
    assert archived not in scheduler.runs
    assert live in scheduler.runs  # still active: looked at
