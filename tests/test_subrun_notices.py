"""The scheduler tells a parent of its children's ends, a batch at a time (real Redis + weed).

The scheduler is driven in process as in ``tests/test_scheduler.py`` (its ``fleet``
fixture, a capture queue); the parent's suspended attempt and its children's ends are
written straight to their logs, as a worker would leave them. What is pinned: the children
that end in one batch of signals reach their parent in one append (one signal, one look of
the parent) and every result reaches its call; a scheduler that dies between its notices,
or whose parent append storage refuses, loses none (each is recorded once, by whoever
looks again). And the children a worker's attempt submits after recording their starts
are submitted without the S3 look a run id given by its caller otherwise costs.
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from little_dist import occurrences
from little_dist.errors import StorageUnavailableError
from little_dist.events import EventInput
from little_dist.fleet.queue import MemoryQueue
from little_dist.fleet.scheduler import Scheduler
from little_dist.fleet.signals import SignalReader
from little_dist.fleet.sub_runs import FleetSubRuns
from little_dist.fleet.submission import submit_runs
from little_dist.run_state._subruns import STEP_SUSPENDED, SUB_RUN_ENDED, SUB_RUN_STARTED
from little_dist.subruns.engine import ChildToStart
from little_dist.world.redis_s3.archive import RunArchives
from tests.fleet_processes import fleet_env
from tests.test_scheduler import Fleet, fleet, pending_count, spin, start_run
from tests.workflows_for_tests import chain_lwir

__all__ = ["fleet", "fleet_env"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.integration

CHILDREN = 12


def _suspended_parent(fleet: Fleet, children: int) -> tuple[str, list[str]]:
    """A parent run whose step ``s0`` suspended waiting for ``children`` children, each
    started with its parent link and ended (completed with output ``n``), all written
    before any scheduler looks; the parent's id and its children's."""
    parent, _ = start_run(fleet.world, chain_lwir(1), {})
    kids = [f"run_sub_{uuid.uuid4().hex}" for _ in range(children)]
    step = {"stepPath": "s0", "attempt": 1}
    fleet.world.append_batch(
        parent,
        [
            EventInput(type="StepScheduled", occurrence_id="sched:s0", payload={"stepPath": "s0"}),
            EventInput(
                type="StepAttemptStarted",
                occurrence_id="start:s0:1",
                payload={**step, "attemptId": "attempt_1"},
            ),
            *[
                EventInput(
                    type=SUB_RUN_STARTED,
                    occurrence_id=occurrences.sub_run_started(kid),
                    payload={"parentRunId": parent, "childRunId": kid, **step},
                )
                for kid in kids
            ],
            EventInput(
                type=STEP_SUSPENDED,
                occurrence_id="end:s0:1",
                payload={**step, "waitingFor": kids},
            ),
        ],
    )
    for n, kid in enumerate(kids):
        fleet.world.append_batch(
            kid,
            [
                EventInput(
                    type="RunStarted",
                    occurrence_id="run-start",
                    payload={
                        "workflowVersionId": "v",
                        "input": {"n": n},
                        "parentRunId": parent,
                        "parentStepPath": "s0",
                    },
                ),
                EventInput(type="RunCompleted", occurrence_id="run-end", payload={"output": n}),
            ],
        )
    return parent, kids


def _ends(fleet: Fleet, parent: str) -> dict[str, list[Any]]:
    """The parent's ``little.subrun.ended`` outputs, by child (a list: each should be one)."""
    ends: dict[str, list[Any]] = {}
    for event in fleet.world.list_events(parent):
        if event.type == SUB_RUN_ENDED:
            ends.setdefault(event.payload["childRunId"], []).append(event.payload.get("output"))
    return ends


def _signals_of(fleet: Fleet, run_id: str) -> int:
    """How many signal entries name ``run_id`` (one per append that woke the scheduler)."""
    entries = fleet.redis.xrange(fleet.settings.signal_stream)
    return sum(1 for _, fields in entries if fields.get("run") == run_id)


def _resumed(app: MemoryQueue, parent: str) -> bool:
    return any((t.run_id, t.step_path, t.attempt) == (parent, "s0", 2) for t in app.sent)


def _scheduler(fleet: Fleet, app: MemoryQueue, **options: Any) -> Scheduler:
    scheduler = fleet.scheduler(app, sweep_interval=3600, **options)
    scheduler.start()
    scheduler.sweeps.skip(time.monotonic())  # no sweep: the signals alone move the runs
    return scheduler


def test_the_ends_of_a_batch_of_children_reach_their_parent_in_one_append(
    fleet: Fleet,
) -> None:
    parent, kids = _suspended_parent(fleet, CHILDREN)
    before = _signals_of(fleet, parent)
    app = MemoryQueue()
    scheduler = _scheduler(fleet, app)
    spin(scheduler, lambda: _resumed(app, parent))
    # Every child's result reached its call, once.
    assert _ends(fleet, parent) == {kid: [n] for n, kid in enumerate(kids)}
    # The children's signals came in one batch: their ends took one append to the parent
    # (one signal, so one look of the parent), not one per child.
    assert _signals_of(fleet, parent) - before < CHILDREN
    assert _signals_of(fleet, parent) - before == 1
    spin(scheduler, lambda: all(kid in scheduler.finished for kid in kids))
    assert pending_count(fleet) == 0


def test_the_batch_that_tells_a_parent_its_last_ends_resumes_it_without_its_signal(
    fleet: Fleet,
) -> None:
    # A busy scheduler reads the parent's signal for the notices only after every signal
    # that came before it: the batch that records the ends looks at the parent itself.
    parent, kids = _suspended_parent(fleet, CHILDREN)
    app = MemoryQueue()
    scheduler = _scheduler(fleet, app)
    batch = scheduler.signals.read(count=1000, block_ms=100)
    assert {signal.run_id for signal in batch} == {parent, *kids}
    scheduler.handle(batch)
    assert _ends(fleet, parent) == {kid: [n] for n, kid in enumerate(kids)}
    assert _resumed(app, parent)
    # The notice's own signal, read later, finds the parent moved on and sends nothing.
    sent = len(app.sent)
    spin(scheduler, lambda: pending_count(fleet) == 0)
    assert len(app.sent) == sent


def test_a_scheduler_killed_between_its_notices_loses_none(fleet: Fleet) -> None:
    parent, kids = _suspended_parent(fleet, CHILDREN)
    # A scheduler took the children's signals, recorded the first half of their ends in
    # the parent's log and died before the rest and before acknowledging any.
    dead = SignalReader(
        fleet.redis,
        fleet.settings.signal_stream,
        fleet.settings.signal_group,
        "dead-scheduler",
        claim_idle=fleet.settings.signal_claim_idle,
    )
    dead.ensure_group()
    assert dead.read(count=1000, block_ms=100)
    half = kids[: CHILDREN // 2]
    fleet.world.append_batch(
        parent,
        [
            EventInput(
                type=SUB_RUN_ENDED,
                occurrence_id=occurrences.sub_run_ended(kid),
                payload={
                    "parentRunId": parent,
                    "childRunId": kid,
                    "status": "completed",
                    "output": kids.index(kid),
                    "stepPath": "s0",
                },
            )
            for kid in half
        ],
    )
    app = MemoryQueue()
    live = _scheduler(fleet, app)
    spin(live, lambda: _resumed(app, parent))
    assert _ends(fleet, parent) == {kid: [n] for n, kid in enumerate(kids)}
    spin(live, lambda: pending_count(fleet) == 0)


def test_children_whose_notice_storage_refused_stay_pending_until_it_is_recorded(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent, kids = _suspended_parent(fleet, CHILDREN)
    world = fleet.world
    appends = world.append_batch
    refused: list[str] = []

    def flaky(run_id: str, events: Any, **options: Any) -> Any:
        if run_id == parent and not refused and any(e.type == SUB_RUN_ENDED for e in events):
            refused.append(run_id)
            raise StorageUnavailableError("Redis went away (test)")
        return appends(run_id, events, **options)

    monkeypatch.setattr(world, "append_batch", flaky)
    app = MemoryQueue()
    scheduler = _scheduler(fleet, app)
    spin(scheduler, lambda: bool(refused))
    # Nothing recorded, nothing finished: the children's signals wait to be claimed again.
    assert _ends(fleet, parent) == {}
    assert not any(kid in scheduler.finished for kid in kids)
    assert pending_count(fleet) >= CHILDREN
    spin(scheduler, lambda: _resumed(app, parent))
    assert _ends(fleet, parent) == {kid: [n] for n, kid in enumerate(kids)}
    spin(scheduler, lambda: pending_count(fleet) == 0)


def test_children_recorded_by_this_attempt_are_submitted_without_an_s3_look(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.subrun_fleet_app import kid

    looks: list[str] = []
    has_archive = RunArchives.has_archive

    def counted(self: RunArchives, run_id: str) -> bool:
        looks.append(run_id)
        return has_archive(self, run_id)

    monkeypatch.setattr(RunArchives, "has_archive", counted)
    world = fleet.world
    # A run id its caller gives costs a look (it may name an archived run)...
    given = [f"run_{uuid.uuid4().hex}" for _ in range(3)]
    submit_runs(world, kid, [{"n": n, "sleep": 0} for n in range(3)], run_ids=given)
    assert sorted(looks) == sorted(given)
    # ... the children an attempt recorded as started (start_many) cost none, and start.
    looks.clear()
    parent = f"run_{uuid.uuid4().hex}"
    kids = [f"run_sub_{uuid.uuid4().hex}" for _ in range(3)]
    host = FleetSubRuns(
        SimpleNamespace(world=world, settings=fleet.settings, registry=None)  # type: ignore[arg-type]
    )
    host.start_many(
        [
            ChildToStart(kid_id, kid, {"n": n, "sleep": 0}, {"parentRunId": parent})
            for n, kid_id in enumerate(kids)
        ]
    )
    assert looks == []
    for kid_id in kids:
        started = [e for e in world.list_events(kid_id) if e.type == "RunStarted"]
        assert [e.payload["parentRunId"] for e in started] == [parent]
    # Submitted again (idempotent), they are found in Redis: still no look, nothing twice.
    host.start_many([ChildToStart(kids[0], kid, {"n": 0, "sleep": 0}, {"parentRunId": parent})])
    assert looks == []
    assert [e.type for e in world.list_events(kids[0])].count("RunStarted") == 1
