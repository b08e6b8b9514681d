"""A sub-run's step tasks name the run that started it, where operators look: Flower.

A step task's arguments stay ids only (``run_id, step_path, attempt``); the task of a
sub-run's step also carries the note ``{'parentRunId': ...}`` in its message's
``kwargsrepr`` header, which Celery's task events — and so Flower's task list and task page
— show as the task's keyword arguments. The parent comes from the child's ``RunStarted``
(``parentRunId``), through the run's context, onto every attempt ``decide`` dispatches,
whoever sends it (the scheduler, a worker's fast path)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest

from little_dist.compiler import compile_lwir
from little_dist.events import EventInput
from little_dist.fleet.queue import CeleryQueue, MemoryQueue
from little_dist.fleet.sending import send_dispatch
from little_dist.run_state import materialize_run_state
from little_dist.scheduling import RunContext, StepDispatch, decide
from little_dist.world.base import World
from tests.fleet_processes import FleetEnv, FleetProcess, fleet_env, start_scheduler, start_worker
from tests.test_scheduler import Fleet, execute, fleet, spin
from tests.workflows_for_tests import chain_lwir

__all__ = ["fleet", "fleet_env"]  # the fixtures, imported for pytest

PARENT = "run_orchestrator_parent_1"


def _start(world: World, run_input: Any, *, parent: str | None) -> tuple[str, Any]:
    """What a client (or a workflow tool) does to start a run of a two-step chain; a
    sub-run's ``RunStarted`` carries its parent link."""
    version = compile_lwir(chain_lwir(2), input=run_input)
    run_id = f"run_{'sub_' if parent else ''}{uuid.uuid4().hex}"
    link = {} if parent is None else {"parentRunId": parent, "parentStepPath": "orchestrate"}
    world.register_version(version.id, version.to_json())
    world.append_batch(
        run_id,
        [
            EventInput(
                type="WorkflowVersionRegistered",
                occurrence_id="version-registered",
                payload={"workflowVersionId": version.id, "workflowVersionHash": version.hash},
            ),
            EventInput(
                type="RunStarted",
                occurrence_id="run-start",
                payload={**link, "workflowVersionId": version.id, "input": run_input},
            ),
        ],
    )
    return run_id, version


def test_decide_puts_the_parent_on_what_it_dispatches_and_compares_without_it() -> None:
    version = compile_lwir(chain_lwir(2), input={})
    started = [
        {
            "eventId": "evt_0000000000000001",
            "runId": "run_sub_x",
            "sequence": 1,
            "type": "RunStarted",
            "recordedAt": "2026-01-01T00:00:00.000Z",
            "payload": {"workflowVersionId": version.id, "input": {}, "parentRunId": PARENT},
        }
    ]
    state = materialize_run_state(started, run_id="run_sub_x")
    child = RunContext(version=version, run_input={}, run_id="run_sub_x", parent_run_id=PARENT)
    top = RunContext(version=version, run_input={}, run_id="run_sub_x")
    (dispatch,) = decide(child, state).dispatch
    (plain,) = decide(top, state).dispatch
    assert (dispatch.step_path, dispatch.parent_run_id) == ("s0", PARENT)
    assert plain.parent_run_id is None
    # The same attempt is the same dispatch, whoever built it (a worker rebuilds it from
    # the task's ids).
    assert dispatch == plain and hash(dispatch) == hash(plain)


def _dispatch(run_id: str, parent: str | None) -> StepDispatch:
    return StepDispatch(run_id, "s0", "s0", 1, "worker", "execute_step", parent_run_id=parent)


@pytest.mark.integration
def test_the_celery_message_of_a_sub_runs_step_names_the_parent(fleet_env: FleetEnv) -> None:
    import redis

    from little_dist.fleet.app import make_celery_app

    settings = fleet_env.settings()
    app = make_celery_app(settings)
    client = redis.Redis.from_url(fleet_env.redis_url)
    try:
        queue = CeleryQueue(app, settings)
        send_dispatch(queue, _dispatch("run_sub_child", PARENT))
        send_dispatch(queue, _dispatch("run_top", None))
        raw = client.lrange(settings.queue_for("worker"), 0, -1)
    finally:
        client.close()
        app.close()
    messages = {}
    for item in raw:
        message = json.loads(item)
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        messages[args[0]] = (message["headers"], args, kwargs)
    headers, args, kwargs = messages["run_sub_child"]
    assert headers["task"] == "little.execute_step"
    assert headers["kwargsrepr"] == "{'parentRunId': 'run_orchestrator_parent_1'}"
    # The task itself gets what it always got: ids only, no keyword arguments.
    assert (args, kwargs) == (["run_sub_child", "s0", 1], {})
    assert headers["argsrepr"] == "('run_sub_child', 's0', 1)"
    headers, args, kwargs = messages["run_top"]
    assert headers["kwargsrepr"] == "{}"
    assert (args, kwargs) == (["run_top", "s0", 1], {})


@pytest.mark.integration
def test_the_scheduler_sends_a_sub_runs_steps_with_the_parent(fleet: Fleet) -> None:
    app = MemoryQueue()
    scheduler = fleet.scheduler(app)
    child, version = _start(fleet.world, {}, parent=PARENT)
    top, _ = _start(fleet.world, {}, parent=None)
    scheduler.start()
    spin(scheduler, lambda: {task.run_id for task in app.sent} >= {child, top})
    sent = {task.run_id: task for task in app.take()}
    assert app.note_of(sent[child]) == {"parentRunId": PARENT}
    assert app.note_of(sent[top]) is None
    # The child's next step, decided after the first one's commit, names the parent too.
    execute(fleet.world, version, sent[child])
    spin(scheduler, lambda: any(task.step_path == "s1" for task in app.sent))
    (second,) = [task for task in app.take() if task.run_id == child]
    assert (second.step_path, app.note_of(second)) == ("s1", {"parentRunId": PARENT})


def _flower(fleet: FleetEnv, port: int, auth: str) -> FleetProcess:
    """Flower on the fleet's broker, as compose and deploy/ run it (stopped at teardown)."""
    argv = [sys.executable, "-m", "celery", "flower", f"--port={port}", "--address=127.0.0.1"]
    env = {**fleet.env, "CELERY_BROKER_URL": fleet.settings().broker_url}
    env["FLOWER_BASIC_AUTH"] = auth
    log = fleet.tmp / "flower.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    flower = FleetProcess("flower", argv, popen, log)
    fleet.processes.append(flower)
    return flower


def _get(port: int, path: str, auth: str) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read() or b"null")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def _until(check: Any, timeout: float, what: str, flower: FleetProcess) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        assert flower.alive(), flower.output()[-3000:]
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_flower_shows_which_run_started_a_sub_runs_step_tasks(fleet_env: FleetEnv) -> None:
    from tests.redis_server import free_port

    port, auth = free_port(), "little:flower-test-password"
    flower = _flower(fleet_env, port, auth)
    _until(lambda: _get(port, "/api/workers", auth) is not None, 60, "Flower", flower)
    # Every step through the broker (no eager continuation in the worker's slot), so both
    # of the child's steps are tasks: the first sent by the scheduler, the second by the
    # worker that committed the first.
    inline_off = {"LITTLE_WORKER_INLINE_STEPS": "0"}
    start_scheduler(fleet_env, env=inline_off)
    start_worker(fleet_env, roles=["worker"], env=inline_off)
    world = fleet_env.world()
    child, _ = _start(world, {}, parent=PARENT)
    top, _ = _start(world, {}, parent=None)
    with fleet_env.client() as client:
        for run_id in (child, top):
            assert client.wait(run_id, timeout=60).status == "completed"

    def tasks() -> dict[tuple[str, str], Any] | None:
        body = _get(port, "/api/tasks?limit=1000", auth) or {}
        found = {}
        for task in body.values():
            args = str(task.get("args"))
            for run_id in (child, top):
                for step in ("s0", "s1"):
                    if task.get("name") == "little.execute_step" and args.startswith(
                        f"('{run_id}', '{step}'"
                    ):
                        found[(run_id, step)] = task
        return found if len(found) == 4 else None

    seen = _until(tasks, 60, "Flower to list the four step tasks", flower)
    for step in ("s0", "s1"):
        assert seen[(child, step)]["kwargs"] == f"{{'parentRunId': '{PARENT}'}}"
        assert seen[(top, step)]["kwargs"] == "{}"
    # Flower's search finds a parent's children's tasks by the note.
    found = _get(port, f"/api/tasks?search=kwargs:parentRunId={PARENT}", auth)
    assert sorted(task["uuid"] for task in found.values()) == sorted(
        seen[(child, step)]["uuid"] for step in ("s0", "s1")
    )
