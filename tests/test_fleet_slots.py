"""The fleet's slots, the fan-out window they set and the backlog it leaves (real Redis)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from little_dist.compiler import compile_lwir
from little_dist.events import EventInput
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.worker_slots import (
    Backlog,
    BacklogNotes,
    FanoutWindow,
    FleetSlots,
    SlotRegistration,
)
from little_dist.scheduling import decide
from little_dist.world.fleet_keys import backlog_list
from little_dist.world.in_process import MemoryWorld
from tests.test_scheduling_parallel import fan_doc, items

pytestmark = pytest.mark.integration


@pytest.fixture
def client(redis_url: str) -> Iterator[Any]:
    import redis

    made = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield made
    made.close()


@pytest.fixture
def keys(redis_key_prefix: str) -> dict[str, str]:
    base = f"{redis_key_prefix}slots-{uuid.uuid4().hex[:8]}"
    return {"slots": f"{base}:slots", "backlog": f"{base}:backlog", "queue": f"{base}.worker"}


def register(client: Any, key: str, node: str, queues: list[str], slots: int, **kw: Any) -> Any:
    return SlotRegistration(client, key, node, queues, slots, **kw).start()


def test_live_workers_slots_are_summed_per_queue(client: Any, keys: dict[str, str]) -> None:
    queue, other = keys["queue"], keys["queue"] + "-other"
    one = register(client, keys["slots"], "w1", [queue, other], 16)
    two = register(client, keys["slots"], "w2", [queue], 4)
    three = register(client, keys["slots"], "w3", [other], 8)
    try:
        fleet = FleetSlots(client, keys["slots"], cache=0)
        assert fleet.slots(queue) == 20
        assert fleet.slots(other) == 24
        assert fleet.slots("nobody-consumes-this") is None
        two.stop()  # a worker that stops leaves at once
        assert fleet.slots(queue) == 16
    finally:
        for registration in (one, two, three):
            registration.stop()
    assert FleetSlots(client, keys["slots"], cache=0).slots(queue) is None


def test_an_entry_not_refreshed_stops_counting_and_a_refreshed_one_keeps_counting(
    client: Any, keys: dict[str, str]
) -> None:
    queue = keys["queue"]
    kept = register(client, keys["slots"], "alive", [queue], 3, refresh=0.1, ttl=0.5)
    dead = SlotRegistration(client, keys["slots"], "dead", [queue], 5, ttl=0.5)
    dead._write()  # registered once, never refreshed: a worker that was SIGKILLed
    try:
        fleet = FleetSlots(client, keys["slots"], cache=0)
        assert fleet.slots(queue) == 8
        time.sleep(1.0)
        assert fleet.slots(queue) == 3
        assert client.hexists(keys["slots"], "dead") == 0  # the reader drops what expired
    finally:
        kept.stop()


def test_the_slot_count_is_read_once_per_cache_period(client: Any, keys: dict[str, str]) -> None:
    now = [100.0]
    fleet = FleetSlots(client, keys["slots"], cache=2.0, clock=lambda: now[0])
    registration = register(client, keys["slots"], "w", [keys["queue"]], 6)
    try:
        assert fleet.slots(keys["queue"]) == 6
        registration.stop()
        now[0] += 1.0
        assert fleet.slots(keys["queue"]) == 6  # remembered
        now[0] += 1.5
        assert fleet.slots(keys["queue"]) is None
    finally:
        registration.stop()


def test_the_backlog_list_is_as_long_as_every_runs_count(client: Any, keys: dict[str, str]) -> None:
    backlog = Backlog(client, keys["backlog"], keys["queue"])
    assert backlog.list == backlog_list(keys["queue"]) == f"{keys['queue']}.backlog"
    try:
        backlog.report("run_a", 1500)
        backlog.report("run_b", 7)
        assert backlog.total() == 1507
        backlog.report("run_a", 20)
        assert backlog.total() == 27
        backlog.report("run_b", 0)
        backlog.report("run_b", 0)  # clearing twice is harmless
        assert backlog.total() == 20
        assert client.hgetall(keys["backlog"]) == {b"run_a": b"20"}
        backlog.report("run_a", 0)
        assert backlog.total() == 0
        assert client.exists(keys["backlog"], backlog.list) == 0
    finally:
        client.delete(keys["backlog"], backlog.list)


def test_a_runs_notes_report_changes_to_and_from_zero_at_once_and_others_at_most_every_second(
    client: Any, keys: dict[str, str]
) -> None:
    backlog = Backlog(client, keys["backlog"], keys["queue"])
    now = [0.0]
    notes = BacklogNotes(backlog, "run_n", clock=lambda: now[0])
    try:
        notes.note(0)
        assert backlog.total() == 0
        notes.note(50)
        assert backlog.total() == 50
        now[0] += 0.2
        notes.note(40)
        assert backlog.total() == 50  # too soon after the last report
        now[0] += 1.0
        notes.note(30)
        assert backlog.total() == 30
        now[0] += 0.1
        notes.note(0)
        assert backlog.total() == 0  # the last branches are scheduled: at once
    finally:
        client.delete(keys["backlog"], backlog.list)


def _window(client: Any, keys: dict[str, str]) -> FanoutWindow:
    queue = keys["queue"]
    return FanoutWindow(
        FleetSlots(client, keys["slots"], cache=0), Backlog(client, keys["backlog"], queue), queue
    )


def _started_fan(run_id: str) -> MemoryWorld:
    """A world holding ``run_id`` started on a ten-branch fan-out of ``maxConcurrency`` 6."""
    version = compile_lwir(fan_doc(max_concurrency=6), input=items(*"abcdefghij"))
    world = MemoryWorld()
    world.register_version(version.id, version.to_json())
    world.append(
        run_id,
        EventInput(
            type="RunStarted",
            occurrence_id="run-start",
            payload={"workflowVersionId": version.id, "input": items(*"abcdefghij")},
        ),
    )
    return world


def test_a_tracker_decides_with_the_fleets_slots_and_reports_what_they_hold_back(
    client: Any, keys: dict[str, str]
) -> None:
    queue = keys["queue"]
    window = _window(client, keys)
    world = _started_fan("run_window_test")
    registration = register(client, keys["slots"], "w", [queue], 2)
    try:
        tracker = RunTracker(world, "run_window_test", window=window)
        state = tracker.catch_up()
        ctx = tracker.context
        assert ctx is not None and ctx.max_in_flight == 2
        decision = decide(ctx, state)
        assert len(decision.dispatch) == 2
        assert decision.held_back == 4  # maxConcurrency 6 would have 6 in flight
        tracker.note_held_back(decision.held_back)
        assert window.backlog.total() == 4
        # A third slot joins: the next look keeps three in flight.
        other = register(client, keys["slots"], "w2", [queue], 1)
        try:
            widened = tracker.context
            assert widened is not None and widened.max_in_flight == 3
            assert widened is not ctx
            assert tracker.context is widened  # the same context while the fleet stays
            assert len(decide(widened, state).dispatch) == 3
        finally:
            other.stop()
        tracker.note_held_back(0)
        assert window.backlog.total() == 0
    finally:
        registration.stop()
        client.delete(keys["backlog"], backlog_list(queue))


def test_without_registered_slots_the_window_is_what_the_workflow_declares(
    client: Any, keys: dict[str, str]
) -> None:
    window = _window(client, keys)
    world = _started_fan("run_no_slots")
    tracker = RunTracker(world, "run_no_slots", window=window)
    state = tracker.catch_up()
    ctx = tracker.context
    assert ctx is not None and ctx.max_in_flight is None
    decision = decide(ctx, state)
    assert (len(decision.dispatch), decision.held_back) == (6, 0)
