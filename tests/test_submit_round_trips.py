"""A submit on a fleet whose world, scheduler and broker share one Redis is one round trip
(issue 24, "A run costs what it must").

There one script (``RedisS3World.start_and_send``) claims the run id, adds the run to the
scheduler's active runs, records its start and first decision, takes the dispatch lease and
pushes the first task's Celery message, printed by :mod:`little_dist.fleet.task_messages`
from templates captured from Celery's own ``send_task``. These tests count the round trips
(every packed send of redis-py in the submitting thread), check that the message is byte for
byte what ``send_task`` sends, that a broker on another Redis database still gets today's
step-by-step submit, that submitting twice is still one run, and that a real worker runs a
run submitted this way to its end.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
import redis.connection

from little_dist.fleet.client import Client, RunMismatchError
from little_dist.fleet.queue import CeleryQueue
from little_dist.world.fleet_keys import active_runs_key
from little_dist.world.redis_s3 import RedisS3World
from tests import workflows_for_tests as wf
from tests.fleet_processes import FleetEnv, fleet_env, start_worker
from tests.request_counts import counted

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]


def _queued(fleet: FleetEnv, role: str = "worker", url: str | None = None) -> list[dict[str, Any]]:
    """The messages waiting in ``role``'s queue list (oldest first), read without taking."""
    client = redis.Redis.from_url(url or fleet.redis_url)
    try:
        raw = client.lrange(fleet.queues[role], 0, -1)
    finally:
        client.close()
    return [json.loads(item) for item in reversed(raw)]


def _args_of(message: dict[str, Any]) -> list[Any]:
    body = json.loads(base64.b64decode(message["body"]))
    return list(body[0])


@contextmanager
def _inside_a_task(queue: CeleryQueue) -> Iterator[None]:
    """As if a worker ran a task now (Celery's ``current_worker_task``): what is sent is
    its child (``parent_id``, ``root_id``)."""
    from celery._state import _task_stack

    task = queue.app.tasks["little.plan"]
    task.push_request(id="task-parent", root_id="task-root", called_directly=False)
    _task_stack.push(task)
    try:
        yield
    finally:
        _task_stack.pop()
        task.pop_request()


def _own_event(pubsub: Any, queue: str) -> Any:
    """The next ``task-sent`` event of a task sent to ``queue``: the channel is the broker
    database's, and other tests running at the same time send tasks to their own queues."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        event = pubsub.get_message(timeout=1)
        if event is None or event["type"] != "message":
            continue
        body = json.loads(base64.b64decode(json.loads(event["data"])["body"]))
        if body.get("queue") == queue:
            return event
    raise AssertionError(f"no task-sent event for {queue} within 10 s")


def test_a_printed_message_is_what_send_task_sends(fleet_env: FleetEnv) -> None:
    """Byte for byte, apart from the ids and the event's time: with and without a note, and
    from inside a task (whose child the task sent is)."""
    client = fleet_env.client()
    queue = client.queue
    assert isinstance(queue, CeleryQueue)
    settings = fleet_env.settings()
    listen = redis.Redis.from_url(fleet_env.redis_url)
    db = queue.broker_db
    assert db is not None
    pubsub = listen.pubsub()
    pubsub.subscribe(f"/{db}.celeryev/task.sent")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    # (The task context finalizes the app: send_task then adds the registered task's
    # options, its time limits, to what it sends; the last case is sent so.)
    cases: list[tuple[dict[str, str] | None, bool]] = [
        (None, False),
        ({"parentRunId": "run_parent"}, False),
        (None, True),
        ({"parentRunId": "run_parent"}, False),
    ]
    for note, in_task in cases:
        args = ("run_x", "fan[3].step", 2)
        with _inside_a_task(queue) if in_task else contextlib.nullcontext():
            queue.send("little.execute_step", args, "worker", note=note)
        raw = listen.rpop(settings.queue_for("worker"))
        assert raw is not None
        event = _own_event(pubsub, settings.queue_for("worker"))
        sent, sent_event = json.loads(raw), json.loads(event["data"])
        stamp = json.loads(base64.b64decode(sent_event["body"]))
        push = queue.commands("little.execute_step", args, "worker", note=note)
        assert push is not None
        assert push.queue == settings.queue_for("worker")
        assert push.topic == event["channel"].decode()
        # A fresh print differs in its ids only.
        assert push.message != raw.decode()
        printer = _print_in_task if in_task else _print
        again = printer(queue, args, note, sent, sent_event, stamp)
        assert again.message == raw.decode()
        assert again.event == event["data"].decode()
        assert (sent["headers"]["parent_id"] == "task-parent") is in_task
    pubsub.close()
    listen.close()


def _print(
    queue: CeleryQueue,
    args: tuple[Any, ...],
    note: dict[str, str] | None,
    sent: dict[str, Any],
    sent_event: dict[str, Any],
    stamp: dict[str, Any],
) -> Any:
    """The push of what ``sent`` sent, with its ids and its event's time and clock."""
    messages = queue._messages
    assert messages is not None
    return messages.push(
        "little.execute_step",
        args,
        "worker",
        note=note,
        task_id=sent["headers"]["id"],
        delivery_tags=(
            sent["properties"]["delivery_tag"],
            sent_event["properties"]["delivery_tag"],
        ),
        timestamp=stamp["timestamp"],
        clock=stamp["clock"],
    )


def _print_in_task(
    queue: CeleryQueue,
    args: tuple[Any, ...],
    note: dict[str, str] | None,
    sent: dict[str, Any],
    sent_event: dict[str, Any],
    stamp: dict[str, Any],
) -> Any:
    with _inside_a_task(queue):
        return _print(queue, args, note, sent, sent_event, stamp)


def test_a_submit_on_one_redis_is_one_round_trip(fleet_env: FleetEnv) -> None:
    client = fleet_env.client()
    world = client.world
    assert isinstance(world, RedisS3World)
    doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
    client.submit(doc, {"x": 0})  # (stores the version's shared part, captures templates)
    assert client._at_once() is not None
    with counted(world) as counts:
        run_id = client.submit(doc, {"x": 1})
    assert counts == {"redis": 1, "s3": 0}
    events = world.list_events(run_id)
    assert [event.type for event in events] == [
        "WorkflowVersionRegistered",
        "RunStarted",
        "StepScheduled",
    ]
    assert [event.sequence for event in events] == [1, 2, 3]
    # The ids stored are the ids the sequences hash to (the fold reads them back).
    assert all(event.event_id.startswith("evt_") for event in events)
    check = redis.Redis.from_url(fleet_env.redis_url)
    assert check.sismember(active_runs_key(fleet_env.settings().signal_stream), run_id)
    check.close()
    queued = [m for m in _queued(fleet_env) if _args_of(m)[0] == run_id]
    assert len(queued) == 1
    assert _args_of(queued[0]) == [run_id, "only", 1]
    assert queued[0]["headers"]["task"] == "little.execute_step"
    # The dispatch lease is held: nobody else sends that attempt meanwhile.
    assert world.acquire_lease(f"{{{run_id}}}:dispatch:only:1", "another", 5) is None

    # A run id given by the caller: its S3 look runs beside the rest, still one round trip.
    given = f"run_given_{uuid.uuid4().hex[:8]}"
    with counted(world) as counts:
        assert client.submit(doc, {"x": 2}, run_id=given) == given
    assert counts == {"redis": 1, "s3": 1}
    assert [e.type for e in world.list_events(given)][-1] == "StepScheduled"


def test_submitting_twice_is_one_run(fleet_env: FleetEnv) -> None:
    client = fleet_env.client()
    world = client.world
    doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
    run_id = f"run_twice_{uuid.uuid4().hex[:8]}"
    assert client.submit(doc, {"x": 1}, run_id=run_id) == run_id
    assert client.submit(doc, {"x": 1}, run_id=run_id) == run_id
    assert [e.type for e in world.list_events(run_id)] == [
        "WorkflowVersionRegistered",
        "RunStarted",
        "StepScheduled",
    ]
    assert len([m for m in _queued(fleet_env) if _args_of(m)[0] == run_id]) == 1
    with pytest.raises(RunMismatchError):
        client.submit(doc, {"x": 2}, run_id=run_id)
    assert len(world.list_events(run_id)) == 3


def test_a_broker_elsewhere_gets_the_step_by_step_submit(fleet_env: FleetEnv) -> None:
    # The broker on another database of the same server: not one Redis for the script.
    base, _, db = fleet_env.redis_url.rpartition("/")
    elsewhere = f"{base}/{(int(db or 0) + 1) % 16}"
    client = Client(fleet_env.settings(LITTLE_BROKER_URL=elsewhere))
    try:
        world = client.world
        doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
        client.submit(doc, {"x": 0})
        assert client._at_once() is None
        with counted(world) as counts:
            run_id = client.submit(doc, {"x": 1})
        assert counts["redis"] > 1
        assert [e.type for e in world.list_events(run_id)][-1] == "StepScheduled"
        # Celery sent the task to the broker's own database, not the world's.
        assert not [m for m in _queued(fleet_env) if _args_of(m)[0] == run_id]
        there = [m for m in _queued(fleet_env, url=elsewhere) if _args_of(m)[0] == run_id]
        assert len(there) == 1
    finally:
        client.close()
        cleanup = redis.Redis.from_url(elsewhere)
        for queue in fleet_env.queues.values():
            cleanup.delete(queue, f"_kombu.binding.{queue}")
        cleanup.close()


def test_a_run_submitted_in_one_round_trip_runs_to_its_end(fleet_env: FleetEnv) -> None:
    start_worker(fleet_env, timeout=90)
    client = fleet_env.client()
    world = client.world
    assert isinstance(world, RedisS3World)
    doc = wf.chain_lwir(3)
    client.submit(doc, {"n": 0})
    assert client._at_once() is not None
    with counted(world) as counts:
        run_id = client.submit(doc, {"n": 1})
    assert counts == {"redis": 1, "s3": 0}
    state = client.wait(run_id, timeout=90)
    assert state.status == "completed"
    assert all(step.status == "completed" for step in state.steps.values())
    # Exactly one StepScheduled per step: nothing decided twice.
    scheduled = [e for e in world.list_events(run_id) if e.type == "StepScheduled"]
    assert len(scheduled) == len({e.payload["stepPath"] for e in scheduled}) == 3


def test_the_submit_task_starts_a_run_in_one_script_too(fleet_env: FleetEnv) -> None:
    """``little.submit_run`` on a worker goes the same way: no scheduler runs here, yet the
    run is among the scheduler's active runs (the script added it; the step-by-step way
    leaves that to the scheduler its start signals) and its start signalled nobody."""
    from little_dist.fleet.sending import TASK_SUBMIT_RUN

    start_worker(fleet_env, timeout=90)
    client = fleet_env.client()
    run_id = f"run_task_{uuid.uuid4().hex[:8]}"
    client.app.send_task(
        TASK_SUBMIT_RUN,
        kwargs={"lwir": wf.chain_lwir(2), "input": {"n": 1}, "run_id": run_id},
        queue=fleet_env.queues["planner"],
    )
    state = client.wait(run_id, timeout=90)
    assert state.status == "completed"
    settings = fleet_env.settings()
    check = redis.Redis.from_url(fleet_env.redis_url)
    try:
        assert check.sismember(active_runs_key(settings.signal_stream), run_id)
        signals = check.xrange(settings.signal_stream)
    finally:
        check.close()
    started = [
        fields
        for _, fields in signals
        if fields[b"run"].decode() == run_id and int(fields[b"seq"]) <= 3
    ]
    assert started == []
