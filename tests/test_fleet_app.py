"""The fleet's Celery app, task names, dispatch under leases, and the world recipe (no network).

Nothing here talks to a broker: the app is configured and inspected, and sends go to a
recording stand-in for the Celery app.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest

from little_dist.compiler import compile_lwir
from little_dist.errors import InvalidInputError
from little_dist.event_types.engine import CANCEL_EVENT_TYPE
from little_dist.events import EventInput
from little_dist.fleet.app import TASK_ROLES, make_celery_app
from little_dist.fleet.client import submit_run
from little_dist.fleet.dispatch import advance_run
from little_dist.fleet.queue import MemoryQueue
from little_dist.fleet.run_tracker import RunTracker
from little_dist.fleet.sending import (
    TASK_EXECUTE_STEP,
    TASK_FIX_STEP,
    TASK_ORCHESTRATE,
    TASK_PLAN,
    TASK_SUBMIT_RUN,
    dispatch_lease_key,
    dispatch_ready,
)
from little_dist.fleet.tasks import TASK_NAMES
from little_dist.scheduling import StepDispatch, decide
from little_dist.settings import Settings, load_settings
from little_dist.world.factory import fleet_world_spec
from little_dist.world.in_process import MemoryWorld
from tests import workflows_for_tests as wf

S3 = {"LITTLE_S3_BUCKET": "little-test", "LITTLE_S3_ENDPOINT": "http://127.0.0.1:8333"}


def settings(**env: str) -> Settings:
    return load_settings(env)


# -- the app ---------------------------------------------------------------------------------


def test_the_app_has_one_queue_per_role_and_routes_every_task() -> None:
    s = settings(LITTLE_QUEUE_WORKER="steps", LITTLE_BROKER_URL="redis://broker:6379/2")
    app = make_celery_app(s)
    assert app.conf.broker_url == "redis://broker:6379/2"
    assert sorted(q.name for q in app.conf.task_queues) == sorted(
        ["little.planner", "little.orchestrator", "steps", "little.fixer"]
    )
    expected = {
        TASK_EXECUTE_STEP: "steps",
        TASK_FIX_STEP: "little.fixer",
        TASK_PLAN: "little.planner",
        TASK_ORCHESTRATE: "little.orchestrator",
        TASK_SUBMIT_RUN: "little.planner",
    }
    for name, queue in expected.items():
        route = app.amqp.router.route({}, name, (), {})
        assert route["queue"].name == queue, name
    assert set(TASK_ROLES) == set(expected)


def test_the_app_keeps_no_results_and_relies_on_nothing_celery_guarantees() -> None:
    app = make_celery_app(settings())
    conf = app.conf
    assert conf.task_ignore_result is True
    assert conf.result_backend is None
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.task_serializer == "json"
    assert conf.accept_content == ["json"]


def test_worker_options_come_from_the_settings() -> None:
    s = settings(
        LITTLE_WORKER_PREFETCH_MULTIPLIER="3",
        LITTLE_SOFT_SHUTDOWN_TIMEOUT="45",
        LITTLE_BROKER_VISIBILITY_TIMEOUT="7200",
        LITTLE_TASK_SOFT_TIME_LIMIT="100",
        LITTLE_TASK_TIME_LIMIT="120",
        LITTLE_WORKER_CONCURRENCY="16",
    )
    conf = make_celery_app(s).conf
    assert conf.worker_prefetch_multiplier == 3
    assert conf.worker_soft_shutdown_timeout == 45
    assert conf.broker_transport_options == {"visibility_timeout": 7200}
    assert (conf.task_soft_time_limit, conf.task_time_limit) == (100, 120)
    assert conf.worker_concurrency == 16
    assert make_celery_app(settings()).conf.worker_prefetch_multiplier == 1


def test_task_events_are_on_for_flower() -> None:
    conf = make_celery_app(settings()).conf
    assert conf.worker_send_task_events is True
    assert conf.task_send_sent_event is True


def test_the_five_tasks_are_registered_by_name() -> None:
    app = make_celery_app(settings())
    assert TASK_NAMES == (
        "little.execute_step",
        "little.fix_step",
        "little.plan",
        "little.orchestrate",
        "little.submit_run",
    )
    assert {name for name in app.tasks if name.startswith("little.")} == set(TASK_NAMES)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        (TASK_EXECUTE_STEP, ["run_id", "step_path", "attempt"]),
        (TASK_FIX_STEP, ["run_id", "step_path", "attempt"]),
        (TASK_PLAN, ["run_id"]),
        (TASK_ORCHESTRATE, ["run_id"]),
        (
            TASK_SUBMIT_RUN,
            [
                "workflow_id",
                "lwir",
                "input",
                "run_id",
                "budget_usd",
                "deadline",
                "timeout",
                "max_attempts",
                "callback_url",
            ],
        ),
    ],
)
def test_task_arguments_are_ids(name: str, params: list[str]) -> None:
    task = make_celery_app(settings()).tasks[name]
    assert list(inspect.signature(task.run).parameters) == params
    assert task.ignore_result is True


# -- dispatch under leases ----------------------------------------------------------------------


@dataclass
class RecordingCelery:
    """Stands in for a Celery app: records ``send_task`` calls (to test CeleryQueue)."""

    sent: list[tuple[str, tuple[Any, ...], str]] = field(default_factory=list)

    def send_task(self, name: str, args: tuple[Any, ...] = (), queue: str = "", **_: Any) -> None:
        self.sent.append((name, tuple(args), queue))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _started_run(world: MemoryWorld, doc: dict[str, Any], run_input: Any) -> str:
    run_id = submit_run(world, doc, run_input, run_id="run_dispatch_test")
    return run_id


def test_dispatch_sends_each_attempt_once_while_its_lease_lives() -> None:
    clock = Clock()
    world = MemoryWorld(clock=clock)
    s = settings(LITTLE_DISPATCH_RESEND_AFTER="30")
    app = MemoryQueue()
    run_id = _started_run(world, wf.chain_lwir(2), {})
    tracker = RunTracker(world, run_id)
    first = advance_run(world, app, s, tracker)
    assert [d.step_path for d in first.sent] == ["s0"]
    assert app.sent == [(TASK_EXECUTE_STEP, (run_id, "s0", 1), "worker")]
    # A second scheduler (or the same one) looking again sends nothing.
    again = advance_run(world, app, s, RunTracker(world, run_id))
    assert again.sent == ()
    assert len(app.sent) == 1
    # Not started when the lease expires: the message was lost, send it again.
    clock.now += 31
    resent = advance_run(world, app, s, RunTracker(world, run_id))
    assert [d.step_path for d in resent.sent] == ["s0"]
    assert len(app.sent) == 2


def test_dispatch_ready_takes_the_documented_lease() -> None:
    world = MemoryWorld()
    s = settings()
    run_id = _started_run(world, wf.chain_lwir(1), {})
    tracker = RunTracker(world, run_id)
    state = tracker.catch_up()
    assert tracker.context is not None
    decision = decide(tracker.context, state)
    world.append_batch(run_id, list(decision.events))
    dispatch = decision.dispatch[0]
    assert dispatch_lease_key(dispatch) == "{run_dispatch_test}:dispatch:s0:1"
    held = world.acquire_lease(dispatch_lease_key(dispatch), "someone-else", 30)
    assert held is not None
    app = MemoryQueue()
    sent = dispatch_ready(world, app, s, tracker.context, state, decision)
    assert sent == [] and app.sent == []
    world.release_lease(held)
    sent = dispatch_ready(world, app, s, tracker.context, state, decision)
    assert sent == [dispatch]


def test_fix_step_dispatches_go_to_the_fixer_queue() -> None:
    from little_dist.fleet.queue import CeleryQueue
    from little_dist.fleet.sending import send_dispatch

    app = RecordingCelery()
    queue = CeleryQueue(app, settings(LITTLE_QUEUE_FIXER="fix-q"))  # type: ignore[arg-type]
    dispatch = StepDispatch("run_x", "build", "build", 2, "fixer", "fix_step")
    send_dispatch(queue, dispatch)
    assert app.sent == [(TASK_FIX_STEP, ("run_x", "build", 2), "fix-q")]


def test_a_failed_send_releases_the_lease_for_the_next_look() -> None:
    class Down(MemoryQueue):
        def send(self, task: str, args: Any, role: Any) -> None:
            raise ConnectionError("broker down")

    world = MemoryWorld()
    run_id = _started_run(world, wf.chain_lwir(1), {})
    with pytest.raises(ConnectionError):
        advance_run(world, Down(), settings(), RunTracker(world, run_id))
    app = MemoryQueue()
    result = advance_run(world, app, settings(), RunTracker(world, run_id))
    assert [d.step_path for d in result.sent] == ["s0"]


def test_a_cancel_request_fails_the_run_on_the_next_advance() -> None:
    world = MemoryWorld()
    run_id = _started_run(world, wf.chain_lwir(2), {})
    app = MemoryQueue()
    tracker = RunTracker(world, run_id)
    advance_run(world, app, settings(), tracker)
    world.append(run_id, EventInput(type=CANCEL_EVENT_TYPE, occurrence_id="cancel", payload={}))
    result = advance_run(world, app, settings(), tracker)
    assert result.done
    assert result.state.status == "failed"
    assert result.state.error["causeCode"] == "cancelled"


def test_submitting_an_lwir_records_the_version_and_the_start() -> None:
    world = MemoryWorld()
    doc = wf.single_tool_lwir()
    run_id = submit_run(world, doc, {"a": 1})
    events = world.list_events(run_id)
    assert [(e.type, e.occurrence_id) for e in events] == [
        ("WorkflowVersionRegistered", "version-registered"),
        ("RunStarted", "run-start"),
    ]
    version = compile_lwir(doc, input={"a": 1})
    assert events[1].payload == {"workflowVersionId": version.id, "input": {"a": 1}}
    assert world.get_version(version.id)["id"] == version.id


def test_submitting_a_workflow_id_records_a_submission_and_sends_the_plan_task() -> None:
    world = MemoryWorld()
    app = MemoryQueue()
    run_id = submit_run(world, "triage", {"q": 1}, queue=app, settings=settings())
    events = world.list_events(run_id)
    assert [(e.type, e.payload) for e in events] == [
        ("little.run.submitted", {"workflowId": "triage", "input": {"q": 1}})
    ]
    assert app.sent == [(TASK_PLAN, (run_id,), "planner")]
    # Submitting the same run again sends nothing new while the plan lease lives.
    submit_run(world, "triage", {"q": 1}, run_id=run_id, queue=app, settings=settings())
    assert len(app.sent) == 1 and len(world.list_events(run_id)) == 1


# -- the world recipe --------------------------------------------------------------------------


def test_the_world_spec_gets_the_settings_signal_stream() -> None:
    s = settings(
        LITTLE_WORLD="redis://h:6379/0?key_prefix=t:",
        LITTLE_SIGNAL_STREAM="sig:x",
        LITTLE_ARCHIVE_TTL="60",
        **S3,
    )
    spec = fleet_world_spec(s)
    assert spec == ("redis://h:6379/0?key_prefix=t%3A&signal_stream=sig%3Ax&archive_ttl=60")


def test_the_redis_url_of_a_world_spec_has_none_of_the_worlds_options() -> None:
    # redis-py refuses an option it does not know (the scheduler's client failed on
    # ?hot_artifact_limit=, which the operations guide recommends for a Redis cluster).
    from little_dist.world.factory import redis_url_of

    spec = (
        "redis://h:6379/0?key_prefix=t:&s3_prefix=p/&archive_ttl=1"
        "&signal_stream=s&hot_artifact_limit=0&socket_timeout=5"
    )
    assert redis_url_of(spec) == "redis://h:6379/0?socket_timeout=5"


def test_a_world_spec_with_another_signal_stream_is_refused() -> None:
    s = settings(
        LITTLE_WORLD="redis://h:6379/0?signal_stream=other", LITTLE_SIGNAL_STREAM="sig", **S3
    )
    with pytest.raises(InvalidInputError, match=r"signal_stream='other'.*LITTLE_SIGNAL_STREAM"):
        fleet_world_spec(s)
    same = settings(LITTLE_WORLD="redis://h/0?signal_stream=sig", LITTLE_SIGNAL_STREAM="sig", **S3)
    assert "signal_stream=sig" in fleet_world_spec(same)


def test_without_a_world_the_redis_url_is_used_when_s3_is_set() -> None:
    assert fleet_world_spec(settings(LITTLE_REDIS_URL="redis://r:1/2", **S3)).startswith(
        "redis://r:1/2?signal_stream=little%3Asignals"
    )
    with pytest.raises(InvalidInputError, match="LITTLE_WORLD"):
        fleet_world_spec(settings())


def test_a_local_world_spec_is_kept_as_is(tmp_path: Any) -> None:
    assert fleet_world_spec(settings(LITTLE_WORLD=str(tmp_path))) == str(tmp_path)


def test_each_app_runs_its_own_runtime() -> None:
    # Celery shares tasks across apps by default; ours must not (each worker app has its
    # own world and registry).
    from little_dist.fleet.tasks import WorkerRuntime

    class Named(WorkerRuntime):
        def orchestrate(self, run_id: str) -> str:
            return f"{self.name}:{run_id}"

    first, second = Named(settings()), Named(settings())
    first.name, second.name = "first", "second"
    app_one = make_celery_app(settings(), runtime=first)
    app_two = make_celery_app(settings(), runtime=second)
    assert app_one.tasks[TASK_ORCHESTRATE].run("run_a") == "first:run_a"
    assert app_two.tasks[TASK_ORCHESTRATE].run("run_a") == "second:run_a"
