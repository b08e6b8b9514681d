"""``Client`` against a real fleet: Redis, ``weed mini`` and ``little worker`` subprocesses.

No scheduler runs in most of these tests: the client dispatches a run's first steps and
each worker advances the run after its commit (the fast path), which is enough for linear
runs and fan-outs. Scheduler behaviour (sweeps, lost dispatches, worker crashes) is tested
with the scheduler.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from little_dist.errors import RunEndedError
from little_dist.event_types.engine import CANCEL_EVENT_TYPE
from little_dist.events import EventInput
from little_dist.fleet.client import Client, RunMismatchError, WaitTimeoutError
from little_dist.fleet.sending import TASK_EXECUTE_STEP
from little_dist.run_state import materialize_run_state
from little_dist.settings import load_settings
from little_dist.world.base import RunNotFoundError
from little_dist.world.in_process import MemoryWorld
from tests import workflows_for_tests as wf
from tests.fleet_processes import FleetEnv, fleet_env, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

__all__ = ["fleet_env"]  # the fixture, re-exported for pytest


def _types(client: Client, run_id: str) -> list[str]:
    return [event.type for event in client.events(run_id)]


@pytest.mark.parametrize("pool", ["threads", "prefork"])
def test_submit_and_wait_runs_a_chain_on_a_worker(fleet_env: FleetEnv, pool: str) -> None:
    start_worker(fleet_env, pool=pool, concurrency=2)
    client = fleet_env.client()
    run_id = client.submit(wf.chain_lwir(4), {})
    state = client.wait(run_id, timeout=45)
    assert state.status == "completed", client.status(run_id).to_json()
    assert state.output == {"n": 3}
    types = _types(client, run_id)
    assert types[:2] == ["WorkflowVersionRegistered", "RunStarted"]
    assert types.count("StepCompleted") == 4
    assert types[-1] == "RunCompleted"
    view = client.status(run_id)
    assert view.status == "completed"
    assert view.steps == {
        "s0": "completed",
        "s1": "completed",
        "s2": "completed",
        "s3": "completed",
    }
    assert view.to_json()["output"] == {"n": 3}


def test_submit_is_idempotent_on_the_run_id(fleet_env: FleetEnv) -> None:
    client = fleet_env.client()
    doc = wf.single_tool_lwir("add", {"a": 1, "b": 2})
    run_id = client.submit(doc, {"x": 1}, run_id="run_idempotent_1")
    assert run_id == "run_idempotent_1"
    assert client.submit(doc, {"x": 1}, run_id=run_id) == run_id
    assert _types(client, run_id).count("RunStarted") == 1
    with pytest.raises(RunMismatchError, match="different input"):
        client.submit(doc, {"x": 2}, run_id=run_id)


def test_submit_many_runs_a_batch_whose_first_decisions_the_scheduler_makes(
    fleet_env: FleetEnv,
) -> None:
    from tests.fleet_processes import start_scheduler

    start_worker(fleet_env, concurrency=2)
    start_scheduler(fleet_env)
    client = fleet_env.client()
    doc = wf.chain_lwir(3)
    run_ids = client.submit_many(doc, [{"k": n} for n in range(6)])
    assert len(set(run_ids)) == 6
    for run_id in run_ids:
        state = client.wait(run_id, timeout=45)
        assert state.status == "completed", client.status(run_id).to_json()
        assert state.output == {"n": 2}


def test_submit_announces_the_run_to_the_sweeper_instead_of_signalling_it(
    fleet_env: FleetEnv,
) -> None:
    # The client makes the first decision and sends its tasks: the scheduler is not woken
    # to do the same, but the run is in its active runs before its start is recorded.
    import redis

    from little_dist.world.fleet_keys import active_runs_key

    client = fleet_env.client()
    raw = redis.Redis.from_url(fleet_env.redis_url)
    try:
        run_id = client.submit(wf.single_tool_lwir("add", {"a": 1, "b": 2}), {}, run_id="run_q")
        assert raw.sismember(active_runs_key(fleet_env.settings().signal_stream), run_id)
        entries = raw.xrange(fleet_env.signal_stream)
        assert [f[b"run"].decode() for _, f in entries if f[b"run"] == run_id.encode()] == []
        assert _types(client, run_id)[-2:] == ["RunStarted", "StepScheduled"]  # its decision
    finally:
        raw.close()
        client.close()


def test_a_task_delivered_twice_commits_once(fleet_env: FleetEnv) -> None:
    world = fleet_env.world()
    client = fleet_env.client(world=world)
    doc = wf.single_tool_lwir("record_branch", {"key": "once", "sleep": 1.0})
    side_effects = fleet_env.tmp / "side-effects.txt"
    # Recorded without any worker running: the first dispatch waits in the queue.
    run_id = client.submit(doc, {})
    # Deliver the same attempt twice more by hand, as a Redis broker may (celery#5935).
    for _ in range(2):
        client.app.send_task(
            TASK_EXECUTE_STEP, args=(run_id, "only", 1), queue=fleet_env.queues["worker"]
        )
    start_worker(fleet_env, env={wf.SIDE_EFFECTS_ENV: str(side_effects)}, concurrency=4)
    state = client.wait(run_id, timeout=45)
    assert state.status == "completed"
    types = _types(client, run_id)
    assert types.count("StepAttemptStarted") == 1
    assert types.count("StepCompleted") == 1
    time.sleep(1.5)  # let the duplicate deliveries finish (they find the attempt over)
    assert side_effects.read_text().splitlines() == ["once"]
    assert _types(client, run_id) == types


def test_cancel_ends_a_running_run_with_cause_cancelled(fleet_env: FleetEnv) -> None:
    start_worker(fleet_env)
    client = fleet_env.client()
    doc = wf.fan_out_lwir(max_concurrency=1)
    run_id = client.submit(doc, {"keys": ["a", "b", "c", "d"], "sleep": 1.5})
    _wait_for(lambda: "StepAttemptStarted" in _types(client, run_id))
    assert client.cancel(run_id, reason="test") is True
    state = client.wait(run_id, timeout=30)
    assert state.status == "failed"
    assert state.error["causeCode"] == "cancelled"
    assert CANCEL_EVENT_TYPE in _types(client, run_id)
    assert client.status(run_id).cancel_requested
    assert client.cancel(run_id) is False  # already over
    # Nothing new started after the cancel: at most the branch that was running finished.
    started = [e for e in client.events(run_id) if e.type == "StepAttemptStarted"]
    assert len(started) <= 3


def test_status_of_an_unknown_run_is_not_found(fleet_env: FleetEnv) -> None:
    client = fleet_env.client()
    with pytest.raises(RunNotFoundError):
        client.status("run_does_not_exist")


def test_wait_times_out_while_no_worker_runs_the_step(fleet_env: FleetEnv) -> None:
    client = fleet_env.client()
    run_id = client.submit(wf.single_tool_lwir(), {})
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError, match=run_id):
        client.wait(run_id, timeout=1.0)
    assert time.monotonic() - started < 5


def test_events_follow_stops_at_the_end_of_the_run(fleet_env: FleetEnv) -> None:
    start_worker(fleet_env)
    client = fleet_env.client()
    run_id = client.submit(wf.chain_lwir(2), {})
    seen = [event.type for event in client.events(run_id, follow=True, timeout=40)]
    assert seen[0] == "WorkflowVersionRegistered"
    assert seen[-1] == "RunCompleted"
    sequences = [event.sequence for event in client.events(run_id)]
    assert sequences == list(range(1, len(sequences) + 1))


def test_wait_on_the_fleet_folds_to_what_the_whole_log_folds_to(fleet_env: FleetEnv) -> None:
    # wait reads the harness traces without parsing them (the fold does not read them): its
    # final state is still the whole log's.
    start_worker(fleet_env)
    client = fleet_env.client()
    run_id = client.submit(wf.fan_out_lwir(), {"keys": ["a", "b", "c"], "sleep": 0})
    state = client.wait(run_id, timeout=60)
    assert state.status == "completed"
    events = client.world.list_events(run_id)
    assert any(e.type.startswith("harness.") for e in events)
    assert state == materialize_run_state(events)
    assert state.event_count == len(events)


def _wait_for(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail("condition not met in time")


def _steady_events(world: Any, run_id: str, count: int, every: float) -> None:
    for index in range(count):
        world.append(
            run_id,
            EventInput(type="StepScheduled", payload={"stepPath": f"s{index}", "stepId": "s"}),
        )
        time.sleep(every)


def test_wait_gives_up_on_time_on_a_run_that_keeps_recording_events() -> None:
    # A follow's timeout counts from the last event it saw; wait's counts from the call.
    world = MemoryWorld()
    client = Client(load_settings({}), world=world)
    run_id = "run_busy_but_endless"
    writer = threading.Thread(target=_steady_events, args=(world, run_id, 60, 0.05))
    writer.start()
    started = time.monotonic()
    with pytest.raises(WaitTimeoutError, match=run_id):
        client.wait(run_id, timeout=1.0)
    assert 1.0 <= time.monotonic() - started < 2.0
    writer.join()


def test_wait_folds_a_long_log_as_it_comes_into_the_final_state() -> None:
    world = MemoryWorld()
    client = Client(load_settings({}), world=world)
    run_id = "run_long_log"
    world.append(run_id, EventInput(type="RunStarted", payload={"workflowVersionId": "v"}))
    writer = threading.Thread(target=_steady_events, args=(world, run_id, 700, 0.0005))
    writer.start()
    writer.join()
    waiting: list[Any] = []
    waiter = threading.Thread(target=lambda: waiting.append(client.wait(run_id, timeout=20)))
    waiter.start()
    world.append(run_id, EventInput(type="RunCompleted", payload={"output": {"ok": True}}))
    with pytest.raises(RunEndedError):  # the end seals the log
        world.append(run_id, EventInput(type="StepScheduled", payload={"stepPath": "late"}))
    waiter.join(20)
    (state,) = waiting
    assert state.status == "completed" and state.output == {"ok": True}
    # Every event up to the end was folded (in several batches), and nothing after it.
    assert state.event_count == 702
    assert set(state.steps) == {f"s{index}" for index in range(700)}


def _answer_doc(model_slot: str, tools: list[str] | None = None) -> dict[str, Any]:
    """A plain LWIR (app-wide capabilities of tests.workflows_for_tests: model.fast, five
    tools) whose one ``ai.generate`` step asks ``model_slot``, offering ``tools``."""
    config: dict[str, Any] = {"model": model_slot, "prompt": "Answer."}
    if tools is not None:
        config["tools"] = tools
    return {
        "apiVersion": wf.API_VERSION,
        "kind": "Workflow",
        "metadata": {"name": "tests.answer"},
        "input": {"schema": {"type": "object"}},
        "output": {"schema": {"type": "string"}},
        "permissions": {"models": [model_slot], "tools": []},
        "steps": [
            {"id": "answer", "uses": "ai.generate", "with": config, "output": {"mode": "text"}}
        ],
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_answer_doc("openai/gpt-4o"), "model slot 'openai/gpt-4o' is not registered"),
        (_answer_doc("model.fast", ["add", "deleteAll"]), "names tool 'deleteAll'"),
    ],
    ids=["own-model", "unregistered-tool"],
)
def test_a_worker_refuses_a_step_naming_what_its_app_does_not_register(
    fleet_env: FleetEnv, doc: dict[str, Any], message: str
) -> None:
    # A client without the app module cannot check the document: the worker does, before
    # any model or tool is called.
    start_worker(fleet_env, roles=["worker"])
    client = fleet_env.client()
    assert client.registry is None
    run_id = client.submit(doc, {})
    state = client.wait(run_id, timeout=45)
    assert state.status == "failed"
    assert state.error["causeCode"] == "runtime_config_error"
    assert message in state.error["message"]
    types = _types(client, run_id)
    assert types.count("StepAttemptStarted") == 1  # not retried
    assert not [kind for kind in types if kind.startswith("harness.")]


def test_status_and_wait_price_unknown_models_with_the_clients_fallback() -> None:
    world = MemoryWorld()
    run_id = "run_priced_by_the_client"
    model = {"provider": "openai", "modelId": "gpt-4.1"}  # not in the bundled registry
    usage = {"inputTokens": 1_000_000, "outputTokens": 100_000}
    for index, (kind, payload) in enumerate(
        [
            ("RunStarted", {"workflowVersionId": "wfver_1"}),
            ("StepAttemptStarted", {"stepPath": "draft", "attempt": 1}),
            ("ModelCallCompleted", {"stepPath": "draft", "model": model, "usage": usage}),
            ("StepCompleted", {"stepPath": "draft", "attempt": 1, "output": "x"}),
            ("RunCompleted", {"output": "x"}),
        ]
    ):
        world.append(run_id, EventInput(type=kind, occurrence_id=f"e{index}", payload=payload))
    litellm_cost = (1_000_000 * 2.0 + 100_000 * 8.0) / 1e6  # litellm's map: $2/M in, $8/M out
    priced = Client(load_settings({}), world=world)
    assert priced.status(run_id).cost_usd == pytest.approx(litellm_cost)
    assert priced.wait(run_id, timeout=5).usage.cost_usd == pytest.approx(litellm_cost)
    registry_only = Client(load_settings({}), world=world, pricing_fallback=None)
    assert registry_only.status(run_id).cost_usd is None
    assert registry_only.wait(run_id, timeout=5).usage.cost_usd is None
