"""The scheduler's archiver (:mod:`little_dist.fleet.archiving`) alone, with an in-memory
world and active set: archives wait for their delay, and wait longer while the scheduler
is busy (signals waiting), up to ``HOLD_WHILE_BUSY`` seconds."""

from __future__ import annotations

import threading
import time

from little_dist.fleet.archiving import HOLD_WHILE_BUSY, Archiver


class _World:
    def __init__(self) -> None:
        self.archived: list[str] = []
        self.done = threading.Event()

    def archive_run(self, run_id: str) -> None:
        self.archived.append(run_id)
        self.done.set()


class _Active:
    def __init__(self) -> None:
        self.removed: list[str] = []

    def remove(self, run_id: str) -> None:
        self.removed.append(run_id)


def _archiver(delay: float) -> tuple[Archiver, _World, _Active]:
    world, active = _World(), _Active()
    archiver = Archiver(world, active, delay=delay)  # type: ignore[arg-type]
    return archiver, world, active


def test_an_archive_waits_for_its_delay() -> None:
    archiver, world, _ = _archiver(delay=5.0)
    archiver.finish("run_a", "completed", 4)
    archiver.start_due(time.monotonic())
    assert not world.done.wait(0.2)
    archiver.start_due(time.monotonic() + 5.0)
    assert world.done.wait(5)
    assert world.archived == ["run_a"]


def test_a_busy_scheduler_holds_archives_that_came_due_for_a_while() -> None:
    archiver, world, active = _archiver(delay=0.5)
    archiver.finish("run_a", "completed", 4)
    due = time.monotonic() + 0.5
    archiver.start_due(due + 1.0, busy=True)
    assert not world.done.wait(0.2)  # due, held: signals wait for the loop
    assert "run_a" in archiver
    archiver.start_due(due + 1.0)  # the loop caught up
    assert world.done.wait(5)
    assert world.archived == ["run_a"]
    archiver.close()
    assert active.removed == ["run_a"]


def test_a_scheduler_busy_for_long_archives_anyway() -> None:
    archiver, world, _ = _archiver(delay=0.5)
    archiver.finish("run_a", "completed", 4)
    archiver.start_due(time.monotonic() + 0.5 + HOLD_WHILE_BUSY + 0.1, busy=True)
    assert world.done.wait(5)
    assert world.archived == ["run_a"]
    archiver.close()
